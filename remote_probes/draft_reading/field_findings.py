"""The draft's config against the checkpoint and the target, field by field, as the installed engine reads it.

Each finding names the field, its value, what the engine does with it at its own file:line (field_table.py reads
that line in the installed source), and the change that fixes it (``details.fix``: config keys and values, written
beside the draft by draft_fix). Standard library only.

- ``layout`` fields against the checkpoint's tensors: a module the config builds and the checkpoint does not fill
  stays at its initial values (both engines' draft loaders fill what the checkpoint has and never check for what it
  lacks), a trained tensor whose module the config does not build is never served (tie_word_embeddings true: the
  head is the embedding module, so the shipped lm_head.weight is dropped; fc_norm unset beside fc_norm.* tensors).
- ``numeric`` fields against the target's config: the draft's layer uses the DRAFT's value; one that differs from
  the target's (the value trainers copy) is a candidate, scored by the counterfactual draft test with the target's
  value, never a verdict by itself (severity warning).
- fields the installed engine never reads: listed (info), so that a difference there is known to change nothing.
- values the installed engine refuses or serves wrong past a limit (engine_limits.py: an activation other than
  silu, a rotary table shorter than the target's context), with the line that decides it and the fix;
- tensor names the installed engine's loader cannot place (``tensor.names``, read by tensor_placement.py): SGLang
  drops them and serves the parameters they were for at their initial values, vLLM refuses the draft at start; the
  fix (``details.rename``: saved name -> the name the loader places) is a renamed copy of the weights.

Public API: ``field_findings(config, tensors, target, reading) -> [one finding]`` (its ``details.findings`` holds
the per-field ones), ``decoder_layers(tensors)``,
``SUMMARY_ID``.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from remote_probes.draft_reading.engine_limits import limit_findings
from remote_probes.draft_reading.tensor_placement import as_trained, place

SUMMARY_ID = "draft_fields"
#: config keys that are bookkeeping, not model structure, or that the engine reads outside the draft class (the
#: registry reads architectures, the model runner the top-level aux ids: findings.check_feeds): never "unread"
_META = frozenset({"architectures", "torch_dtype", "dtype", "transformers_version", "_name_or_path", "bos_token_id",
                   "eos_token_id", "pad_token_id", "use_cache", "initializer_range", "pretraining_tp",
                   "attention_dropout", "speculators_model_type", "speculators_config", "speculators_version",
                   "transformer_layer_config", "text_config", "auto_map", "quantization_config",
                   "eagle_aux_hidden_state_layer_ids", "model_type",
                   # transformers' config class maps these into each other (transformers 5: rope_theta ->
                   # rope_parameters), so the key the class reads is not the key the file holds
                   "rope_theta", "rope_scaling", "rope_parameters"})
#: numeric fields compared with the target's (the RoPE keys have their own check: findings.check_rope)
_TARGET_NUMERIC = ("hidden_act", "rms_norm_eps", "max_position_embeddings", "partial_rotary_factor",
                   "rope_is_neox_style")
_LAYER = re.compile(r"^(?:model\.)?(?:layers\.(\d+)|midlayer)\.")


def _f(fid: str, severity: str, message: str, **details: Any) -> Dict[str, Any]:
    return {"id": fid, "severity": severity, "message": message, "details": details}


def _canon(name: str) -> str:
    return name[len("model."):] if name.startswith("model.") else name


def decoder_layers(tensors: Dict[str, Any]) -> List[int]:
    """The decoder layer indices the checkpoint fills (``midlayer.*`` is layer 0)."""
    out = set()
    for name in tensors:
        m = _LAYER.match(name)
        if m:
            out.add(int(m.group(1)) if m.group(1) is not None else 0)
    return sorted(out)


def _where(reading: Dict[str, Any], field: str) -> str:
    loc = reading["fields"].get(field) or {}
    return "%s:%s" % (loc.get("file"), loc.get("line")) if loc else "(not located)"


def _label(reading: Dict[str, Any]) -> str:
    name = "SGLang" if reading.get("engine") == "sglang" else "vLLM"
    return "%s %s" % (name, reading.get("version") or "(version unknown)")


def _details(reading: Dict[str, Any], field: str, value: Any, fix: Optional[Dict[str, Any]] = None,
             **extra: Any) -> Dict[str, Any]:
    loc = reading["fields"].get(field) or {}
    return dict(field=field, value=value, engine=reading.get("engine"), engine_version=reading.get("version"),
                file=loc.get("file"), line=loc.get("line"), code=loc.get("text"), fix=fix, **extra)


def _tied(cfg: Dict[str, Any], names: Dict[str, Any], reading: Dict[str, Any]) -> List[Dict[str, Any]]:
    if not cfg.get("tie_word_embeddings") or "lm_head.weight" not in names:
        return []
    shape = (names.get("lm_head.weight") or {}).get("shape")
    label = _label(reading)
    if "tie_word_embeddings" not in reading["fields"]:
        return [_f("field.tie_word_embeddings", "info", "tie_word_embeddings is true, but %s's EAGLE-3 class never "
                   "reads it: the checkpoint's lm_head.weight %s is served." % (label, shape),
                   **_details(reading, "tie_word_embeddings", True, read=False))]
    return [_f("field.tie_word_embeddings", "error", "tie_word_embeddings is true, so %s makes the draft's head its "
               "embed_tokens module (%s: `%s`), which the target's embedding replaces: the trained lm_head.weight %s "
               "in the checkpoint is never served. Fix: tie_word_embeddings false (SpecForge PR 140 forces it false "
               "on export)." % (label, _where(reading, "tie_word_embeddings"),
                                reading["fields"]["tie_word_embeddings"].get("text"), shape),
               **_details(reading, "tie_word_embeddings", True, {"tie_word_embeddings": False}, parts=["head"],
                          read=True))]


def _layers(cfg: Dict[str, Any], names: Dict[str, Any], reading: Dict[str, Any]) -> List[Dict[str, Any]]:
    declared = cfg.get("num_hidden_layers")
    filled = decoder_layers(names)
    if "num_hidden_layers" not in reading["fields"] or not isinstance(declared, int) or not filled:
        return []
    if declared == len(filled) and filled == list(range(declared)):
        return []
    label = _label(reading)
    if declared > len(filled):
        what = ("builds %d draft decoder layers (%s) but the checkpoint fills only %s: layer(s) %s stay at their "
                "initial values and every draft token passes through them" % (
                    declared, _where(reading, "num_hidden_layers"), filled,
                    sorted(set(range(declared)) - set(filled))))
    else:
        what = ("builds %d draft decoder layer(s) (%s) but the checkpoint has layers %s: the trained layer(s) %s are "
                "never served" % (declared, _where(reading, "num_hidden_layers"), filled,
                                  [i for i in filled if i >= declared]))
    return [_f("field.num_hidden_layers", "error", "num_hidden_layers is %d, so %s %s. Fix: num_hidden_layers %d."
               % (declared, label, what, len(filled)),
               **_details(reading, "num_hidden_layers", declared, {"num_hidden_layers": len(filled)},
                          checkpoint_layers=filled))]


def _head_rows(cfg: Dict[str, Any], names: Dict[str, Any], target: Optional[Dict[str, Any]],
               reading: Dict[str, Any]) -> List[Dict[str, Any]]:
    """draft_vocab_size (absent: vocab_size) sizes the head the engine builds; the checkpoint's lm_head.weight and
    d2t say what was trained (EAGLE issue 249: a 32000-row draft head against a 128256-row build)."""
    head = names.get("lm_head.weight")
    if "draft_vocab_size" not in reading["fields"] or not head or cfg.get("tie_word_embeddings"):
        return []
    rows = (head.get("shape") or [None])[0]
    declared = cfg.get("draft_vocab_size")
    built = declared if declared is not None else cfg.get("vocab_size")
    if not isinstance(rows, int) or built == rows:
        return []
    d2t = names.get("d2t")
    d2t_len = (d2t.get("shape") or [None])[0] if d2t else None
    fix = {"draft_vocab_size": rows} if d2t_len in (None, rows) else None
    label = _label(reading)
    sglang_target_head = reading.get("engine") == "sglang" and declared is None
    if sglang_target_head and isinstance(d2t_len, int) and isinstance(built, int) and d2t_len < built:
        what = ("takes the target's %s-row head instead (load_lm_head_from_target, %s), which the checkpoint's "
                "%s-entry d2t (hot_token_id) indexes past its end at the first draft step; the trained lm_head.weight "
                "[%s rows] is never served" % (built, _where(reading, "draft_vocab_size"), d2t_len, rows))
    elif sglang_target_head:
        what = ("takes the target's embedding and head instead (load_lm_head_from_target, %s), so the trained "
                "lm_head.weight [%s rows] is never served" % (_where(reading, "draft_vocab_size"), rows))
    elif reading.get("engine") == "vllm" and d2t_len is not None and built == (target or {}).get("vocab_size"):
        # vLLM 0.32 registers draft_id_to_target_id only when draft_vocab_size differs from the target's vocabulary
        what = ("builds a %s-row head and no d2t parameter (%s: the map exists only for a smaller draft "
                "vocabulary), so the checkpoint's d2t has nowhere to load and the %s-row lm_head.weight does not fit: "
                "vLLM refuses the draft at start" % (built, _where(reading, "draft_vocab_size"), rows))
    else:
        what = ("builds the head with %s rows (%s) and the checkpoint's lm_head.weight has %s: the weights do not "
                "fit it (a size mismatch at load)" % (built, _where(reading, "draft_vocab_size"), rows))
    said = "absent (so vocab_size %s)" % built if declared is None else str(declared)
    return [_f("field.draft_vocab_size", "error", "draft_vocab_size is %s, so %s %s%s" % (
        said, label, what, (". Fix: draft_vocab_size %d (the head's rows%s)." % (
            rows, ", as d2t's length" if d2t_len == rows else "")) if fix else
        "; d2t has %s entries, so the size the draft was trained at is not clear." % d2t_len),
        **_details(reading, "draft_vocab_size", declared, fix, head_rows=rows, d2t_length=d2t_len,
                   parts=["head"] if sglang_target_head and not (isinstance(d2t_len, int) and d2t_len < (built or 0))
                   else []))]


#: shape fields and the checkpoint tensor (canonical name, axis) whose size each sets; the fix is that size
_SHAPES = (("hidden_size", "norm.weight", 0), ("intermediate_size", "layers.0.mlp.gate_proj.weight", 0))


def _shapes(cfg: Dict[str, Any], names: Dict[str, Any], reading: Dict[str, Any]) -> List[Dict[str, Any]]:
    out = []
    for field, tensor, axis in _SHAPES:
        meta = names.get(tensor) or names.get(tensor.replace("layers.0.", "midlayer."))
        value = cfg.get(field)
        if field not in reading["fields"] or not meta or not isinstance(value, int):
            continue
        size = (meta.get("shape") or [None] * (axis + 1))[axis]
        if isinstance(size, int) and size != value:
            out.append(_f("field." + field, "error", "%s is %d, so %s %s (%s), but the checkpoint's %s has %d: the "
                          "weights do not fit (a size mismatch at load; DeepSpec issue 44). Fix: %s %d." % (
                              field, value, _label(reading), reading["fields"][field].get("does"),
                              _where(reading, field), tensor, size, field, size),
                          **_details(reading, field, value, {field: size}, tensor=tensor, tensor_size=size)))
    return out


#: layout flag -> (tensor name regex the flag builds, what the module is)
_FLAG_TENSORS = {
    "fc_norm": (r"^fc_norm\.\d+\.weight$|^aux_norm_(low|mid|high)\.weight$", "per-aux-state fc_norm RMSNorms"),
    "norm_before_fc": (r"^input_norm\.weight$", "the input_norm over the concatenated aux states"),
}


def _flags(cfg: Dict[str, Any], names: Dict[str, Any], reading: Dict[str, Any]) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    raw_nested = cfg.get("eagle_config")
    nested: Dict[str, Any] = raw_nested if isinstance(raw_nested, dict) else {}
    for flag, (pattern, module) in _FLAG_TENSORS.items():
        if flag not in reading["fields"]:
            continue
        value = cfg.get(flag)
        if flag == "fc_norm" and not value:
            value = cfg.get("use_aux_norm") if "use_aux_norm" in reading["fields"] else value
        if flag == "norm_before_fc" and "norm_before_fc" in nested:
            value = nested["norm_before_fc"]
        rx = re.compile(pattern)
        present = sorted(n for n in (_canon(k) for k in names) if rx.match(n))
        label = _label(reading)
        if present and not value:
            out.append(_f("field." + flag, "error", "The checkpoint has %s (%s) but %s is %s, so %s does not build "
                          "them (%s): the trained norms are never served. Fix: %s true." % (
                              module, ", ".join(present[:3]), flag, value, label, _where(reading, flag), flag),
                          **_details(reading, flag, value, {flag: True}, tensors=present)))
        elif value and not present:
            out.append(_f("field." + flag, "error", "%s is %s, so %s builds %s (%s), but the checkpoint has none: they "
                          "stay at their initial values. Fix: %s false, or re-export the trained norms." % (
                              flag, value, label, module, _where(reading, flag), flag),
                          **_details(reading, flag, value, {flag: False})))
    return out


def _biases(cfg: Dict[str, Any], names: Dict[str, Any], reading: Dict[str, Any]) -> List[Dict[str, Any]]:
    out = []
    canon = [_canon(n) for n in names]
    for flag, rx in (("attention_bias", r"self_attn\.[qkv]_proj\.bias$"), ("mlp_bias", r"mlp\.\w+_proj\.bias$")):
        if flag not in reading["fields"] or not cfg.get(flag):
            continue
        if not any(re.search(rx, n) for n in canon):
            out.append(_f("field." + flag, "error", "%s is true, so %s builds biases the checkpoint does not have "
                          "(%s): they stay at their initial values. Fix: %s false." % (
                              flag, _label(reading), _where(reading, flag), flag),
                          **_details(reading, flag, True, {flag: False})))
    return out


def _numeric(cfg: Dict[str, Any], target: Optional[Dict[str, Any]], reading: Dict[str, Any],
             judged: frozenset = frozenset()) -> List[Dict[str, Any]]:
    if not target:
        return []
    out = []
    for field in _TARGET_NUMERIC:
        if field in judged or field not in reading["fields"] or field not in cfg or target.get(field) is None:
            continue
        mine, theirs = cfg[field], target[field]
        if mine == theirs or (isinstance(mine, (int, float)) and isinstance(theirs, (int, float))
                              and float(mine) == float(theirs)):
            continue
        out.append(_f("field." + field, "warning", "%s is %r in the draft's config and %r in the target's; %s's draft "
                      "layer uses the draft's (%s: %s). A candidate: the counterfactual draft test scores the "
                      "target's value." % (field, mine, theirs, _label(reading), _where(reading, field),
                                           reading["fields"][field].get("does")),
                      **_details(reading, field, mine, {field: theirs}, target_value=theirs, candidate=True)))
    return out


#: behaviour flags with no tensor: set, each is a candidate the counterfactual scores off (counterfactual.FLAG_SWAPS)
_FLAGS = ("norm_output", "norm_before_residual")


def _flag_candidates(cfg: Dict[str, Any], reading: Dict[str, Any]) -> List[Dict[str, Any]]:
    nested = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    out = []
    for flag in _FLAGS:
        value = cfg.get(flag, (nested or {}).get(flag))
        if flag not in reading["fields"] or not value:
            continue
        out.append(_f("field." + flag, "warning", "%s is true, so %s %s (%s); no tensor says whether the draft was "
                      "trained so (an EAGLE-3.1 config on an EAGLE-3 draft: NeMo Automodel PR 2897). A candidate: the "
                      "counterfactual draft test scores it off." % (flag, _label(reading),
                                                                    reading["fields"][flag].get("does"),
                                                                    _where(reading, flag)),
                      **_details(reading, flag, value, {flag: False}, candidate=True)))
    return out


def _prefix(renames: Dict[str, str]) -> Optional[str]:
    """The one prefix every rename strips (``_orig_mod.``), or None."""
    cut = {old[:len(old) - len(new)] for old, new in renames.items() if old.endswith(new)}
    return cut.pop() if len(cut) == 1 and len(renames) > 1 else None


def _placement(tensors: Dict[str, Any], reading: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Saved tensor names the installed engine's loader cannot place (tensor_placement.py): SGLang drops them, so the
    parameters they were for keep their initial values; vLLM refuses the draft at start."""
    loader = reading.get("loader")
    placement = place(list(tensors), loader) if loader else None
    if placement is None or not (placement["dropped"] or placement["refused"]):
        return []
    rule = placement["rules"].get("unplaced") or {}
    where = "%s:%s" % (rule.get("file"), rule.get("line")) if rule else "(not located)"
    unplaced = placement["dropped"] + sorted(placement["refused"])
    renames = placement["renames"]
    cut = _prefix(renames)
    fix_text = ("Saving them without the prefix %r places them" % cut if cut else
                "Renaming %s places them" % ", ".join("%s -> %s" % kv for kv in sorted(renames.items())[:3])
                if renames else "No shorter name of theirs lands on a parameter: re-export the draft from training")
    some = ", ".join(unplaced[:2]) + (" and %d more" % (len(unplaced) - 2) if len(unplaced) > 2 else "")
    if placement["refused"]:
        name, says = sorted(placement["refused"].items())[0]
        message = ("%s refuses the draft at start: its loader places no parameter under %d saved tensor name%s (%s): "
                   "%s (%s `%s`). %s (vLLM loads layers.0.* or midlayer.* with no prefix)." % (
                       _label(reading), len(unplaced), "s" if len(unplaced) > 1 else "", some,
                       says if says.startswith("KeyError") else "There is no module or parameter named " + says,
                       where, rule.get("text"), fix_text))
    else:
        left = placement["left_at_init"]
        message = ("%s loads the draft by name and drops %d saved tensor%s it cannot place (%s) without a word (%s "
                   "`%s`), so %s keep%s %s initial value%s: the draft served is not the draft trained. %s." % (
                       _label(reading), len(unplaced), "s" if len(unplaced) > 1 else "", some, where,
                       rule.get("text"), ", ".join(left[:3]) + (" and %d more" % (len(left) - 3) if len(left) > 3
                                                                else "") if left else "the parameters they were for",
                       "" if len(left) > 1 else "s", "their" if len(left) > 1 else "its", "s" if len(left) > 1 else "",
                       fix_text))
    return [_f("tensor.names", "error", message, field="tensor names", value=unplaced[:8], unplaced=len(unplaced),
               engine=reading.get("engine"), engine_version=reading.get("version"), file=rule.get("file"),
               line=rule.get("line"), code=rule.get("text"), fix=None, rename=dict(renames), prefix=cut,
               left_at_init=placement["left_at_init"], refused=bool(placement["refused"]), parts=["tensors"])]


def _unread(cfg: Dict[str, Any], reading: Dict[str, Any]) -> List[Dict[str, Any]]:
    unread = sorted(k for k in cfg if k not in reading["fields"] and k not in _META and not k.startswith("_"))
    if not unread:
        return []
    return [_f("field.unread", "info", "%s's EAGLE-3 class never reads %s: a difference there changes nothing it "
               "serves." % (_label(reading), ", ".join(unread)), engine=reading.get("engine"),
               engine_version=reading.get("version"), fields=unread)]


def field_findings(config: Dict[str, Any], tensors: Dict[str, Any], target: Optional[Dict[str, Any]],
                   reading: Dict[str, Any], values: Optional[List[Dict[str, Any]]] = None) -> List[Dict[str, Any]]:
    """One finding (``SUMMARY_ID``: the worst severity, the fixes of the errors merged, the per-field findings).
    ``config``: the draft's flat config; ``tensors``: name -> {"shape", "dtype"}; ``target``: the target's flat config
    (None: not compared); ``reading``: field_table.engine_reading of the installed engine (with ``loader``:
    tensor_placement.loader_reading); ``values``: checks/tensor_values.scan of the weights, ridden along (a tensor
    the engine loads as saved but whose values no engine can serve)."""
    loader = reading.get("loader")
    names = {_canon(k): v for k, v in as_trained(tensors, place(list(tensors), loader) if loader else None).items()}
    if not reading.get("fields"):
        why = "; ".join(reading.get("missing") or []) or "no engine source read"
        # not a finding about the draft (as with no engine to scan for the architecture): said, decides nothing
        bad = [f for f in values or [] if f["severity"] == "error"]
        return [_f(SUMMARY_ID, "error" if bad else "info", "The draft's config was not read field by field: %s was "
                   "not found (%s).%s" % (reading.get("engine"), why, "".join(" " + f["message"] for f in bad)),
                   fields=[f["details"]["field"] for f in bad], fixes={}, renames={}, parts=[],
                   engine=reading.get("engine"), findings=list(values or []))]
    limits = limit_findings(config, target, reading["limits"], _label(reading)) if reading.get("limits") else []
    found = (_placement(tensors, reading) + limits + _tied(config, names, reading) + _layers(config, names, reading)
             + _head_rows(config, names, target, reading)
             + _shapes(config, names, reading) + _flags(config, names, reading)
             + _biases(config, names, reading)
             + _numeric(config, target, reading, frozenset(f["details"]["field"] for f in limits))
             + _flag_candidates(config, reading) + list(values or []))
    errors = [f for f in found if f["severity"] == "error"]
    candidates = [f for f in found if f["severity"] == "warning"]
    fixes: Dict[str, Any] = {}
    renames: Dict[str, str] = {}
    for f in errors:
        fixes.update(f["details"].get("fix") or {})
        renames.update(f["details"].get("rename") or {})
    worst = "error" if errors else "warning" if candidates else "info"
    label = _label(reading)
    read = len(reading["fields"])
    if errors:
        clauses = []
        against = [f for f in errors if not f["details"].get("limit")]
        beyond = [f for f in errors if f["details"].get("limit")]
        if against:
            plural = len(against) > 1 or str(against[0]["details"]["field"]).endswith("names")
            clauses.append("%s contradict%s the checkpoint" % (", ".join(f["details"]["field"] for f in against),
                                                               "" if plural else "s"))
        if beyond:
            clauses.append("%s %s a value the engine refuses or serves wrong" % (
                ", ".join(f["details"]["field"] for f in beyond), "holds" if len(beyond) == 1 else "hold"))
        message = "%s reads %d fields of the draft's config; %s. %s" % (
            label, read, "; ".join(clauses), " ".join(f["message"] for f in errors))
    elif candidates:
        message = "%s reads %d fields of the draft's config; none contradicts the checkpoint. Candidates to score: %s" % (
            label, read, " ".join(f["message"] for f in candidates))
    else:
        message = "%s reads %d fields of the draft's config; none contradicts the checkpoint or the target." % (
            label, read)
    unknown = reading.get("unknown") or []
    if unknown:
        message += " Fields %s reads that no table here describes (not checked): %s." % (label, ", ".join(unknown))
    # one finding: the per-field ones ride in its details (the console, the report and the weighing say it once)
    return [_f(SUMMARY_ID, worst, message, engine=reading.get("engine"), engine_version=reading.get("version"),
               fields=[f["details"].get("field") for f in errors + candidates], fixes=fixes, renames=renames,
               parts=sorted({p for f in errors for p in f["details"].get("parts") or []}),
               read=read, unknown=unknown, findings=found + _unread(config, reading))]
