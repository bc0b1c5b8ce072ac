"""Draft <-> target agreement: one finding per config field that must agree with the target, the weights or what
the engine does (standard library only, Python >= 3.9; draft_findings.analyse calls ``check_agreement``).

Each finding's details name the field, the value on each side and ``read_by`` (which engine reads the field, where).
A mismatch that makes SGLang fail while loading is predicted as an error "SGLang will fail to load: ...", citing the
check that raises. Lines are from the cached trees (0.5.12.post1 / 0.5.23, paths under sglang/srt/):

- fc, embedding, lm_head and q/k/v/o are filled by weight loaders that assert the checkpoint's shape:
  torch Linear (fc) -> default_weight_loader (model_loader/weight_utils.py:1301 / :1582), ParallelLMHead and
  VocabParallelEmbedding (layers/vocab_parallel_embedding.py:462 / :436), QKVParallelLinear
  (layers/linear.py:1168 / :1381).
- head_dim: ``getattr(config, "head_dim", hidden_size // num_attention_heads)`` (models/llama.py:159-160 /
  :196-197); the qkv projection is rebuilt with that head_dim (llama_eagle3.py:60-68 / :67-75).
- ``READS`` cites 0.5.12.post1 line numbers; 0.5.23 has the same code a few lines lower (eagle3_served cites both).
"""

from __future__ import annotations

from typing import Any

from remote_probes.eagle3.served import describe, served_parts

LOADERS = {
    "linear": "default_weight_loader (weight_utils.py:1301 in 0.5.12.post1, :1582 in 0.5.23)",
    "vocab": "VocabParallelEmbedding.weight_loader (vocab_parallel_embedding.py:462 in 0.5.12.post1, :436 in 0.5.23)",
    "qkv": "QKVParallelLinear.weight_loader (linear.py:1168 in 0.5.12.post1, :1381 in 0.5.23)",
}
READS = {
    "hidden_size": "SGLang llama_eagle3.py:148-151 (fc input = target_hidden_size or hidden_size) and llama.py set_embed; "
                   "vLLM llama_eagle3.py (fc input = target_hidden_size)",
    "vocab_size": "SGLang llama_eagle3.py:141-146 (embed_tokens) and :274-276 (draft_vocab_size defaults to it); vLLM",
    "draft_vocab_size": "SGLang llama_eagle3.py:274-282 (lm_head rows), :318-320 (hot_token_id = d2t + arange); vLLM",
    "attention": "SGLang llama.py:159-160 (head_dim) + llama_eagle3.py:60-68 (qkv_proj); vLLM",
    "attention_mla": "SGLang kimi_k25_eagle3.py Eagle3MLADecoderLayer (fused_qkv_a_proj_with_mqa over 2 x hidden, "
                     "built from DeepseekV2AttentionMLA) and Eagle3DeepseekV2ForCausalLM.load_weights (q_a_proj and "
                     "kv_a_proj_with_mqa concatenated; kv_b_proj split into w_kc / w_vc)",
    "max_position_embeddings": "SGLang llama.py:190 (get_rope max_position); vLLM",
    "torch_dtype": "SGLang model_config (--dtype auto reads it); vLLM",
    "tie_word_embeddings": "SGLang llama_eagle3.py:268-282 (lm_head = embed_tokens); vLLM",
}


def _f(fid: str, severity: str, message: str, **details: Any) -> dict[str, Any]:
    return {"id": fid, "severity": severity, "message": message, "details": details}


def _shape(tensors: dict[str, Any], suffix: str) -> list[int] | None:
    for name, meta in tensors.items():
        if (name[len("model."):] if name.startswith("model.") else name) == suffix:
            return list(meta.get("shape") or [])
    return None


def _layer_shape(tensors: dict[str, Any], part: str) -> list[int] | None:
    return _shape(tensors, "midlayer." + part) or _shape(tensors, "layers.0." + part)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_hidden(cfg: dict[str, Any], tensors: dict[str, Any], target: dict[str, Any],
                 speculators: bool) -> dict[str, Any]:
    hidden, t_real = _int(cfg.get("hidden_size")), _int(target.get("hidden_size"))
    declared = cfg.get("target_hidden_size")
    fc = _shape(tensors, "fc.weight")
    d = {"field": "hidden_size", "hidden_size": hidden, "target_hidden_size": declared, "target": t_real,
         "fc_shape": fc, "read_by": READS["hidden_size"]}
    # speculators writes a top-level null too, but SGLang cannot read that layout at all (config_layout says so)
    if "target_hidden_size" in cfg and declared is None and not speculators:
        return _f("agree_hidden_size", "error", "SGLang will fail to load: target_hidden_size is null and SGLang "
                  "sets hidden_size_in = config.target_hidden_size whenever the key exists, so fc = Linear(None * "
                  "num_aux) raises TypeError (llama_eagle3.py:148-151 / :151-154).", **d)
    expects = _int(declared) or hidden
    if t_real is None or expects is None:
        return _f("agree_hidden_size", "info", "Target hidden size unknown: pass target_path or "
                  "target_hidden_size to check the draft's input width.", **d)
    if expects != t_real:
        if fc and len(fc) == 2 and fc[1] % t_real == 0 and fc[1] % expects:
            msg = (f"SGLang will fail to load: the config makes fc take {expects}-wide aux states but fc.weight is "
                   f"{fc}, so {LOADERS['linear']} asserts.")
        else:
            msg = (f"The draft expects target hidden size {expects} "
                   f"({'target_hidden_size' if _int(declared) else 'hidden_size'}) but the target has {t_real}: "
                   f"SGLang feeds {t_real}-wide aux states and the first draft forward fails on the width.")
        return _f("agree_hidden_size", "error", msg, **d)
    return _f("agree_hidden_size", "info", f"The draft takes the target's hidden size {t_real}.", **d)


def check_vocab(cfg: dict[str, Any], tensors: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    vocab, t_vocab = _int(cfg.get("vocab_size")), _int(target.get("vocab_size"))
    embed = _shape(tensors, "embed_tokens.weight")
    d = {"field": "vocab_size", "vocab_size": vocab, "target": t_vocab, "embed_shape": embed,
         "read_by": READS["vocab_size"]}
    if embed and vocab is not None and embed[0] != vocab:
        return _f("agree_vocab_size", "error", f"SGLang will fail to load: embed_tokens.weight has {embed[0]} rows "
                  f"but vocab_size is {vocab}, and {LOADERS['vocab']} asserts.", **d)
    if t_vocab is not None and vocab is not None and vocab != t_vocab:
        return _f("agree_vocab_size", "error", f"Draft vocab_size {vocab} differs from the target's {t_vocab}: the "
                  "draft was built for another tokenizer, and the target's embedding it is given has other ids.", **d)
    return _f("agree_vocab_size", "info", f"vocab_size {vocab} agrees with the target"
              + ("." if t_vocab is not None else " (target vocab unknown)."), **d)


def check_draft_vocab(cfg: dict[str, Any], tensors: dict[str, Any]) -> dict[str, Any]:
    dvs, vocab = _int(cfg.get("draft_vocab_size")), _int(cfg.get("vocab_size"))
    head, d2t, t2d = _shape(tensors, "lm_head.weight"), _shape(tensors, "d2t"), _shape(tensors, "t2d")
    tied = bool(cfg.get("tie_word_embeddings"))
    d = {"field": "draft_vocab_size", "draft_vocab_size": dvs, "vocab_size": vocab, "lm_head_shape": head,
         "d2t_shape": d2t, "t2d_shape": t2d, "read_by": READS["draft_vocab_size"]}
    rows = dvs if dvs is not None else vocab  # SGLang sets draft_vocab_size = vocab_size when absent
    if head and rows is not None and not tied and head[0] != rows:
        return _f("agree_draft_vocab_size", "error", f"SGLang will fail to load: lm_head.weight has {head[0]} rows "
                  f"but the head SGLang builds has {rows} (draft_vocab_size{' absent: vocab_size' if dvs is None else ''}),"
                  f" and {LOADERS['vocab']} asserts.", **d)
    if d2t and rows is not None and d2t[0] != rows:
        sev_msg = ("SGLang will fail at the first draft step: " if d2t[0] < rows else "")
        return _f("agree_draft_vocab_size", "error", f"{sev_msg}d2t has {d2t[0]} entries but the draft head has "
                  f"{rows} rows (hot_token_id = d2t + arange is indexed by the head's argmax).", **d)
    if t2d and vocab is not None and t2d[0] != vocab:
        return _f("agree_draft_vocab_size", "warning", f"t2d has {t2d[0]} entries but vocab_size is {vocab}; "
                  "SGLang skips t2d, so only tools that rebuild d2t from it are misled.", **d)
    return _f("agree_draft_vocab_size", "info", f"draft_vocab_size {dvs} agrees with lm_head, d2t and t2d.", **d)


def check_mla_attention(cfg: dict[str, Any], tensors: dict[str, Any]) -> dict[str, Any]:
    """An MLA draft (``kv_lora_rank`` in its config) by the rules of SGLang's Eagle3MLADecoderLayer: its attention
    has no q/k/v projections of a Llama layer, so the Llama rule must never judge it."""
    hidden, heads = _int(cfg.get("hidden_size")), _int(cfg.get("num_attention_heads"))
    q_rank, kv_rank = _int(cfg.get("q_lora_rank")), _int(cfg.get("kv_lora_rank"))
    nope, rope, v = (_int(cfg.get(k)) for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
    d: dict[str, Any] = {"field": "kv_lora_rank", "attention": "mla", "num_attention_heads": heads,
                         "q_lora_rank": q_rank, "kv_lora_rank": kv_rank, "qk_nope_head_dim": nope,
                         "qk_rope_head_dim": rope, "v_head_dim": v, "read_by": READS["attention_mla"]}
    if q_rank is None:
        return _f("agree_attention", "error", "SGLang will fail to load: this MLA draft has no q_lora_rank, and "
                  "Eagle3MLADecoderLayer raises 'Eagle3 MLA layer requires q_lora_rank in the draft config'.", **d)
    if not (hidden and heads and kv_rank and nope and rope and v):
        return _f("agree_attention", "warning", "hidden_size, num_attention_heads or an MLA dimension "
                  "(qk_nope_head_dim, qk_rope_head_dim, v_head_dim) is missing: cannot check the MLA shapes.", **d)
    want = {"q_a_proj": [q_rank, 2 * hidden], "kv_a_proj_with_mqa": [kv_rank + rope, 2 * hidden],
            "q_b_proj": [heads * (nope + rope), q_rank], "kv_b_proj": [heads * (nope + v), kv_rank],
            "o_proj": [hidden, heads * v]}
    shapes = {p: _layer_shape(tensors, f"self_attn.{p}.weight") for p in want}
    d["shapes"] = shapes
    missing = sorted(p for p, shape in shapes.items() if shape is None)
    bad = [f"{p} {shape} (config implies {want[p]})" for p, shape in shapes.items()
           if shape is not None and shape != want[p]]
    if bad:
        return _f("agree_attention", "error", f"SGLang will fail to load: {', '.join(bad)} with {heads} heads, "
                  f"q_lora_rank {q_rank}, kv_lora_rank {kv_rank} (the first of the fused projection's inputs is the "
                  "concatenated embedding and hidden state: 2 x hidden_size).", **d)
    if missing:
        return _f("agree_attention", "error", f"SGLang will fail to load: the MLA attention has no "
                  f"{', '.join(missing)} weights (Eagle3DeepseekV2ForCausalLM.load_weights).", **d)
    return _f("agree_attention", "info", f"MLA attention weights match {heads} heads, q_lora_rank {q_rank}, "
              f"kv_lora_rank {kv_rank}, rope {rope}, v_head_dim {v} (Eagle3MLADecoderLayer).", **d)


def check_attention(cfg: dict[str, Any], tensors: dict[str, Any]) -> dict[str, Any]:
    if cfg.get("kv_lora_rank") is not None:
        return check_mla_attention(cfg, tensors)
    hidden, heads = _int(cfg.get("hidden_size")), _int(cfg.get("num_attention_heads"))
    kv = _int(cfg.get("num_key_value_heads")) or heads
    head_dim = _int(cfg.get("head_dim")) or (hidden // heads if hidden and heads else None)
    q, k, o = (_layer_shape(tensors, f"self_attn.{p}_proj.weight") for p in ("q", "k", "o"))
    d = {"field": "head_dim", "head_dim": head_dim, "num_attention_heads": heads, "num_key_value_heads": kv,
         "q_shape": q, "k_shape": k, "o_shape": o, "read_by": READS["attention"]}
    if not (hidden and heads and head_dim):
        return _f("agree_attention", "warning", "hidden_size / num_attention_heads missing: cannot check the "
                  "attention shapes.", **d)
    kv = kv or heads
    want = {"q": [heads * head_dim, 2 * hidden], "k": [kv * head_dim, 2 * hidden], "o": [hidden, heads * head_dim]}
    bad = [f"{p}_proj {s} (config implies {want[p]})" for p, s in (("q", q), ("k", k), ("o", o))
           if s is not None and s != want[p]]
    if bad:
        return _f("agree_attention", "error", f"SGLang will fail to load: {', '.join(bad)} with head_dim {head_dim}, "
                  f"{heads} heads, {kv} kv heads; {LOADERS['qkv']} asserts.", **d)
    return _f("agree_attention", "info", f"Attention weights match head_dim {head_dim}, {heads} heads, {kv} kv heads.",
              **d)


def check_positions(cfg: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    mine, theirs = _int(cfg.get("max_position_embeddings")), _int(target.get("max_position_embeddings"))
    d = {"field": "max_position_embeddings", "draft": mine, "target": theirs,
         "read_by": READS["max_position_embeddings"]}
    if mine is not None and theirs is not None and mine < theirs:
        return _f("agree_max_position_embeddings", "warning", f"Draft max_position_embeddings {mine} < the target's "
                  f"{theirs}: the draft's rotary cache is built for {mine} positions, so longer contexts run it "
                  "outside what it was configured (and trained) for.", **d)
    return _f("agree_max_position_embeddings", "info", f"max_position_embeddings {mine} (target {theirs}).", **d)


def check_dtype(cfg: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    mine, theirs = cfg.get("torch_dtype") or cfg.get("dtype"), target.get("torch_dtype")
    d = {"field": "torch_dtype", "draft": mine, "target": theirs, "read_by": READS["torch_dtype"]}
    if mine and theirs and mine != theirs:
        return _f("agree_torch_dtype", "warning", f"Draft saved as {mine}, target as {theirs}: SGLang runs the draft "
                  f"in the server's dtype (the target's with --dtype auto), so {mine} weights are cast.", **d)
    return _f("agree_torch_dtype", "info", f"torch_dtype {mine} (target {theirs}).", **d)


def check_tied(cfg: dict[str, Any], tensors: dict[str, Any], target: dict[str, Any]) -> list[dict[str, Any]]:
    """tie_word_embeddings and the parts each algorithm serves (eagle3_served, shared with the draft test and lab)."""
    tied = bool(cfg.get("tie_word_embeddings"))
    shapes = {n: m.get("shape") or [] for n, m in tensors.items()}
    out = []
    for algo in ("EAGLE3", "EAGLE"):
        parts = served_parts(cfg, shapes, algo, target_hidden_size=_int(target.get("hidden_size")))
        fid = "served_parts" if algo == "EAGLE3" else "served_parts_eagle"
        # a swap is what the engine does on purpose (lm_head, embed_tokens and wrong_algorithm findings judge the
        # harmful ones); only a predicted load failure is an error here
        sev = "error" if parts["fails"] else "info"
        msg = describe(parts)
        if parts["fails"]:
            msg = msg.replace("SGLang will fail", f"SGLang --speculative-algorithm {algo} will fail")
        else:
            msg = f"SGLang --speculative-algorithm {algo}: {msg}."
        out.append(_f(fid, sev, msg, algorithm=algo, served=parts["served"], trained=parts["trained"],
                      swapped=parts["swapped"], fails=parts["fails"],
                      tie_word_embeddings=tied, read_by=READS["tie_word_embeddings"]))
    return out


def check_agreement(raw: dict[str, Any], cfg: dict[str, Any], tensors: dict[str, Any],
                    target: dict[str, Any]) -> list[dict[str, Any]]:
    """All agreement findings for the raw config and its flat view (``eagle3_config.flat_config``); aux layer ids
    and rope stay in draft_findings (check_feeds, check_rope)."""
    speculators = isinstance(raw.get("transformer_layer_config"), dict)
    out = [check_hidden(cfg, tensors, target, speculators), check_vocab(cfg, tensors, target)]
    if tensors:
        out += [check_draft_vocab(cfg, tensors), check_attention(cfg, tensors)]
    out += [check_positions(cfg, target), check_dtype(cfg, target)]
    if tensors:
        out += check_tied(cfg, tensors, target)
    return out
