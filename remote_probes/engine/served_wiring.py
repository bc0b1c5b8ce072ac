"""The HF hidden_states indices an engine feeds a draft: SGLang's rule (nested eagle_config ids + 1, else its
default), or the installed vLLM's own reading of the draft's config (vllm_capture.py)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from remote_probes.eagle3.wiring import ENGINES, default_wiring, nested_ids
from remote_probes.engine.vllm_capture import capture_rules, find_vllm_root, vllm_wiring


def server_wiring(config: Dict[str, Any], n_layers: int, engine: str = "sglang") -> Optional[List[int]]:
    """The HF indices the engine will feed this draft, or None when they fall outside the target."""
    if engine not in ENGINES:
        raise ValueError("engine must be one of %s, got %r" % (", ".join(ENGINES), engine))
    if engine == "vllm":
        # the installed vLLM's own reading (vllm_capture.py), else the newest vLLM read (0.33.0)
        root = find_vllm_root()
        wired: Optional[List[int]] = vllm_wiring(config, n_layers, capture_rules(root) if root else None)
        return wired

    ids = nested_ids(config)
    wiring = [i + 1 for i in ids] if ids is not None else default_wiring(n_layers)
    if any(i < 0 or i > n_layers for i in wiring):
        return None
    return wiring
