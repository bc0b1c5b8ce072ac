"""The checks behind draft_inspect: each turns config + tensor table into one finding (stdlib only, Python >= 3.9).

A finding is ``{"id", "severity": "info"|"warning"|"error", "message": one sentence, "details": {...}}``. The rules
follow research/eagle3-draft-spec.md and research/sglang-eagle3-facts.md; each message names what the engine will do.
"""

from __future__ import annotations

import re
from typing import Any

from remote_probes.checks.agreement import check_agreement
from remote_probes.eagle3.config import VARIANT_FLAGS, flat_config, rope_config, variant_flags
from remote_probes.eagle3.wiring import default_wiring, nested_ids, top_level_ids
from remote_probes.engine.vllm_capture import NEWEST, config_ids, vllm_wiring


def _finding(fid: str, severity: str, message: str, **details: Any) -> dict[str, Any]:
    return {"id": fid, "severity": severity, "message": message, "details": details}


def _strip(name: str) -> str:
    return name[len("model."):] if name.startswith("model.") else name


def _tensor(tensors: dict[str, Any], suffix: str) -> tuple[str | None, dict[str, Any] | None]:
    """A tensor by its name without the optional ``model.`` prefix."""
    for name, meta in tensors.items():
        if _strip(name) == suffix:
            return name, meta
    return None, None


def naming(raw: dict[str, Any], tensors: dict[str, Any]) -> dict[str, Any]:
    names = list(tensors)
    prefixed = bool(names) and all(n.startswith("model.") or n in ("lm_head.weight", "d2t", "t2d") for n in names)
    stripped = [_strip(n) for n in names]
    layers = sorted({int(m.group(1)) for n in stripped for m in [re.match(r"layers\.(\d+)\.", n)] if m})
    speculators = "speculators_model_type" in raw or "speculators_config" in raw
    if any(n.startswith("midlayer.") for n in stripped):
        variant, label = "midlayer", "midlayer.* (SpecForge / EAGLE training layout)"
    elif layers:
        variant = "layers"
        label = ("speculators (layers.N.*)" if speculators else "layers.N.* (vLLM / HF decoder-layer layout)")
    else:
        variant, label = "unknown", "no decoder-layer tensors recognised"
    if prefixed:
        label = "model. prefix + " + label
    return {"variant": variant, "model_prefix": prefixed, "speculators_config": speculators,
            "decoder_layers": layers, "label": label}


# The EAGLE-3 EntryClass names of SGLang 0.5.12.post1 and 0.5.23 (tests check this against the real trees); used
# only when no installed SGLang could be scanned (engine_registry), e.g. inspecting a draft on a machine without it.
KNOWN_SGLANG_EAGLE3 = frozenset({"LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM"})


def _engine_label(engine: dict[str, Any]) -> str:
    return f"{engine.get('engine', 'sglang')} {engine.get('version') or '(version unknown)'}"


def check_architecture(raw: dict[str, Any], engine: dict[str, Any] | None = None) -> dict[str, Any]:
    """Is there a loader for the draft's architecture? From the installed engine's registry when it was scanned
    (engine_registry: the EntryClass names of sglang/srt/models/*.py), else from the class name alone."""
    archs = raw.get("architectures") or []
    arch = archs[0] if isinstance(archs, list) and archs else None
    if not isinstance(arch, str):
        return _finding("architecture", "warning", "config.json lists no architectures, so the engine guesses "
                        "the model class from the command line.", architectures=archs)
    if engine is not None:
        return _architecture_in_registry(arch, engine)
    if arch in KNOWN_SGLANG_EAGLE3:
        return _finding("architecture", "info", f"Architecture {arch} selects an EAGLE-3 draft loader (SGLang "
                        "0.5.12.post1 and 0.5.23 register it; no installed SGLang was scanned).",
                        architecture=arch, eagle3_loader=True)
    if "eagle3" in arch.lower():
        return _finding("architecture", "warning", f"Architecture {arch} names no EAGLE-3 loader SGLang 0.5.12.post1 "
                        f"or 0.5.23 registers ({', '.join(sorted(KNOWN_SGLANG_EAGLE3))}); no installed SGLang was "
                        "scanned to check this one.", architecture=arch, eagle3_loader=None)
    if "eagle" in arch.lower():
        return _finding("architecture", "warning", f"Architecture {arch} is an EAGLE-1/2 draft class, not "
                        "EAGLE-3: no fc over three aux hidden states.", architecture=arch, eagle3_loader=False)
    return _finding("architecture", "error", f"Architecture {arch} is a base model class, so SGLang loads the "
                    "draft with its plain loader instead of the EAGLE-3 one (sglang PR 33966).",
                    architecture=arch, eagle3_loader=False)


def _architecture_in_vllm(arch: str, engine: dict[str, Any]) -> dict[str, Any]:
    """vLLM renames the draft's architecture for its method (transformers_utils/configs/eagle.py, read by
    engine_registry.scan_vllm) and looks that name up in model_executor/models/registry.py."""
    if engine.get("missing"):
        where = f"at {engine['root']} has no model_executor/models/registry.py" if engine.get("root") else \
            "is importable by the host's python"
        return _finding("architecture", "warning", f"No installed vLLM {where}, so whether vLLM can load "
                        f"architecture {arch} was not checked.", architecture=arch, eagle3_loader=None,
                        engine="vllm", source="none")
    label = _engine_label(engine)
    method = engine.get("method") or "eagle3"
    looked_up = engine.get("looked_up") or arch
    module = engine["architectures"].get(looked_up)
    renamed = f" ({method}: vLLM looks up {looked_up})" if looked_up != arch else ""
    details = {"architecture": arch, "looked_up": looked_up, "method": method, "engine": "vllm",
               "engine_version": engine.get("version"), "loader_module": module, "source": "engine registry"}
    if module is None:
        eagle3 = sorted(a for a in engine.get("speculative", []) if "eagle3" in a.lower())
        return _finding("architecture", "error", f"{label} has no model class named {looked_up}{renamed} in "
                        "model_executor/models/registry.py, so the draft cannot be loaded: the server fails at "
                        f"startup. Its EAGLE-3 draft classes: {', '.join(eagle3) or 'none'}.", eagle3_loader=False,
                        eagle3_loaders=eagle3, **details)
    base = module.rsplit("/", 1)[-1]
    if "eagle3" in base:
        return _finding("architecture", "info", f"Architecture {arch}{renamed} selects {label}'s EAGLE-3 draft "
                        f"loader ({module}).", eagle3_loader=True, **details)
    if "eagle" in base:
        return _finding("architecture", "warning", f"Architecture {arch}{renamed} selects {label}'s EAGLE-1/2 "
                        f"loader ({module}), not EAGLE-3: no fc over three aux hidden states.", eagle3_loader=False,
                        **details)
    return _finding("architecture", "error", f"Architecture {arch}{renamed} is {label}'s base model class "
                    f"({module}), so vLLM loads the draft as a plain model, not as an EAGLE-3 draft.",
                    eagle3_loader=False, **details)


def _architecture_in_registry(arch: str, engine: dict[str, Any]) -> dict[str, Any]:
    if engine.get("engine") == "vllm":
        return _architecture_in_vllm(arch, engine)
    label = _engine_label(engine)
    module = engine["architectures"].get(arch)
    details = {"architecture": arch, "engine": engine.get("engine"), "engine_version": engine.get("version"),
               "loader_module": module, "source": "engine registry"}
    if module is None:
        eagle3 = sorted(a for a, m in engine["architectures"].items() if "eagle3" in m.rsplit("/", 1)[-1])
        return _finding("architecture", "error", f"{label} has no model class named {arch} (no EntryClass in "
                        "sglang/srt/models), so the draft cannot be loaded: the server fails at startup with "
                        f"'Model architectures [{arch!r}] are not supported'. Its EAGLE-3 loaders: "
                        f"{', '.join(eagle3) or 'none'}.", eagle3_loader=False, eagle3_loaders=eagle3, **details)
    base = module.rsplit("/", 1)[-1]
    if "eagle3" in base:
        return _finding("architecture", "info", f"Architecture {arch} selects {label}'s EAGLE-3 draft loader "
                        f"({module}).", eagle3_loader=True, **details)
    if "eagle" in base:
        return _finding("architecture", "warning", f"Architecture {arch} selects {label}'s EAGLE-1/2 loader "
                        f"({module}), not EAGLE-3: no fc over three aux hidden states.", eagle3_loader=False,
                        **details)
    return _finding("architecture", "error", f"Architecture {arch} is {label}'s base model class ({module}), so "
                    "SGLang loads the draft with its plain loader instead of the EAGLE-3 one (sglang PR 33966).",
                    eagle3_loader=False, **details)


_FLAG_EFFECT = {
    "norm_before_residual": "the residual is the hidden_norm'ed hidden state, but the engine adds the attention "
                            "output to the un-normed one",
    "norm_before_fc": "the concatenated aux states are RMS-normed before fc, but the engine feeds them raw and "
                      "drops input_norm.weight",
    "fc_norm": "each aux state is RMS-normed before fc, but the engine feeds them raw and drops fc_norm.N.weight",
    "norm_output": "the normed hidden state is fed back to the next step, but the engine feeds the pre-norm one",
}


def check_variant_flags(raw: dict[str, Any], engine: dict[str, Any] | None,
                        loader_flags: dict[str, bool] | None) -> dict[str, Any]:
    """Draft-architecture variants the config turns on, and whether the engine's loader reads each flag."""
    flags = sorted(variant_flags(raw))
    details: dict[str, Any] = {"flags": flags, "engine": None if engine is None else engine.get("engine"),
                               "engine_version": None if engine is None else engine.get("version")}
    if not flags:
        return _finding("variant_flags", "info", "No draft variant flags (norm_before_residual, norm_before_fc, "
                        "fc_norm, norm_output) are set.", **details)
    if engine is None:
        return _finding("variant_flags", "warning", f"The draft sets {', '.join(flags)}; no engine was found to "
                        "scan, so whether the engine honours them is unknown.", **details)
    if loader_flags is None:
        return _finding("variant_flags", "warning", f"The draft sets {', '.join(flags)}, but "
                        f"{_engine_label(engine)} has no loader for its architecture to honour them.", **details)
    label = _engine_label(engine)
    ignored = [f for f in flags if not loader_flags.get(f)]
    details.update(read_by_engine=[f for f in flags if loader_flags.get(f)], ignored_by_engine=ignored,
                   all_flags_read=[f for f in VARIANT_FLAGS if loader_flags.get(f)])
    if ignored:
        effects = "; ".join(f"{f}: {_FLAG_EFFECT[f]}" for f in ignored)
        return _finding("variant_flags", "error", f"{label} never reads {', '.join(ignored)}, so if the draft was "
                        f"trained with it, it serves a different network than was trained ({effects}); the draft "
                        "test scores the draft as served and as trained.", **details)
    return _finding("variant_flags", "info", f"{label}'s loader reads {', '.join(flags)}.", **details)


def check_config_layout(raw: dict[str, Any], engine: dict[str, Any] | None,
                        engine_reads_nested: bool | None) -> dict[str, Any] | None:
    """A speculators config nests the decoder config; an engine that reads only the top level misses it."""
    nested = raw.get("transformer_layer_config")
    if not isinstance(nested, dict):
        return None
    only_nested = sorted(k for k in ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size",
                                     "num_hidden_layers", "model_type") if k in nested and raw.get(k) is None)
    details = {"layout": "speculators", "nested_only": only_nested,
               "engine": None if engine is None else engine.get("engine"),
               "engine_version": None if engine is None else engine.get("version"),
               "engine_reads_transformer_layer_config": engine_reads_nested}
    if not only_nested:
        return _finding("config_layout", "info", "speculators layout; the decoder keys are also at the top level.",
                        **details)
    if engine is None or engine_reads_nested is None:
        return _finding("config_layout", "warning", f"speculators layout: {', '.join(only_nested)} exist only under "
                        "transformer_layer_config; engines that read a flat config (SGLang) will not find them.",
                        **details)
    if engine_reads_nested:
        return _finding("config_layout", "info", f"speculators layout; {_engine_label(engine)} reads "
                        "transformer_layer_config.", **details)
    why = ("it parses config.json with transformers' AutoConfig, which refuses a config without a top-level "
           "model_type ('Unrecognized model ... Should have a `model_type` key')" if "model_type" in only_nested
           else "it builds the draft from the top-level keys alone")
    return _finding("config_layout", "error", f"speculators layout: {', '.join(only_nested)} exist only under "
                    f"transformer_layer_config, which {_engine_label(engine)} never reads: {why}.", **details)


def check_fc(cfg: dict[str, Any], tensors: dict[str, Any], hidden: Any, target: dict[str, Any],
             num_aux: int, aux_source: str) -> dict[str, Any]:
    if target.get("hidden_size"):
        t_hidden, t_source = target["hidden_size"], "target"
    elif isinstance(cfg.get("target_hidden_size"), int):
        t_hidden, t_source = cfg["target_hidden_size"], "config.target_hidden_size"
    else:
        t_hidden, t_source = hidden, "assumed equal to the draft hidden_size"
    name, meta = _tensor(tensors, "fc.weight")
    details = {"num_aux": num_aux, "num_aux_source": aux_source, "target_hidden_size": t_hidden,
               "target_hidden_source": t_source, "expected_in": num_aux * t_hidden if t_hidden else None}
    if meta is None:
        return _finding("fc_width", "error", "No fc.weight: the draft cannot project the aux hidden states.",
                        **details)
    shape = meta["shape"]
    details.update(tensor=name, shape=shape)
    if len(shape) != 2 or not t_hidden:
        return _finding("fc_width", "warning", f"fc.weight has shape {shape}; cannot check it without both "
                        "hidden sizes.", **details)
    out_dim, in_dim = shape
    if hidden and out_dim != hidden:
        return _finding("fc_width", "error", f"fc.weight outputs {out_dim} features but hidden_size is {hidden}.",
                        **details)
    if in_dim == num_aux * t_hidden:
        return _finding("fc_width", "info", f"fc input width {in_dim} = {num_aux} aux layers x target hidden "
                        f"{t_hidden}.", **details)
    if in_dim % t_hidden == 0:
        return _finding("fc_width", "error", f"fc input width {in_dim} takes {in_dim // t_hidden} aux states of "
                        f"{t_hidden}, but the config makes the engine feed {num_aux} ({aux_source}).", **details)
    return _finding("fc_width", "error", f"fc input width {in_dim} is not a multiple of the target hidden size "
                    f"{t_hidden}.", **details)


def check_lm_head(cfg: dict[str, Any], tensors: dict[str, Any], hidden: Any) -> dict[str, Any]:
    name, meta = _tensor(tensors, "lm_head.weight")
    declared = cfg.get("draft_vocab_size")
    tied = bool(cfg.get("tie_word_embeddings"))
    details = {"tensor": name, "shape": meta["shape"] if meta else None, "draft_vocab_size": declared,
               "vocab_size": cfg.get("vocab_size"), "tie_word_embeddings": tied}
    if meta is None and declared is not None and not tied:
        return _finding("lm_head", "error", f"No lm_head.weight although draft_vocab_size={declared} is declared: "
                        "SGLang keeps a randomly initialised head (sglang PR 27908).", **details)
    if meta is None:
        return _finding("lm_head", "info", "No lm_head.weight and no draft_vocab_size: the engine uses the "
                        "target's lm_head.", **details)
    rows = meta["shape"][0] if meta["shape"] else None
    if tied:  # not the target's lm_head: a tied head is the embedding module, which the field reading judges
        return _finding("lm_head", "info", "lm_head.weight is present and tie_word_embeddings is true: whether the "
                        "engine serves it or the embedding in its place is the field reading's (draft_fields).",
                        **details)
    if declared is None:
        return _finding("lm_head", "warning", "lm_head.weight is present but SGLang loads the target's lm_head "
                        "instead (draft_vocab_size absent), so the draft's head is unused.", **details)
    # a head that does not fit its config is the config's or the weights' fault: the field reading (draft_fields,
    # remote_probes/draft_reading/) says which, what the engine does with it and the fix; the head is not missing
    if rows != declared:
        return _finding("lm_head", "info", f"lm_head.weight has {rows} rows but draft_vocab_size is {declared}: the "
                        "field reading (draft_fields) judges the declared size.", **details)
    if hidden and meta["shape"][-1] != hidden:
        return _finding("lm_head", "info", f"lm_head.weight has width {meta['shape'][-1]} but hidden_size is "
                        f"{hidden}: the field reading (draft_fields) judges the declared size.", **details)
    return _finding("lm_head", "info", f"lm_head.weight [{rows}, {meta['shape'][-1]}] matches "
                    f"draft_vocab_size {declared}.", **details)


def classify_d2t(d2t: list[int], vocab: int | None, t2d_ids: set[int] | None) -> tuple[str, str]:
    """(verdict, reason). Offsets (the convention both engines use: target = i + d2t[i]) come from a sorted
    selection of target ids, so d2t is non-decreasing and repeats whenever two draft ids map to adjacent target
    ids; direct ids are all distinct. A list fitting both is settled by t2d, else called ambiguous."""
    if any(v < 0 for v in d2t):
        return "invalid", "d2t has negative values"
    as_offsets = all(d2t[i] <= d2t[i + 1] for i in range(len(d2t) - 1)) and (
        vocab is None or max(i + v for i, v in enumerate(d2t)) < vocab)
    as_ids = len(set(d2t)) == len(d2t) and (vocab is None or max(d2t) < vocab)
    if as_offsets and as_ids and t2d_ids is not None:
        if t2d_ids == {i + v for i, v in enumerate(d2t)}:
            return "offsets", "fits both readings; t2d agrees with offsets"
        if t2d_ids == set(d2t):
            return "direct_ids", "fits both readings; t2d agrees with direct ids"
    if as_offsets and as_ids:
        return "ambiguous", "non-decreasing, distinct and in range under both readings"
    if as_offsets:
        return "offsets", "non-decreasing with i + d2t[i] inside the vocabulary"
    if as_ids:
        why = "i + d2t[i] exceeds the vocabulary" if vocab and max(i + v for i, v in enumerate(d2t)) >= vocab \
            else "not non-decreasing"
        return "direct_ids", f"distinct values that are not offsets ({why})"
    return "invalid", "neither non-decreasing offsets inside the vocabulary nor distinct ids"


def check_d2t_t2d(cfg: dict[str, Any], tensors: dict[str, Any], small: dict[str, Any],
                  vocab: int | None) -> list[dict[str, Any]]:
    d2t_name, d2t_meta = _tensor(tensors, "d2t")
    t2d_name, t2d_meta = _tensor(tensors, "t2d")
    d2t = small.get(d2t_name) if d2t_name else None
    t2d = small.get(t2d_name) if t2d_name else None
    declared = cfg.get("draft_vocab_size")
    out = []
    t2d_ids = {i for i, v in enumerate(t2d) if v} if t2d is not None else None
    if d2t_meta is None:
        reduced = declared is not None and declared != vocab
        ids = sorted(t2d_ids) if t2d_ids is not None else None
        wrong = sum(1 for i, t in enumerate(ids) if t != i) if ids is not None and len(ids) == declared else None
        share = (f"; its t2d holds the map: {wrong} of its {declared} draft ids ({100 * wrong / declared:.1f}%) name "
                 "another target id than i, so that share of drafted tokens is read as the wrong token"
                 if wrong is not None and declared else
                 "; no t2d in the checkpoint holds the map either" if t2d_meta is None else "")
        out.append(_finding("d2t", "error" if reduced else "info",
                            f"No d2t tensor although the draft vocabulary is reduced ({declared} of {vocab}): both "
                            "engines then read draft id i as target id i (vLLM's draft_id_to_target_id stays zeros, "
                            f"SGLang's hot_token_id unset; NeMo Automodel PR 2447){share}."
                            if reduced else "No d2t tensor; the draft predicts target ids directly.",
                            draft_vocab_size=declared, vocab_size=vocab, verdict="missing" if reduced else "none",
                            t2d=t2d_meta is not None, wrong_ids=wrong))
    elif d2t is None:
        out.append(_finding("d2t", "warning", f"d2t has dtype {d2t_meta['dtype']}, which this probe cannot read.",
                            dtype=d2t_meta["dtype"], shape=d2t_meta["shape"]))
    else:
        verdict, reason = classify_d2t(d2t, vocab, t2d_ids)
        details = {"verdict": verdict, "reason": reason, "length": len(d2t), "draft_vocab_size": declared,
                   "min": min(d2t) if d2t else None, "max": max(d2t) if d2t else None,
                   "head": d2t[:8], "repeats": sum(1 for i in range(len(d2t) - 1) if d2t[i] == d2t[i + 1])}
        if declared is not None and len(d2t) != declared:
            out.append(_finding("d2t", "error", f"d2t has {len(d2t)} entries but draft_vocab_size is {declared}.",
                                **details))
        elif verdict == "offsets":
            out.append(_finding("d2t", "info", f"d2t holds offsets (target id = i + d2t[i]), the convention SGLang "
                                f"and vLLM apply: {reason}.", **details))
        elif verdict == "direct_ids":
            out.append(_finding("d2t", "error", f"d2t holds target ids, not offsets ({reason}); SGLang and vLLM "
                                "add i to it, so drafted tokens map to wrong ids.", **details))
        elif verdict == "ambiguous":
            out.append(_finding("d2t", "warning", "d2t fits both the offset and the direct-id reading and no t2d "
                                "settles it; engines read it as offsets.", **details))
        else:
            out.append(_finding("d2t", "error", f"d2t is not a usable map: {reason}.", **details))
    if t2d_meta is not None:
        details = {"length": len(t2d) if t2d is not None else None, "vocab_size": vocab,
                   "selected": len(t2d_ids) if t2d_ids is not None else None}
        if t2d is None:
            out.append(_finding("t2d", "warning", f"t2d has dtype {t2d_meta['dtype']}, which this probe cannot "
                                "read.", **details))
        elif d2t is None:
            out.append(_finding("t2d", "info", "t2d present without a readable d2t; engines do not use t2d.",
                                **details))
        elif t2d_ids == {i + v for i, v in enumerate(d2t)}:
            out.append(_finding("t2d", "info", "t2d is consistent with d2t: nonzero(t2d) == d2t + arange.",
                                **details))
        elif t2d_ids == set(d2t):
            out.append(_finding("t2d", "warning", "t2d marks the d2t values themselves, i.e. it was built from "
                                "d2t read as direct ids.", **details))
        else:
            out.append(_finding("t2d", "warning", "t2d disagrees with d2t (nonzero(t2d) != d2t + arange); one of "
                                "them was regenerated.", **details))
    return out


def check_feeds(raw: dict[str, Any], n_layers: int | None, vllm_rules: dict[str, Any] | None = None,
                target_class: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Which HF hidden_states indices each engine feeds (see eagle3_wiring), and a finding about it. vLLM's reading
    is the installed one's (``vllm_rules``: vllm_capture.capture_rules), else the newest vLLM read (0.33.0).
    SGLang's default is the target class's own (``target_class``: target_capture.resolve) where it was followed."""
    nested, top = nested_ids(raw), top_level_ids(raw)
    default = default_wiring(n_layers) if n_layers else None
    default_from = None
    if target_class and target_class.get("engine") == "sglang" and target_class.get("found") and \
            target_class.get("num_layers") == n_layers:
        default, default_from = target_class["default_ids"], target_class.get("where")
    sglang = [i + 1 for i in nested] if nested is not None else default
    vllm_ids = config_ids(raw, vllm_rules)
    if n_layers:
        vllm = vllm_wiring(raw, n_layers, vllm_rules)
    else:
        vllm = sorted(set(vllm_ids)) if vllm_ids is not None else None
    feeds = {"sglang": sglang, "vllm": vllm}
    where = "both" if nested is not None and top is not None else "nested" if nested is not None else \
        "top_level" if top is not None else "none"
    rules = vllm_rules or NEWEST
    details = {"location": where, "nested_ids": nested, "top_level_ids": top, "default": default,
               "default_from": default_from,
               "target_num_layers": n_layers, "feeds": feeds,
               "vllm": {"version": rules.get("version"), "runner": rules.get("runner"),
                        "runner_why": rules.get("runner_why"), "ids_read": vllm_ids,
                        "capture": rules.get("capture"), "evidence": rules.get("evidence", [])}}
    beyond = [i for i in (sglang or []) + (vllm or []) if n_layers and (i < 0 or i >= n_layers)]
    if beyond and n_layers:  # beyond is empty without n_layers
        return feeds, _finding("aux_layer_ids", "error", f"Aux hidden-state indices {sorted(set(beyond))} are "
                               f"never captured: a {n_layers}-layer target captures indices 0..{n_layers - 1} at "
                               "layer entry.", **details)
    if n_layers and vllm is None:
        return feeds, _finding("aux_layer_ids", "warning", f"vLLM {rules.get('version')} cannot capture the ids "
                               f"{vllm_ids} on a {n_layers}-layer target (capture at layer {rules.get('capture')}"
                               f"{'; the embedding output is not capturable' if rules.get('embedding') is False else ''}"
                               f"); SGLang feeds {sglang}.", **details)
    if where == "none":
        msg = (f"No aux layer ids: SGLang and vLLM both feed the default [2, N//2, N-3] = {default}."
               if default else "No aux layer ids: engines feed [2, N//2, N-3]; pass target_num_layers to resolve it.")
        return feeds, _finding("aux_layer_ids", "info", msg, **details)
    if sglang is not None and vllm is not None and sglang != vllm:
        why = {"both": "the nested and top-level ids disagree",
               "nested": (f"vLLM {rules.get('version')} ({rules.get('runner')} runner) reads the nested "
                          "eagle_config ids as its layer indices, without SGLang's +1" if rules.get("reads_nested")
                          else "vLLM ignores the nested eagle_config ids"),
               "top_level": "SGLang's llama path ignores top-level ids"}[where]
        return feeds, _finding("aux_layer_ids", "warning", f"SGLang feeds hidden_states {sglang} but vLLM feeds "
                               f"{vllm}: {why}.", **details)
    if where == "top_level" and sglang is None:
        return feeds, _finding("aux_layer_ids", "warning", f"Only top-level ids {top} (vLLM convention): SGLang "
                               "ignores them and feeds [2, N//2, N-3]; pass target_num_layers to compare.",
                               **details)
    text = {"nested": f"Nested eagle_config ids {nested}: SGLang feeds ids+1 = {sglang}.",
            "both": f"Nested ids +1 and top-level ids agree: both engines feed {sglang}.",
            "top_level": f"Top-level ids {top} equal SGLang's default, so both engines feed {vllm}."}[where]
    return feeds, _finding("aux_layer_ids", "info", text, **details)


def check_rope(cfg: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    """rope_theta as the engines read it: ``rope_parameters`` (transformers 5) first, then the legacy keys."""
    theta, scaling, source = rope_config(cfg)
    t_theta = target.get("rope_theta")
    details = {"rope_theta": theta, "rope_theta_source": source, "rope_scaling": scaling,
               "target_rope_theta": t_theta, "target_rope_theta_source": target.get("rope_theta_source")}
    if theta is None:
        return _finding("rope", "warning", "rope_theta is missing (neither rope_parameters.rope_theta nor "
                        "rope_theta), so engines assume 10000" + (f" while the target uses {t_theta}." if t_theta
                                                                  else "."), **details)
    if t_theta is not None and float(t_theta) != float(theta):
        return _finding("rope", "warning", f"Draft rope_theta {theta} differs from the target's {t_theta}.",
                        **details)
    return _finding("rope", "info", f"rope_theta {theta} (from {source}).", **details)


def analyse(raw: dict[str, Any], tensors: dict[str, Any], small: dict[str, Any], weights: dict[str, Any],
            target: dict[str, Any], engine: dict[str, Any] | None = None,
            loader_flags: dict[str, bool] | None = None, engine_reads_nested: bool | None = None,
            vllm_rules: dict[str, Any] | None = None,
            ) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """(feeds, naming, findings) for one draft checkpoint; ``engine`` is engine_registry.scan_sglang's result and
    ``loader_flags`` what the loader of the draft's architecture reads (both None when no engine was scanned)."""
    # speculators nests the Llama config under transformer_layer_config; top-level keys win.
    cfg = flat_config(raw)
    hidden = cfg.get("hidden_size")
    vocab = target.get("vocab_size") or cfg.get("vocab_size")
    findings: list[dict[str, Any]] = []
    if not tensors:
        sev, msg = (("warning", "Only pytorch .bin weights: tensors were not inspected.") if weights["pytorch_bin"]
                    else ("error", "No *.safetensors or pytorch .bin weights in the draft directory."))
        findings.append(_finding("weights", sev, msg, **weights))
    elif weights.get("missing_shards"):
        findings.append(_finding("weights", "error", f"The safetensors index names missing shards "
                                 f"{weights['missing_shards']}.", **weights))
    findings.append(check_architecture(raw, engine))
    findings.append(check_variant_flags(raw, engine, loader_flags))
    layout = check_config_layout(raw, engine, engine_reads_nested)
    if layout is not None:
        findings.append(layout)
    nested, top = nested_ids(raw), top_level_ids(raw)
    if isinstance(cfg.get("num_aux_hidden_states"), int):
        num_aux, aux_source = cfg["num_aux_hidden_states"], "num_aux_hidden_states"
    elif nested is not None:
        num_aux, aux_source = len(nested), "eagle_config ids"
    else:
        num_aux, aux_source = 3, "default of 3"
    if tensors:
        findings.append(check_fc(cfg, tensors, hidden, target, num_aux, aux_source))
        findings.append(check_lm_head(cfg, tensors, hidden))
        findings.extend(check_d2t_t2d(cfg, tensors, small, vocab))
    tied = bool(cfg.get("tie_word_embeddings"))
    findings.append(_finding("tied_embeddings", "warning" if tied else "info",
                             "tie_word_embeddings is true: SGLang takes lm_head from the target." if tied
                             else "tie_word_embeddings is false or absent.", tie_word_embeddings=tied))
    feeds, feed_finding = check_feeds(raw, target.get("num_layers"), vllm_rules, target.get("class"))
    findings.append(feed_finding)
    if top is not None and nested is None and num_aux != len(top):
        findings.append(_finding("aux_count", "warning", f"{len(top)} top-level ids but SGLang sizes fc for "
                                 f"{num_aux} aux states ({aux_source}).", top_level_ids=top, num_aux=num_aux))
    findings.append(check_rope(cfg, target))
    name_info = naming(raw, tensors)
    findings.append(_finding("naming", "warning" if name_info["variant"] == "unknown" else "info",
                             f"Tensor naming: {name_info['label']}.", **name_info))
    if tensors:
        findings.append(check_embed(cfg, tensors, hidden, target))
    findings.extend(check_agreement(raw, cfg, tensors, target))
    return feeds, name_info, findings


def check_embed(cfg: dict[str, Any], tensors: dict[str, Any], hidden: Any, target: dict[str, Any]) -> dict[str, Any]:
    name, meta = _tensor(tensors, "embed_tokens.weight")
    t_hidden = target.get("hidden_size") or cfg.get("target_hidden_size") or hidden
    details = {"tensor": name, "shape": meta["shape"] if meta else None, "hidden_size": hidden,
               "target_hidden_size": t_hidden}
    if meta is not None:
        return _finding("embed_tokens", "info", "The draft ships embed_tokens; SGLang replaces it with the "
                        "target's embedding when the hidden sizes match.", **details)
    if hidden and t_hidden and hidden != t_hidden:
        return _finding("embed_tokens", "error", f"No embed_tokens and draft hidden {hidden} != target hidden "
                        f"{t_hidden}: SGLang's set_embed silently skips, leaving a random embedding.", **details)
    return _finding("embed_tokens", "info", "No embed_tokens: the engine shares the target's embedding.", **details)
