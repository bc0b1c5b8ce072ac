"""The target's hidden states from a real SGLang server (``/generate`` with ``return_hidden_states``), for the draft
test where the target does not fit one process: the SGLang twin of engine_states.py (vLLM). Standard library at
import; torch (present wherever a draft test runs) only to build the tensors.

The server is started with ``capture_env(layers, architectures)`` in its environment and ``capture_argv()`` (or
``capture_flags()``) on its command line: SGLang loads the target's class from ``SGLANG_EXTERNAL_MODEL_PACKAGE``
(srt/models/registry.py:133-134 in 0.5.15.post1), here sglang_capture_model/capturing_target.py from the probes tree
on its PYTHONPATH, which is SGLang's own class with EAGLE-3 aux capture turned on for the layers asked (or SGLang's
default ones, ``layers=None``). ``--enable-return-hidden-states`` lets a request ask for them
(srt/managers/tokenizer_manager.py:1015-1016 refuses it otherwise); the radix cache is off and the prefill chunk is
the context length, because the prefill's rows are sliced ``len(origin_input_ids)`` at a time from the forward's
rows (srt/managers/scheduler_components/batch_result_processor.py:465-483): a cached prefix (absent from the
forward) or an earlier chunk (whose rows are dropped, :274-279) would shift them. The client refuses a prefill whose
rows are not one per prompt token.

The answer (measured on the lab's target): ``meta_info.hidden_states`` is a list whose first item is the prompt's
rows (one per prompt token, appended as one list by the prefill, batch_result_processor.py:472-482) and whose next
items are one row per decode step (:702-711), the state of the token that step ran: the generated tokens but the
last. Each row is the captured layers, ascending ids, concatenated (srt/layers/logits_processor.py:672-674), so
``hidden_size * len(layers)`` wide. The ids are HF ``hidden_states`` indices, as the vLLM path's: id k < N is
transformers' ``hidden_states[k]`` (0 the embedding output; k the state after layer k - 1's residual add); id N is
the last layer's output BEFORE the final norm, where transformers' ``hidden_states[N]`` is after it (the caller
applies the norm, as draft_test.py does for the vLLM path). The rows travel as JSON numbers: float32 values survive
exactly; the text is ~10-20 bytes per value, where vLLM's file is 4.

Public API: ``capture_env(layers, architectures, root=None) -> env``, ``capture_flags() -> {flag: value}``,
``capture_argv() -> [str]``, ``target_architectures(target_dir)``, ``capture(base_url, prompts, max_tokens, served,
timeout, hidden_size=None) -> [{"token_ids", "generated", "states": {id: tensor [tokens, hidden]}, "seconds"}]``
(engine_states.capture's shape).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, Optional, Sequence

from remote_probes.agent.protocol import ProbeFailure
from remote_probes.engine.capture_http import post_json

PACKAGE = "remote_probes.engine.sglang_capture_model"
LAYERS_ENV = "ORCHESTRATOR_SGLANG_CAPTURE_LAYERS"  # capturing_target.py reads them (it is not imported here)
ARCHS_ENV = "ORCHESTRATOR_SGLANG_CAPTURE_ARCHITECTURES"
#: the probes tree's root (the directory holding remote_probes/), which the server needs on its PYTHONPATH
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def capture_env(layers: Optional[Sequence[int]], architectures: Sequence[str],
                root: Optional[str] = None) -> Dict[str, str]:
    """The environment that makes an SGLang server capture these HF layer ids (None: SGLang's own default, the ids
    an EAGLE-3 server captures for a draft that names none) for a target of these architectures (its config.json's
    ``architectures``). PYTHONPATH is the probes root alone: prepend it to the server's own."""
    if not architectures:
        raise ProbeFailure("bad_args", "capture_env: the target's architectures are needed (config.json)")
    ids = "default" if layers is None else json.dumps(sorted({int(i) for i in layers}))
    return {"SGLANG_EXTERNAL_MODEL_PACKAGE": PACKAGE, "PYTHONPATH": root or ROOT, LAYERS_ENV: ids,
            ARCHS_ENV: ",".join(architectures)}


def capture_flags(context_length: Optional[int] = None) -> Dict[str, Any]:
    """The server flags a capture needs (True: a bare switch). ``context_length`` (the server's): chunks that large,
    so that no prompt is split (-1, no chunking, makes SGLang reserve ``max_prefill_tokens`` of activation memory
    instead, server_args.py:3634-3637, which left nothing for the KV cache on a 20 GB CPU host)."""
    flags: Dict[str, Any] = {"enable-return-hidden-states": True, "disable-radix-cache": True}
    if context_length:
        flags["chunked-prefill-size"] = int(context_length)
    return flags


def capture_argv(context_length: Optional[int] = None) -> List[str]:
    out: List[str] = []
    for flag, value in capture_flags(context_length).items():
        out += ["--" + flag] if value is True else ["--" + flag, str(value)]
    return out


def target_architectures(target_dir: str) -> List[str]:
    with open(os.path.join(target_dir, "config.json"), encoding="utf-8") as fh:
        archs = json.load(fh).get("architectures") or []
    return [str(a) for a in archs]


def rows_of(answer: Dict[str, Any], prompt_len: int) -> List[List[float]]:
    """The answer's state rows, one per token the engine ran: the prompt's (the prefill's one list) then one per
    decode step."""
    meta = answer.get("meta_info") or {}
    states = meta.get("hidden_states")
    if not isinstance(states, list) or not states:
        raise ProbeFailure("engine_capture", "the server returned no hidden states: it was not started with "
                           "--enable-return-hidden-states (capture_argv) (its meta_info keys: %s)" % sorted(meta))
    first = states[0]
    if not (isinstance(first, list) and first and isinstance(first[0], list)):
        raise ProbeFailure("engine_capture", "the hidden states do not start with the prompt's rows: an SGLang "
                           "whose answer this reader does not know")
    if len(first) != prompt_len:
        raise ProbeFailure("engine_capture", "the prefill returned %d rows for a %d-token prompt: a cached prefix "
                           "or a chunked prefill (start the server with capture_argv)" % (len(first), prompt_len))
    return list(first) + list(states[1:])


def capture(base_url: str, prompts: List[List[int]], max_tokens: int, served: Sequence[int],
            timeout: float = 600.0, hidden_size: Optional[int] = None) -> List[Dict[str, Any]]:
    """Greedy generations of token-id prompts on a server started with ``capture_env(served, ...)`` (or SGLang's
    default, then ``served`` is what target_capture.py reads as its default ids); per prompt the tokens the engine
    ran (``token_ids``: the prompt and the generated ones but the last), every generated token (``generated``) and
    the states by layer id (each [tokens, hidden], float32). ``hidden_size`` (the target's), when given, also
    checks that the rows hold exactly ``len(served)`` layers."""
    import torch

    order = sorted({int(i) for i in served})
    out = []
    for ids in prompts:
        started = time.monotonic()
        answer = post_json(base_url.rstrip("/") + "/generate",
                       {"input_ids": list(ids), "return_hidden_states": True,
                        "sampling_params": {"temperature": 0, "max_new_tokens": max_tokens}}, timeout)
        generated = answer.get("output_ids")
        if not isinstance(generated, list) or not generated:
            raise ProbeFailure("engine_capture", "the engine's answer has no output_ids: %s"
                               % json.dumps(answer)[:300])
        rows = rows_of(answer, len(ids))
        if len(rows) != len(ids) + len(generated) - 1:
            raise ProbeFailure("engine_capture", "%d state rows for %d prompt and %d generated tokens (expected "
                               "one per token but the last)" % (len(rows), len(ids), len(generated)))
        states = torch.tensor(rows, dtype=torch.float32)
        width = int(states.shape[1])
        if width % len(order) or (hidden_size is not None and width != hidden_size * len(order)):
            raise ProbeFailure("engine_capture", "the rows are %d wide; the server was said to capture %d layers "
                               "(%s)%s: was it started with other capture layers, or without the capture model?"
                               % (width, len(order), order,
                                  "" if hidden_size is None else " of %d" % hidden_size))
        hidden = width // len(order)
        out.append({"token_ids": list(ids) + [int(t) for t in generated[:-1]],
                    "generated": [int(t) for t in generated],
                    "states": {layer: states[:, slot * hidden:(slot + 1) * hidden]
                               for slot, layer in enumerate(order)},
                    "seconds": round(time.monotonic() - started, 3)})
    return out
