"""The lab stands in for an engine only where it serves a draft as that engine would (issue 37).

The engine reads every field of ``remote_probes/draft_reading/field_table.TABLE`` from the draft's config; the lab's
draft model (remote_probes/eagle3/draft.py) models most of them. A field the engine reads with a value the lab
does not model (a second decoder layer, attention biases, a partial rotary, a logit scale) would be served by the
lab as if it were absent, where the engine builds something else: the lab then measures a draft the engine never
serves and turns a right finding wrong. So the lab refuses to start on such a draft, naming the field, the value
and what the engine does with it, as it refuses what the engine refuses.

Values the engine itself refuses (``refused``: an activation other than silu, remote_probes/draft_reading/
engine_limits.py; for vLLM, a model_type its speculative config rewrites as DeepSeek MTP, the model types read from
the vLLM tree on the lab's path) are refused by the lab with the engine's own words, as the real server's start
fails.

Public API: ``unmodelled(config, engine, target_positions) -> [(field, value, what the engine does)]``,
``refused(config, mtp_model_types) -> the engine's error line | None``.
"""

from __future__ import annotations

from typing import Any

from remote_probes.draft_reading.field_table import TABLE

#: field -> the values the lab's draft model serves as the engine does (absent counts as the engine's default)
MODELLED: dict[str, tuple[Any, ...]] = {
    "num_hidden_layers": (1,),
    "attention_bias": (False,), "mlp_bias": (False,), "qkv_bias": (False,), "bias": (False,),
    "partial_rotary_factor": (1, 1.0), "rope_is_neox_style": (True,), "is_causal": (True,),
    "logit_scale": (1, 1.0), "layer_types": (), "model_type": (),
}


#: the MTP architecture vLLM's hf_config_override gives each rewritten model type (config/speculative.py), whose
#: EAGLE-3 name ("Eagle3" + it) its registry then does not know; any other rewritten type gets DeepSeek's
MTP_ARCHITECTURE = {"deepseek_v32": "DeepseekV32MTPModel", "glm_moe_dsa": "DeepseekV32MTPModel",
                    "deepseek_v4": "DeepSeekV4MTPModel"}


def refused(config: dict[str, Any], mtp_model_types: tuple[str, ...] = ()) -> str | None:
    """The error the engine raises at start for this (flat) draft config, or None: both engines' Llama MLP for an
    activation other than silu; vLLM's model registry for a draft whose model_type its speculative config rewrites
    as DeepSeek MTP (``mtp_model_types``: engine_limits.limits_reading's values for vLLM's tree, empty for SGLang)."""
    act = config.get("hidden_act")
    if isinstance(act, str) and act != "silu":
        return f"Unsupported activation: {act}. Only silu is supported for now."
    kind = config.get("model_type")
    if isinstance(kind, str) and kind in mtp_model_types:
        return (f"Model architectures ['Eagle3{MTP_ARCHITECTURE.get(kind, 'DeepSeekMTPModel')}'] are not supported "
                "for now.")
    return None


def unmodelled(config: dict[str, Any], engine: str, target_positions: int | None = None
               ) -> list[tuple[str, Any, str]]:
    """The fields ``engine`` reads from this (flat) draft config with a value the lab does not model;
    ``target_positions``: the target's max_position_embeddings (a draft rotary table shorter than it is served by
    the engines past its end, which the lab does not model)."""
    table = TABLE.get(engine, {})
    out = []
    mine = config.get("max_position_embeddings")
    if isinstance(mine, int) and target_positions is not None and mine < target_positions:
        out.append(("max_position_embeddings", mine, "sizes the draft's rotary table and serves the target's "
                    f"{target_positions} positions through it (remote_probes/draft_reading/engine_limits.py)"))
    for field, allowed in MODELLED.items():
        if field not in table or config.get(field) is None:
            continue
        value = config[field]
        if field == "layer_types":
            if any(kind != "full_attention" for kind in value or []):
                out.append((field, value, table[field].does))
        elif field == "model_type":  # only llama4_text changes what SGLang builds (intermediate_size_mlp)
            if value == "llama4_text":
                out.append((field, value, table[field].does))
        elif value not in allowed:
            out.append((field, value, table[field].does))
    return out
