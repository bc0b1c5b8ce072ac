"""Writing an EAGLE-3 draft in the SpecForge/SGLang checkpoint layout, with the knobs the lab's faults need.

The normal layout (what SpecForge writes and SGLang reads): ``config.json`` with architectures
``LlamaForCausalLMEagle3``, ``draft_vocab_size`` and ``eagle_config.eagle_aux_hidden_state_layer_ids`` in the +1
convention (stored id = HF hidden_states index - 1, since SGLang captures at layer ENTRY); ``model.safetensors``
with ``fc``, ``midlayer.*``, ``norm``, ``lm_head``, ``d2t`` (offsets: target = draft + d2t[draft]) and ``t2d``;
no ``embed_tokens`` (the server takes the target's).

The embedding output (HF index 0) cannot be written in the +1 convention (it would be id -1). The seed's
training pipeline trained on ``[embed, a, b]`` and wrote NO layer ids, so SGLang fell back to its default
``[2, N//2, N-3]``; ``DraftLayout(ids_location="auto")`` does the same for an embedding-first wiring.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch

if TYPE_CHECKING:
    from remote_probes.eagle3.draft import Eagle3Draft

IdsLocation = Literal["auto", "nested", "top-level", "none"]


@dataclass(frozen=True)
class DraftLayout:
    """How to write the checkpoint. Defaults = SpecForge's healthy layout."""

    ids_location: IdsLocation = "auto"   # auto: nested when expressible, else none (the seed's pipeline)
    ids: tuple[int, ...] | None = None   # store exactly these ids (overrides the ones derived from the wiring)
    include_lm_head: bool = True         # False + draft_vocab_size declared = the "no-lm-head" fault
    declare_draft_vocab: bool = True     # False: drop draft_vocab_size (SGLang then takes the target's lm_head)
    d2t_format: Literal["offsets", "direct"] = "offsets"  # direct = target ids stored in d2t (a real bug)
    include_t2d: bool = True
    extra_config: dict[str, Any] = field(default_factory=dict)


def stored_ids(wiring: list[int], layout: DraftLayout) -> tuple[str, list[int] | None]:
    """Where and which layer ids to write for a draft trained on ``wiring`` (HF indices)."""
    if layout.ids is not None:
        where = "nested" if layout.ids_location == "auto" else layout.ids_location
        return where, list(layout.ids)
    if layout.ids_location == "none":
        return "none", None
    if layout.ids_location == "top-level":
        return "top-level", list(wiring)        # vLLM convention: HF indices as-is
    if min(wiring) < 1:
        if layout.ids_location == "nested":
            raise ValueError(f"wiring {wiring} contains the embedding output (index 0), which the nested +1 convention "
                             "cannot express")
        return "none", None                     # the seed's pipeline: no ids written
    return "nested", [i - 1 for i in wiring]


#: an MLA draft's class in both engines (SGLang srt/models/kimi_k25_eagle3.py, vLLM deepseek_eagle3.py) and the
#: published Kimi-K2.5 draft's model type: vLLM parses kimi_k2 as DeepSeek-V3's config
#: (transformers_utils/config.py:100), while a draft of model_type deepseek_v3 is turned into DeepSeek's MTP and
#: refused ("Model architectures ['Eagle3DeepSeekMTPModel'] are not supported", config/speculative.py:679-694)
MLA_ARCHITECTURE, MLA_MODEL_TYPE = "Eagle3DeepseekV2ForCausalLM", "kimi_k2"


def draft_config(*, hidden_size: int, intermediate_size: int, num_heads: int, num_kv_heads: int, vocab_size: int,
                 draft_vocab_size: int, rms_norm_eps: float, rope_theta: float, max_position_embeddings: int,
                 wiring: list[int], layout: DraftLayout, mla: dict[str, Any] | None = None) -> dict[str, Any]:
    """The draft's config.json; ``mla``: the MLA dimensions of an MLA draft (the Kimi-K2.5 draft's class)."""
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": hidden_size,
        "intermediate_size": intermediate_size, "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads, "num_hidden_layers": 1, "hidden_act": "silu",
        "rms_norm_eps": rms_norm_eps, "rope_theta": rope_theta, "max_position_embeddings": max_position_embeddings,
        "vocab_size": vocab_size, "tie_word_embeddings": False, "torch_dtype": "float32",
        "eagle_config": {"use_aux_hidden_state": True},
    }
    if mla:
        config.update(mla, architectures=[MLA_ARCHITECTURE], model_type=MLA_MODEL_TYPE)
    if layout.declare_draft_vocab:
        config["draft_vocab_size"] = draft_vocab_size
    where, ids = stored_ids(wiring, layout)
    if where == "nested":
        config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
    elif where == "top-level":
        config["eagle_aux_hidden_state_layer_ids"] = ids
    config.update(layout.extra_config)
    return config


def _mla_dims(cfg: Any) -> dict[str, Any] | None:
    if cfg.attention != "mla":
        return None
    return {"q_lora_rank": cfg.q_lora_rank, "kv_lora_rank": cfg.kv_lora_rank, "qk_nope_head_dim": cfg.qk_nope_head_dim,
            "qk_rope_head_dim": cfg.qk_rope_head_dim, "v_head_dim": cfg.v_head_dim,
            "rope_interleave": cfg.rope_interleave}


def save_draft(draft: Eagle3Draft, out_dir: Path, *, wiring: list[int], layout: DraftLayout = DraftLayout(),
               recipe: dict[str, Any] | None = None) -> Path:
    """Write ``draft`` (a remote_probes.eagle3.draft.Eagle3Draft) to ``out_dir`` in the SpecForge layout.

    ``recipe`` (training facts: the wiring really trained on, seed, losses) goes to ``lab_recipe.json`` beside
    the checkpoint, for people; nothing that tests a draft reads it.
    """
    from safetensors.torch import save_file

    cfg = draft.cfg
    out_dir.mkdir(parents=True, exist_ok=True)
    vd = draft.lm_head.weight.shape[0]
    config = draft_config(hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
                          num_heads=cfg.num_heads, num_kv_heads=cfg.num_kv_heads, vocab_size=cfg.vocab_size,
                          draft_vocab_size=vd, rms_norm_eps=cfg.rms_norm_eps, rope_theta=cfg.rope_theta,
                          max_position_embeddings=int(cfg.raw.get("max_position_embeddings", 2048)),
                          wiring=wiring, layout=layout, mla=_mla_dims(cfg))
    state = {k: v.detach().to(torch.float32).contiguous() for k, v in draft.state_dict().items()
             if k not in ("embed_tokens.weight", "d2t")}
    if not layout.include_lm_head:
        state.pop("lm_head.weight")
    hot = draft.d2t.detach().long() + torch.arange(vd)
    state["d2t"] = (hot if layout.d2t_format == "direct" else hot - torch.arange(vd)).contiguous()
    if layout.include_t2d:
        t2d = torch.zeros(cfg.vocab_size, dtype=torch.bool)
        t2d[hot] = True
        state["t2d"] = t2d
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    facts = dict(recipe or {}, trained_wiring=list(wiring), layout=asdict(layout))
    (out_dir / "lab_recipe.json").write_text(json.dumps(facts, indent=2, default=list) + "\n")
    return out_dir
