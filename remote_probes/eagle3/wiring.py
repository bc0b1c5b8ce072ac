"""Which target hidden states an EAGLE-3 draft is fed ("wiring"), by engine, and the candidates worth testing.

Standard library only (draft_inspect imports it). A wiring is a list of HF ``hidden_states`` indices of the
target: 0 = embedding output, i = output of decoder layer i-1 (= the input of layer i, where SGLang captures),
N = after the final norm. Conventions (research/sglang-eagle3-facts.md, eagle3-draft-spec.md):

- SGLang / SpecForge: nested ``eagle_config.eagle_aux_hidden_state_layer_ids`` are layer ids captured at layer
  ENTRY, so the HF index is id + 1; the top-level key is ignored; without nested ids: ``[2, N//2, N-3]``.
- vLLM / speculators: top-level ``eagle_aux_hidden_state_layer_ids`` used as HF indices, in layer order; else the
  same default; version by version (0.11.0 reads no ids at all) in vllm_capture.py, which ``server_wiring`` follows.

Public API: ``nested_ids(config)``, ``top_level_ids(config)``, ``default_wiring(n_layers)``,
(what an engine feeds: remote_probes/engine/served_wiring.py),
``auto_wirings(config, n_layers) -> list[{"name", "wiring", "why"}]``, ``validate_wiring(w, n_layers)``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

ENGINES = ("sglang", "vllm")


def _int_list(value: Any) -> Optional[List[int]]:
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) and not isinstance(v, bool)
                                                          for v in value):
        return list(value)
    return None


def nested_ids(config: Dict[str, Any]) -> Optional[List[int]]:
    """``eagle_config.eagle_aux_hidden_state_layer_ids`` as stored (SGLang adds 1), or None."""
    eagle = config.get("eagle_config")
    if isinstance(eagle, dict):
        return _int_list(eagle.get("eagle_aux_hidden_state_layer_ids"))
    return None


def top_level_ids(config: Dict[str, Any]) -> Optional[List[int]]:
    """Top-level ``eagle_aux_hidden_state_layer_ids`` (vLLM/speculators: HF indices), or None."""
    return _int_list(config.get("eagle_aux_hidden_state_layer_ids"))


def default_wiring(n_layers: int) -> List[int]:
    """SGLang's (and vLLM's) default capture for an N-layer target, as HF indices."""
    return [2, n_layers // 2, n_layers - 3]


def validate_wiring(wiring: Any, n_layers: int) -> List[int]:
    """Return the wiring as a list of ints or raise ValueError saying what is wrong."""
    ids = _int_list(wiring)
    if ids is None:
        raise ValueError("a wiring must be a non-empty list of integers, got %r" % (wiring,))
    bad = [i for i in ids if i < 0 or i > n_layers]
    if bad:
        raise ValueError("wiring %s has indices outside 0..%d (hidden_states of a %d-layer target): %s"
                         % (ids, n_layers, n_layers, bad))
    return ids


def auto_wirings(config: Dict[str, Any], n_layers: int) -> List[Dict[str, Any]]:
    """Candidate wirings that real bugs and pipelines produce, deduplicated, first reason kept."""
    n = n_layers
    out: List[Dict[str, Any]] = []
    seen = set()

    def add(name: str, wiring: List[int], why: str) -> None:
        key = tuple(wiring)
        if key in seen or not wiring or any(i < 0 or i > n for i in wiring):
            return
        seen.add(key)
        out.append({"name": name, "wiring": list(wiring), "why": why})

    bases = []
    ids = nested_ids(config)
    if ids is not None:
        add("nested+1", [i + 1 for i in ids], "eagle_config ids + 1 (SGLang/SpecForge reading)")
        bases.append(("nested+1", [i + 1 for i in ids]))
    top = top_level_ids(config)
    if top is not None:
        add("top-level", top, "top-level ids as HF indices (vLLM/speculators reading)")
        bases.append(("top-level", top))
    if ids is not None:
        add("nested-as-is", ids, "eagle_config ids without the +1 (a trainer that indexed hidden_states directly)")
    default = default_wiring(n)
    add("sglang-default", default, "SGLang's default [2, N//2, N-3] (no usable ids in the config)")
    bases.append(("sglang-default", default))
    # Embedding-first: the seed's pipeline trained on [embed, a, b] while SGLang fed [a, b, c].
    for name, base in bases:
        add("embed+%s[:2]" % name, [0] + base[:2], "embedding output first, then the first two of %s" % name)
        add("embed+%s[1:]" % name, [0] + base[1:], "embedding output first, then the last two of %s" % name)
    add("embed-mid-last", [0, n // 2, n - 1], "embedding, middle layer, last layer before the final norm")
    for name, base in bases:
        add("%s-1" % name, [i - 1 for i in base], "%s shifted by -1 (off-by-one convention)" % name)
        add("%s+1" % name, [i + 1 for i in base], "%s shifted by +1 (off-by-one convention)" % name)
        add("%s-reversed" % name, list(reversed(base)), "%s in reverse order (concatenation order bug)" % name)
    add("embed-mid-last-1", [0, n // 2 - 1, n - 2], "embedding-first, other slots shifted by -1")
    add("embed-mid-last+1", [0, n // 2 + 1, n], "embedding-first, other slots shifted by +1 (N = final-normed)")
    return out
