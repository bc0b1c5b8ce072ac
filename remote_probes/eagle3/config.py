"""Reading an EAGLE-3 draft's (or a target's) config.json in every format real checkpoints use (stdlib, py >= 3.9).

Formats (research/eagle3-draft-spec.md):

- SpecForge / EAGLE / SGLang: a flat Llama config at the top level, aux ids in a nested ``eagle_config``
  (SGLang 0.5.23 also reads ``eagle_config.norm_before_fc``).
- vLLM ``speculators`` (``Eagle3DraftModel``, ``speculators_config``): the Llama/Qwen3 decoder config nested under
  ``transformer_layer_config``; ``draft_vocab_size``, ``target_hidden_size``, the top-level
  ``eagle_aux_hidden_state_layer_ids`` and the variant flags ``norm_before_residual``, ``norm_before_fc``,
  ``fc_norm``, ``norm_output`` at the top level.
- multimodal targets: the language model under ``text_config``.

RoPE (transformers 5, which both SGLang versions pin): ``rope_parameters = {"rope_type", "rope_theta", ...}``
replaces ``rope_theta`` / ``rope_scaling``. SGLang (llama.py, hf_transformers/common.py ``get_rope_config``) takes
``rope_parameters`` first and falls back to the legacy keys, as transformers 5's ``PretrainedConfig`` does when it
standardises a legacy config; only when neither names a theta does the engine assume 10000.

Public API: ``flat_config(raw)``, ``variant_flags(raw)``, ``rope_config(cfg) -> (theta | None, scaling | None,
source)``, ``VARIANT_FLAGS``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

VARIANT_FLAGS = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")
_NESTED = ("transformer_layer_config", "text_config")


def flat_config(raw: Dict[str, Any]) -> Dict[str, Any]:
    """One flat dict: nested decoder configs (``transformer_layer_config``, ``text_config``) under the top level.

    Top-level keys win, except ``None`` values, which do not hide a nested value (speculators writes
    ``"target_hidden_size": null`` at the top level).
    """
    out: Dict[str, Any] = {}
    for key in _NESTED:
        nested = raw.get(key)
        if isinstance(nested, dict):
            out.update(nested)
    for key, value in raw.items():
        if value is not None or key not in out:
            out[key] = value
    return out


def variant_flags(raw: Dict[str, Any]) -> Dict[str, bool]:
    """The draft-architecture variant flags that are set, wherever the format puts them.

    ``use_aux_norm`` is SGLang's legacy spelling of ``fc_norm``.
    """
    flat = flat_config(raw)
    nested = raw.get("eagle_config")
    eagle: Dict[str, Any] = nested if isinstance(nested, dict) else {}
    flags: Dict[str, bool] = {}
    for flag in VARIANT_FLAGS:
        value = eagle.get(flag, flat.get(flag))
        if flag == "fc_norm" and not value:
            value = flat.get("use_aux_norm")
        if value:
            flags[flag] = True
    return flags


def with_flag_off(config: Dict[str, Any], flag: str) -> Dict[str, Any]:
    """A copy of ``config`` with a variant flag off wherever the format puts it (top level, nested eagle_config)."""
    out = dict(config, **{flag: False})
    nested = config.get("eagle_config")
    if isinstance(nested, dict) and flag in nested:
        out["eagle_config"] = dict(nested, **{flag: False})
    return out


def rope_config(cfg: Dict[str, Any]) -> Tuple[Optional[float], Optional[Dict[str, Any]], str]:
    """(rope_theta or None when no key names one, scaling dict or None, where theta came from)."""
    params = cfg.get("rope_parameters")
    legacy = cfg.get("rope_scaling")
    theta: Any = None
    source = "missing"
    if isinstance(params, dict) and isinstance(params.get("rope_theta"), (int, float)):
        theta, source = params["rope_theta"], "rope_parameters"
    elif isinstance(cfg.get("rope_theta"), (int, float)) and not isinstance(cfg.get("rope_theta"), bool):
        theta, source = cfg["rope_theta"], "rope_theta"
    scaling = params if isinstance(params, dict) else legacy if isinstance(legacy, dict) else None
    return (None if theta is None else float(theta)), scaling, source
