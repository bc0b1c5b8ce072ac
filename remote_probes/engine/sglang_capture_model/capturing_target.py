"""The target's SGLang class with EAGLE-3 aux-state capture on, so that ``/generate`` with ``return_hidden_states``
returns the captured layers (imported by the SGLang server through ``SGLANG_EXTERNAL_MODEL_PACKAGE``; stdlib at
import, sglang found by ``importlib`` in the server's own process; verified on 0.5.15.post1).

Why a class: SGLang sets its capture layers only when the server runs EAGLE-3 itself
(srt/model_executor/model_runner.py:436-479, "TODO: expose this to server args?"), which does not run on a CPU and
drafts besides; without it ``/generate``'s hidden states are the final normed state
(srt/layers/logits_processor.py:657-675: the aux states concatenated when the model has them, else the last state).
This module subclasses whatever the registry resolves for each architecture in ``ARCHS_ENV`` (the target's
config.json ``architectures``; the stock table is complete when this module is imported, registry.py:131-134) under
the same name, and its ``__init__`` turns the capture on:

- ``LAYERS_ENV`` unset or ``default``: ``set_eagle3_layers_to_capture(None)``, SGLang's own default (llama.py:815-818
  for a Llama: ``[2, N // 2, N - 3]`` entry indices, no ``+ 1``), exactly what an EAGLE-3 server whose draft names
  no ids captures;
- a JSON list of HF ``hidden_states`` ids (id k = the output of decoder layer k - 1, 0 the embedding output, N the
  last layer's output): ids 1..N-1 through SGLang's own ``set_eagle3_layers_to_capture([k - 1, ...])``, which adds 1
  (llama.py:819-823) so that the loop appends ``hidden_states + residual`` at the entry of layer k (llama.py:406-408),
  i.e. after layer k - 1's residual add. The loop cannot give 0 or N: at layer 0's entry ``residual`` is None
  (llama.py:397, ``None + tensor`` raises) and it ends before the final norm. So 0 is the ``embed_tokens`` output (a
  forward hook; cloned, because the fused add-norms later update the residual, which is that tensor, in place) and N
  is ``hidden_states + residual`` as they enter the final norm (a forward pre-hook on ``norm``, llama.py:425), both
  merged into the decoder's aux list by a forward hook on the decoder, in ascending id order, as the loop's own.

The states the server returns are therefore the ids in ascending order, each ``hidden_size`` wide, concatenated
(logits_processor.py:672-674). Only the pipeline's last rank captures (llama.py:812-813); under tensor parallelism
every rank holds the whole state after the all-reduce. Forward hooks are PyTorch's own extension point; the classes
and their forward passes stay SGLang's.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from typing import Any, Dict, List, Optional

LAYERS_ENV = "ORCHESTRATOR_SGLANG_CAPTURE_LAYERS"
ARCHS_ENV = "ORCHESTRATOR_SGLANG_CAPTURE_ARCHITECTURES"
logger = logging.getLogger(__name__)


def requested_ids(raw: Optional[str]) -> Optional[List[int]]:
    """The HF ids ``LAYERS_ENV`` names, ascending, or None for SGLang's default."""
    if raw is None or raw.strip() in ("", "default"):
        return None
    ids = json.loads(raw)
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and i >= 0 for i in ids):
        raise ValueError("%s must be a JSON list of layer ids >= 0 or 'default', got %r" % (LAYERS_ENV, raw))
    return sorted(set(ids))


def _decoder(model: Any) -> Any:
    """The module that runs the layer loop: ``model.model``, or a wrapper's ``language_model.model``."""
    for owner in (model, getattr(model, "language_model", None)):
        inner = getattr(owner, "model", None)
        if inner is not None and hasattr(inner, "layers") and hasattr(inner, "layers_to_capture"):
            return inner
    raise RuntimeError("%s has no decoder with `layers` and `layers_to_capture`: capture is not supported for it"
                       % type(model).__name__)


def _num_layers(model: Any) -> int:
    config = model.config
    text = getattr(config, "text_config", None)
    return int((text or config).num_hidden_layers)


def install(model: Any, ids: Optional[List[int]]) -> List[int]:
    """Turn the capture on for ``model`` (built by SGLang); returns the HF ids it captures, ascending."""
    if ids is None:
        model.set_eagle3_layers_to_capture(None)
        captured = sorted(int(i) for i in _decoder(model).layers_to_capture)  # entry index i = HF id i
        logger.info("orchestrator capture: SGLang's default layers, HF ids %s", captured)
        return captured
    n = _num_layers(model)
    wrong = [i for i in ids if i > n]
    if wrong:
        raise ValueError("%s: layer ids %s beyond the target's %d layers" % (LAYERS_ENV, wrong, n))
    decoder = _decoder(model)
    middle = [k for k in ids if 0 < k < n]
    if middle:
        model.set_eagle3_layers_to_capture([k - 1 for k in middle])
    else:
        model.capture_aux_hidden_states = True
    if 0 in ids or n in ids or not middle:
        edges: Dict[int, Any] = {}
        if 0 in ids:
            decoder.embed_tokens.register_forward_hook(lambda _m, _a, out: edges.__setitem__(0, out.clone()))
        if n in ids:
            def before_norm(_m: Any, args: Any, kwargs: Dict[str, Any]) -> None:
                x = args[0] if args else kwargs["x"]
                residual = args[1] if len(args) > 1 else kwargs.get("residual")
                edges[n] = x.clone() if residual is None else x + residual
            decoder.norm.register_forward_pre_hook(before_norm, with_kwargs=True)

        def merged(_m: Any, _args: Any, output: Any) -> Any:
            hidden, aux = output if isinstance(output, tuple) and isinstance(output[-1], list) else (output, [])
            first = [edges.pop(0)] if 0 in edges else []
            last = [edges.pop(n)] if n in edges else []
            return hidden, first + list(aux) + last
        decoder.register_forward_hook(merged)
    logger.info("orchestrator capture: HF ids %s (%d layers)", ids, n)
    return list(ids)


def capturing(base: type) -> type:
    """``base`` under its own name (the registry's key), capturing ``LAYERS_ENV``'s layers once built."""
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        base.__init__(self, *args, **kwargs)  # type: ignore[misc]
        install(self, requested_ids(os.environ.get(LAYERS_ENV)))

    return type(base.__name__, (base,), {"__init__": __init__, "__module__": __name__,
                                         "__doc__": "%s capturing EAGLE-3 aux states (orchestrator)" % base.__name__})


def _entries() -> List[type]:
    archs = [a for a in os.environ.get(ARCHS_ENV, "").split(",") if a]
    if not archs:
        return []
    registry = importlib.import_module("sglang.srt.models.registry").ModelRegistry
    missing = [a for a in archs if a not in registry.models]
    if missing:
        raise ImportError("SGLang has no model class for %s" % missing)
    return [capturing(registry.models[a]) for a in archs]


EntryClass = _entries()
