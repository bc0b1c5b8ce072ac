"""Checking a draft's tensors against its config and the target, then building an ``Eagle3Draft`` (torch only).

Every refusal is a ``DraftLoadError`` naming the tensor or config field, so the user sees which part of the
checkpoint is wrong instead of a shape-mismatch traceback from ``load_state_dict``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch

from remote_probes.eagle3.checkpoint import DraftLoadError, read_state_dict
from remote_probes.eagle3.draft import DraftConfig, Eagle3Draft

_LAYER_KEYS = ("input_layernorm.weight", "hidden_norm.weight", "post_attention_layernorm.weight",
               "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
               "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")
_BORROWED = ("embed_tokens.weight", "lm_head.weight")


def _expected_shapes(cfg: DraftConfig) -> Dict[str, tuple]:
    h, i = cfg.hidden_size, cfg.intermediate_size
    shapes: Dict[str, tuple] = {"midlayer.input_layernorm.weight": (h,), "midlayer.hidden_norm.weight": (h,),
                                "midlayer.post_attention_layernorm.weight": (h,), "norm.weight": (h,)}
    attn = _mla_shapes(cfg) if cfg.attention == "mla" else _llama_shapes(cfg)
    shapes.update({"midlayer.self_attn." + name + ".weight": shape for name, shape in attn.items()})
    shapes.update({"midlayer.mlp.gate_proj.weight": (i, h), "midlayer.mlp.up_proj.weight": (i, h),
                   "midlayer.mlp.down_proj.weight": (h, i)})
    return shapes


def _llama_shapes(cfg: DraftConfig) -> Dict[str, tuple]:
    h, q, kv = cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    return {"q_proj": (q, 2 * h), "k_proj": (kv, 2 * h), "v_proj": (kv, 2 * h), "o_proj": (h, q)}


def _mla_shapes(cfg: DraftConfig) -> Dict[str, tuple]:
    """SGLang's Eagle3MLADecoderLayer (eagle3/mla.py): the down-projections read the 2H concatenation."""
    h, heads, kv_rank, rope = cfg.hidden_size, cfg.num_heads, cfg.kv_lora_rank, cfg.qk_rope_head_dim
    q_head = cfg.qk_nope_head_dim + rope
    shapes: Dict[str, tuple] = {"kv_a_proj_with_mqa": (kv_rank + rope, 2 * h), "kv_a_layernorm": (kv_rank,),
                                "kv_b_proj": (heads * (cfg.qk_nope_head_dim + cfg.v_head_dim), kv_rank),
                                "o_proj": (h, heads * cfg.v_head_dim)}
    if cfg.q_lora_rank is None:
        shapes["q_proj"] = (heads * q_head, 2 * h)
    else:
        shapes.update({"q_a_proj": (cfg.q_lora_rank, 2 * h), "q_a_layernorm": (cfg.q_lora_rank,),
                       "q_b_proj": (heads * q_head, cfg.q_lora_rank)})
    return shapes


def _variant_shapes(cfg: DraftConfig, num_aux: int) -> Dict[str, tuple]:
    """The norm tensors the variant flags add (speculators / SGLang names)."""
    shapes: Dict[str, tuple] = {}
    if cfg.flags.get("fc_norm"):
        shapes.update({"fc_norm.%d.weight" % i: (cfg.target_hidden_size,) for i in range(num_aux)})
    if cfg.flags.get("norm_before_fc"):
        shapes["input_norm.weight"] = (num_aux * cfg.target_hidden_size,)
    return shapes


def _check_shape(name: str, tensor: torch.Tensor, want: tuple) -> None:
    if tuple(tensor.shape) != tuple(want):
        raise DraftLoadError("tensor %s has shape %s, the config implies %s" % (name, list(tensor.shape), list(want)),
                             field=name, shape=list(tensor.shape), expected=list(want))


def _num_aux(cfg: DraftConfig, state: Dict[str, torch.Tensor]) -> int:
    fc = state.get("fc.weight")
    if fc is None:
        raise DraftLoadError("draft has no fc.weight (the projection of the concatenated aux hidden states)",
                             field="fc.weight")
    width = fc.shape[1] if fc.dim() == 2 else -1
    if fc.dim() != 2 or fc.shape[0] != cfg.hidden_size or width % cfg.target_hidden_size:
        raise DraftLoadError("fc.weight has shape %s; expected [hidden_size=%d, n * target_hidden_size=%d]"
                             % (list(fc.shape), cfg.hidden_size, cfg.target_hidden_size), field="fc.weight")
    return width // cfg.target_hidden_size


def _vocab_checks(cfg: DraftConfig, embed: Optional[torch.Tensor], target_vocab: Optional[int],
                  target_hidden: Optional[int]) -> None:
    if target_vocab is not None and target_vocab != cfg.vocab_size:
        raise DraftLoadError("draft vocab_size %d differs from the target's %d: this draft was built for another "
                             "tokenizer" % (cfg.vocab_size, target_vocab), field="vocab_size")
    if target_hidden is not None and target_hidden != cfg.target_hidden_size:
        raise DraftLoadError("draft expects target hidden size %d (target_hidden_size or hidden_size) but the target "
                             "has %d" % (cfg.target_hidden_size, target_hidden), field="target_hidden_size")
    if embed is not None and tuple(embed.shape) != (cfg.vocab_size, cfg.hidden_size):
        raise DraftLoadError("embedding has shape %s, the draft needs [vocab_size=%d, hidden_size=%d]"
                             % (list(embed.shape), cfg.vocab_size, cfg.hidden_size), field="embed_tokens.weight")


def _d2t(cfg: DraftConfig, state: Dict[str, torch.Tensor], vd: int, strict: bool, notes: List[str]) -> torch.Tensor:
    d2t = state.get("d2t")
    if d2t is None:
        if vd < cfg.vocab_size and strict:
            raise DraftLoadError("draft_vocab_size %d < vocab_size %d but the checkpoint has no d2t mapping"
                                 % (vd, cfg.vocab_size), field="d2t")
        return torch.zeros(vd, dtype=torch.long)
    if tuple(d2t.shape) != (vd,):
        raise DraftLoadError("d2t has shape %s, expected [draft_vocab_size=%d]" % (list(d2t.shape), vd), field="d2t")
    d2t = d2t.long()
    target = d2t + torch.arange(vd)
    bad = int(((target < 0) | (target >= cfg.vocab_size)).sum())
    if bad:
        msg = ("d2t maps %d draft tokens outside the target vocab [0, %d) when read as offsets (target = draft + "
               "d2t[draft]); it may hold direct target ids" % (bad, cfg.vocab_size))
        if strict:
            raise DraftLoadError(msg, field="d2t")
        notes.append(msg + "; clamped")
        d2t = target.clamp(0, cfg.vocab_size - 1) - torch.arange(vd)
    t2d = state.get("t2d")
    if t2d is not None and t2d.dim() == 1 and t2d.shape[0] == cfg.vocab_size:
        hot = torch.nonzero(t2d.bool()).flatten()
        if hot.shape[0] == vd and not torch.equal(hot, target.clamp(0, cfg.vocab_size - 1)):
            notes.append("t2d disagrees with d2t read as offsets (nonzero(t2d) != d2t + arange)")
    return d2t


def _pick_embedding(state: Dict[str, torch.Tensor], parts: Optional[Dict[str, Any]],
                    embed_tokens: Optional[torch.Tensor], notes: List[str]) -> Optional[torch.Tensor]:
    """The embedding ``parts`` names: the target's, the checkpoint's own, or a seeded random one (SGLang's
    VocabParallelEmbedding left as initialised when set_embed skips and the checkpoint has none)."""
    own = state.get("embed_tokens.weight")
    if parts is None or parts["embedding"] == "draft":
        return own
    if parts["embedding"] == "target":
        if own is not None:
            notes.append("the draft's own embed_tokens replaced by the target's, as the engine does")
        return embed_tokens
    return None  # "random": filled after the shape checks (needs the config's sizes)


def _pick_head(parts: Dict[str, Any], state: Dict[str, torch.Tensor], embed: Optional[torch.Tensor],
               target_head: Optional[torch.Tensor], vd: int, notes: List[str]) -> Optional[torch.Tensor]:
    """The head ``parts`` names, cut to the first ``vd`` rows (the engine's logits processor keeps draft_vocab_size
    columns); None for a random head."""
    which = parts["head"]
    source = {"draft_head": state.get("lm_head.weight"), "target_head": target_head,
              "target_embedding": embed, "draft_embedding": embed}.get(which)
    if which == "random" or source is None:
        if which != "random":
            raise DraftLoadError("the %s is needed as the head but was not given" % which.replace("_", " "),
                                 field="lm_head.weight")
        notes.append("head left randomly initialised, as SGLang does for these parts")
        return None
    if which != "draft_head":
        label = {"target_head": "the target's lm_head", "target_embedding": "the target's embedding (tied)",
                 "draft_embedding": "the draft's own embedding (tied)"}[which]
        notes.append("lm_head taken from %s%s" % (label, " (first %d rows)" % vd if source.shape[0] > vd else ""))
    return source[:vd]


def _left_at_init(cfg: DraftConfig, config: Dict[str, Any], state: Dict[str, torch.Tensor], names: List[str],
                  notes: List[str]) -> Dict[str, torch.Tensor]:
    """The parameters the engine's loader fills from no tensor (served_parts ``tensors``), at an initial value as the
    engine leaves them: RMSNorm weights ones, projections uninitialised memory (a seeded small random stand-in)."""
    from remote_probes.eagle3.wiring import nested_ids

    ids = nested_ids(config)
    given = config.get("num_aux_hidden_states")
    num_aux = given if isinstance(given, int) else (len(ids) if ids else 3)
    shapes = dict(_expected_shapes(cfg), **{"fc.weight": (cfg.hidden_size, num_aux * cfg.target_hidden_size)})
    gen = torch.Generator().manual_seed(2)
    state = dict(state)
    filled = []
    for name in names:
        if name in state or name not in shapes:
            continue
        shape = shapes[name]
        state[name] = torch.ones(shape) if name.endswith("norm.weight") else torch.randn(shape, generator=gen) * 0.02
        filled.append(name)
    if filled:
        notes.append("%d parameters left at their initial values (the loader places no tensor of the checkpoint "
                     "there): %s" % (len(filled), ", ".join(filled[:4]) + (", ..." if len(filled) > 4 else "")))
    return state


def build_from_state(config: Dict[str, Any], state: Dict[str, torch.Tensor], notes: List[str], *, strict: bool,
                     embed_tokens: Optional[torch.Tensor], lm_head: Optional[torch.Tensor],
                     target_vocab_size: Optional[int], target_hidden_size: Optional[int],
                     device: str, dtype: torch.dtype, parts: Optional[Dict[str, Any]] = None) -> Eagle3Draft:
    """Validate a canonicalised state dict (see eagle3_checkpoint) and build the draft. Raises DraftLoadError.

    ``parts`` (``eagle3_served.served_parts(...)["served"]`` or ``["trained"]``) picks the embedding, the head and
    whether d2t maps ids, as the engine would; None keeps the checkpoint's own parts, borrowing from the target
    only what it lacks.
    """
    cfg = DraftConfig.from_dict(config)
    notes = list(notes)
    if parts is not None and "flags" in parts:  # the variant flags the engine reads of the config's (served_parts)
        dropped = sorted(set(cfg.flags) - set(parts["flags"]))
        cfg.flags = {f: v for f, v in cfg.flags.items() if f in parts["flags"]}
        if dropped:
            notes.append("served without %s: the engine never reads it" % ", ".join(dropped))
    if parts is not None and parts.get("tensors"):
        state = _left_at_init(cfg, config, state, parts["tensors"], notes)
    qk_norms = sorted(n for n in state if n.startswith("midlayer.self_attn.") and n.split(".")[2] in ("q_norm", "k_norm"))
    if qk_norms:  # a Qwen3-style layer (speculators transformer_layer_config.model_type qwen3): per-head q/k norms
        raise DraftLoadError("draft has per-head attention norms (%s), a Qwen3-style decoder layer this Llama-style "
                             "draft model does not implement" % ", ".join(qk_norms), field=qk_norms[0])
    deeper = sorted({n.split(".")[1] for n in state if n.startswith("layers.")})
    if deeper:  # speculators (and SGLang's loader) allow num_hidden_layers > 1; this draft model has one layer
        raise DraftLoadError("draft has decoder layers beyond the first (layers.%s.*); only 1-layer EAGLE-3 drafts are "
                             "supported by the draft test" % ",".join(deeper), field="num_hidden_layers")
    embed = _pick_embedding(state, parts, embed_tokens, notes)
    if parts is not None and parts["embedding"] == "random":
        gen = torch.Generator().manual_seed(1)
        embed = torch.randn(cfg.vocab_size, cfg.hidden_size, generator=gen) * 0.02
        notes.append("embedding left randomly initialised, as SGLang does for these parts")
    if embed is None:
        if embed_tokens is None:
            raise DraftLoadError("draft has no embed_tokens.weight and no target embedding was given",
                                 field="embed_tokens.weight")
        embed = embed_tokens
        notes.append("embed_tokens taken from the target")
    _vocab_checks(cfg, embed, target_vocab_size, target_hidden_size)
    num_aux = _num_aux(cfg, state)
    expected = dict(_expected_shapes(cfg), **_variant_shapes(cfg, num_aux))
    for name, want in expected.items():
        if name not in state:
            flag = next((f for f in cfg.flags if name.startswith({"fc_norm": "fc_norm.",
                                                                   "norm_before_fc": "input_norm."}.get(f, "-"))), None)
            if flag is not None and len(want) == 1:
                # a norm the config's flag builds and the checkpoint does not fill: both engines' loaders fill what
                # the checkpoint has and never check for what it lacks, so it serves at its init, ones
                state = dict(state, **{name: torch.ones(want)})
                notes.append("%s left at its initial value, ones (config sets %s; the checkpoint has none)"
                             % (name, flag))
                continue
            raise DraftLoadError("draft is missing tensor %s" % name, field=name)
        _check_shape(name, state[name], want)
    vd = cfg.draft_vocab_size or cfg.vocab_size
    head = state.get("lm_head.weight") if parts is None else _pick_head(parts, state, embed, lm_head, vd, notes)
    # with parts, _pick_head has resolved the head (None: a random one, which the engine loads without complaint)
    if parts is None and head is None and cfg.draft_vocab_size is None:
        if lm_head is None:
            raise DraftLoadError("draft has no lm_head.weight and no draft_vocab_size; the target's lm_head is "
                                 "needed but was not given", field="lm_head.weight")
        head = lm_head
        notes.append("lm_head taken from the target (no draft_vocab_size)")
    elif parts is None and head is None:
        msg = "draft declares draft_vocab_size=%d but has no lm_head.weight" % vd
        if strict:
            raise DraftLoadError(msg, field="lm_head.weight")
        notes.append(msg + "; left randomly initialised, as SGLang does")
    if head is not None:
        _check_shape("lm_head.weight", head, (vd, cfg.hidden_size))
    if parts is not None and not parts["d2t"]:
        if "d2t" in state:
            notes.append("d2t not applied: the engine maps no draft ids for these parts")
        d2t = torch.zeros(vd, dtype=torch.long)
    else:
        d2t = _d2t(cfg, state, vd, strict, notes)
    draft = Eagle3Draft(cfg, num_aux=num_aux)
    known = set(expected) | {"fc.weight", "d2t", "t2d"} | set(_BORROWED)
    ignored = sorted(set(state) - known)
    if ignored:
        notes.append("ignored tensors: " + ", ".join(ignored[:8]))
    with torch.no_grad():
        params = dict(draft.named_parameters())
        for name in known - {"d2t", "t2d", "embed_tokens.weight", "lm_head.weight"}:
            params[name].copy_(state[name].to(torch.float32))
        params["embed_tokens.weight"].copy_(embed.detach().to(torch.float32))
        if head is not None:
            params["lm_head.weight"].copy_(head.detach().to(torch.float32))
        else:
            gen = torch.Generator().manual_seed(0)
            params["lm_head.weight"].copy_(torch.randn(vd, cfg.hidden_size, generator=gen) * 0.02)
        draft.d2t.copy_(d2t)
    draft.load_report = {"notes": notes, "num_aux": num_aux, "draft_vocab_size": vd,
                         "variant_flags": sorted(cfg.flags), "parts": None if parts is None else dict(parts)}
    return draft.to(device=device, dtype=dtype).eval()


def load_draft(path: str, *, embed_tokens: Optional[torch.Tensor] = None, lm_head: Optional[torch.Tensor] = None,
               target_vocab_size: Optional[int] = None, target_hidden_size: Optional[int] = None,
               device: str = "cpu", dtype: torch.dtype = torch.float32, strict: bool = True) -> Eagle3Draft:
    """Load a draft directory (config.json + weights), borrowing the target's embedding / lm_head when absent.

    ``strict=False`` mimics SGLang: a declared-but-missing lm_head stays randomly initialised (seeded) and
    out-of-range d2t entries are clamped, each recorded in ``load_report["notes"]`` instead of raising.

    :raises DraftLoadError: missing tensors or config fields, wrong shapes, a draft for another vocab or width.
    """
    config, state, notes = read_state_dict(path)
    return build_from_state(config, state, notes, strict=strict, embed_tokens=embed_tokens, lm_head=lm_head,
                            target_vocab_size=target_vocab_size, target_hidden_size=target_hidden_size,
                            device=device, dtype=dtype)
