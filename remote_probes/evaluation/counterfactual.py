"""Counterfactual served parts: score the draft with each part the engine serves swapped for the other source.

The draft test scores a draft with the parts the engine SERVES (eagle3_served.served_parts). When that draft is
weak on every wiring, or the server measures other than the test predicts, one of those parts may be the cause: an
embedding the engine keeps from the draft where the target's was trained on (or the reverse), a head, a final
norm the checkpoint lacks, a d2t map read the wrong way, RoPE settings or an attention layout the draft's config
states differently from the target it was trained on. Each counterfactual below changes ONE part and is scored on
the same prompts and the same served wiring; a part whose swap recovers acceptance on intervals (the swapped
figure's lower bound above the served figure's upper bound, and the paired gain's lower bound above 1 + margin,
the wiring test's own rule) is named, with the installed engine's file:line that decides which one it serves
(``locate_refs``: read in the engine's source on the host, never assumed).

Parts and their counterfactuals (``variants``):

- ``embedding``: served from the target -> the draft's own (when the checkpoint ships one); served from the draft
  (or random) -> the target's.
- ``head``: served the draft's lm_head -> the target's lm_head at the draft's vocabulary (rows ``arange + d2t``);
  served random or the target's first rows -> the draft's own when it ships one, else the target's at its
  vocabulary.
- ``norm``: the final norm the engine builds (the checkpoint's ``norm.weight``; ones, as both engines leave an
  RMSNorm the checkpoint does not fill) -> the target's final norm.
- ``d2t``: applied as offsets -> read as target ids (``d2t - arange``); not applied -> applied, when present.
- ``rope``: the draft config's rope_theta / rope_scaling -> the target config's (only where they differ).
- ``attention``: the draft config's head count / head_dim -> the target's (only where they differ and the
  checkpoint's projections still fit).
- ``field.<name>``: a numeric field the engine's draft layer takes from the DRAFT's config (``FIELD_SWAPS``:
  rms_norm_eps, hidden_act) -> the target config's value, where they differ (draft_reading/field_findings.py names
  these as candidates; the line is the one draft_reading/field_table.py reads in the installed engine); a behaviour
  flag the config sets (``FLAG_SWAPS``: norm_output, norm_before_residual) -> off.
- ``flags``: served without the variant flags the engine never reads -> with them, as the config says the draft was
  trained (served_parts ``flags_read``).
- ``tensors``: the parameters the engine's loader fills from no saved name (SGLang drops a name it cannot place:
  draft_reading/tensor_placement.py) at their initial values -> the saved tensors under the names it places.

Context length is not swapped offline: both engines size the draft's positions by the serving context, not by the
draft's max_position_embeddings; a draft trained short shows as acceptance falling with prompt length (the
acceptance profile), which this test cannot mend by a part.

Public API: ``variants(config, state, served_parts, target_config, target_norm, target_head) -> list``,
``judge(served, swapped, margin) -> dict``, ``locate_refs(engine, extra) -> dict``, ``REF_PATTERNS``.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional, Tuple

from remote_probes.evaluation.interval_stats import paired_ratio_interval

#: where the installed engine decides which part it serves: (file under the package, regex, what it decides).
#: Located on the host (locate_refs); the regex is the decisive statement, so the line follows the installed version.
REF_PATTERNS: Dict[str, Dict[str, List[Tuple[str, str, str]]]] = {
    "sglang": {
        "embedding": [("srt/models/llama.py", r"def set_embed\(", "set_embed puts the target's embedding into the "
                       "draft (skipped when target_hidden_size differs)"),
                      ("srt/speculative/eagle_worker.py", r"set_embed\(", "the EAGLE3 worker calls it"),
                      ("srt/speculative/eagle_worker_v2.py", r"set_embed\(", "the EAGLE3 worker calls it")],
        "head": [("srt/models/llama_eagle3.py", r"load_lm_head_from_target = ", "the draft's own lm_head unless it has "
                  "no draft_vocab_size")],
        "norm": [("srt/models/llama_eagle3.py", r"self\.norm = RMSNorm\(", "the final norm is the draft's own RMSNorm"),
                 ("srt/models/llama_eagle3.py", r"def load_weights", "load_weights fills only what the checkpoint "
                  "has: a missing norm.weight stays at its init (ones)")],
        "d2t": [("srt/models/llama_eagle3.py", r"hot_token_id = loaded_weight \+ torch\.arange",
                 "d2t is read as offsets: hot_token_id = d2t + arange")],
        "rope": [("srt/models/llama.py", r"rope_theta = (getattr\(config, \"rope_theta\"|rope_parameters\.get)",
                  "the draft's decoder layer takes rope_theta / rope_scaling from the DRAFT's config"),
                 ("srt/models/llama_eagle3.py", r"rope_scaling = ", "llama_eagle3 passes the draft config's scaling")],
        "attention": [("srt/models/llama.py", r"num_heads=config\.num_attention_heads",
                       "the draft's attention layout comes from the draft's config")],
        "tensors": [("srt/models/llama_eagle3.py", r"if param_name in params_dict:",
                     "load_weights loads a name only where that parameter exists: any other is dropped without a "
                     "word and the parameter keeps its initial value")],
    },
    "vllm": {
        "embedding": [("v1/spec_decode/llm_base_proposer.py", r"def _maybe_share_embeddings",
                       "shares the target's embedding only when the checkpoint has none or an identical one"),
                      ("v1/spec_decode/llm_base_proposer.py", r"Keeping separate embedding weights",
                       "a distinct embed_tokens in the checkpoint is kept"),
                      ("v1/spec_decode/eagle.py", r"share embed_tokens with the target model", "0.11: the share")],
        "head": [("v1/spec_decode/llm_base_proposer.py", r"def _maybe_share_lm_head",
                  "shares the target's lm_head only when the draft has none"),
                 ("v1/spec_decode/eagle.py", r"share lm_head with the target model", "0.11: the share")],
        "norm": [("model_executor/models/llama_eagle3.py", r"self\.norm = RMSNorm\(",
                  "the final norm is the draft's own RMSNorm"),
                 ("model_executor/models/llama_eagle3.py", r"loader\.load_weights\(",
                  "Eagle3LlamaForCausalLM.load_weights returns no loaded set, so the loader's missing-weight check "
                  "never runs: a missing norm.weight stays ones")],
        "d2t": [("model_executor/models/llama_eagle3.py", r"base \+ self\.draft_id_to_target_id",
                 "d2t is applied as offsets: target id = arange + d2t")],
        "rope": [("model_executor/models/llama.py", r"rope_parameters=getattr\(config, \"rope_parameters\"",
                  "the draft's decoder layer takes its RoPE from the DRAFT's config"),
                 ("model_executor/models/llama.py", r"rope_theta = getattr\(config, \"rope_theta\"",
                  "the draft's decoder layer takes rope_theta from the DRAFT's config")],
        "attention": [("model_executor/models/llama.py", r"num_heads=config\.num_attention_heads",
                       "the draft's attention layout comes from the draft's config")],
        "tensors": [("model_executor/models/utils.py", r"There is no module or parameter named",
                     "AutoWeightsLoader refuses a name that reaches no module or parameter")],
    },
}


#: numeric config fields scored with the target's value (remote_probes/draft_reading/field_findings.py candidates)
FIELD_SWAPS = ("rms_norm_eps", "hidden_act")
#: behaviour flags with no tensor of their own: a draft trained without one the config sets (an EAGLE-3.1 config on
#: an EAGLE-3 draft, NeMo Automodel PR 2897) is scored with it off
FLAG_SWAPS = ("norm_output", "norm_before_residual")


def _field_refs(engine: str, root: str) -> Dict[str, List[Dict[str, Any]]]:
    from remote_probes.draft_reading.field_table import engine_reading

    reading = engine_reading(root, engine)
    return {"field." + name: [{"file": f["file"], "line": f["line"], "text": f["text"],
                               "decides": "the draft's layer %s, from the DRAFT's config" % f["does"]}]
            for name, f in reading["fields"].items() if name in FIELD_SWAPS + FLAG_SWAPS}


def locate_refs(engine: str, extra: Optional[List[str]] = None) -> Dict[str, Any]:
    """``{"version", "root", "parts": {part: [{"file", "line", "text", "decides"}]}, "missing": [...]}``: each
    REF_PATTERNS entry found in the installed engine (first match per file); a package that cannot be found gives
    ``root`` None and every part in ``missing`` (said, never invented)."""
    from remote_probes.agent.protocol import ProbeFailure
    from remote_probes.engine.sglang_source import locate_package

    out: Dict[str, Any] = {"engine": engine, "version": None, "root": None, "parts": {}, "missing": []}
    try:
        where = locate_package(engine, extra)
    except ProbeFailure as exc:
        out["missing"] = sorted(REF_PATTERNS.get(engine, {}))
        out["error"] = str(exc)
        return out
    out.update(version=where.get("version"), root=where["root"])
    for part, entries in REF_PATTERNS.get(engine, {}).items():
        found = []
        for rel, pattern, decides in entries:
            path = os.path.join(where["root"], rel)
            try:
                with open(path, encoding="utf-8") as handle:
                    lines = handle.read().splitlines()
            except OSError:
                continue
            rx = re.compile(pattern)
            hit = next((i for i, line in enumerate(lines) if rx.search(line)), None)
            if hit is not None:
                found.append({"file": rel, "line": hit + 1, "text": lines[hit].strip()[:160], "decides": decides})
        if found:
            out["parts"][part] = found
        else:
            out["missing"].append(part)
    if engine in ("sglang", "vllm"):
        out["parts"].update(_field_refs(engine, where["root"]))
    return out


def _rope(config: Dict[str, Any]) -> Tuple[Optional[float], Optional[Dict[str, Any]]]:
    from remote_probes.eagle3.config import rope_config

    theta, scaling, _ = rope_config(config)
    if isinstance(scaling, dict) and scaling.get("rope_type", scaling.get("type", "default")) == "default":
        scaling = None
    return theta, scaling


def _attention(config: Dict[str, Any]) -> Tuple[Any, Any, Any]:
    heads = config.get("num_attention_heads")
    kv = config.get("num_key_value_heads") or heads
    hidden = config.get("hidden_size")
    head_dim = config.get("head_dim") or (hidden // heads if isinstance(hidden, int) and isinstance(heads, int)
                                           and heads else None)
    return heads, kv, head_dim


def _with_rope(config: Dict[str, Any], theta: Optional[float], scaling: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    # the config is flat (eagle3_config.flat_config): its nested decoder dicts would bring their RoPE keys back
    out = {k: v for k, v in config.items() if k not in ("rope_parameters", "rope_scaling", "rope_theta",
                                                         "transformer_layer_config", "text_config")}
    out["rope_theta"] = 10000.0 if theta is None else theta
    if scaling:
        out["rope_scaling"] = dict(scaling)
    return out


def variants(config: Dict[str, Any], state: Dict[str, Any], parts: Dict[str, Any], target_config: Dict[str, Any],
             target_norm: Any, target_head: Any) -> List[Dict[str, Any]]:
    """The counterfactual drafts: ``[{"part", "served", "swapped", "config", "state", "parts", "lm_head"}]``, one
    part changed each (see the module doc). ``config`` is the flat draft config, ``state`` its canonical tensors,
    ``parts`` served_parts(...) of it, ``target_config`` the target's text config as a dict, ``target_norm`` the
    target's final norm weight, ``target_head`` its lm_head weight. Tensors are shared, never modified."""
    import torch

    served = parts["served"]
    out: List[Dict[str, Any]] = []

    def add(part: str, was: str, now: str, *, cfg: Optional[Dict[str, Any]] = None,
            st: Optional[Dict[str, Any]] = None, choice: Optional[Dict[str, Any]] = None, head: Any = None) -> None:
        out.append({"part": part, "served": was, "swapped": now, "config": cfg or config, "state": st or state,
                    "parts": dict(served, **(choice or {})), "lm_head": head})

    own_embed = "embed_tokens.weight" in state
    if served["embedding"] == "target" and own_embed:
        add("embedding", "the target's embedding", "the draft's own embed_tokens", choice={"embedding": "draft"})
    elif served["embedding"] != "target":
        add("embedding", "the draft's own embed_tokens" if served["embedding"] == "draft" else "a random embedding",
            "the target's embedding", choice={"embedding": "target"})
    vd = config.get("draft_vocab_size") or config.get("vocab_size")
    d2t = state.get("d2t")
    hot = None
    if target_head is not None and isinstance(vd, int):
        hot = torch.arange(vd) + (d2t.long() if d2t is not None and served["d2t"] and d2t.shape[0] == vd else 0)
        hot = hot if int(hot.max()) < target_head.shape[0] and int(hot.min()) >= 0 else None
    if served["head"] == "draft_head" and hot is not None:
        add("head", "the draft's own lm_head", "the target's lm_head at the draft's vocabulary",
            choice={"head": "target_head"}, head=target_head[hot])
    elif served["head"] != "draft_head":
        if "lm_head.weight" in state:
            add("head", served["head"].replace("_", " "), "the draft's own lm_head", choice={"head": "draft_head"})
        elif hot is not None and (served["head"] == "random" or served.get("head_rows")):
            add("head", served["head"].replace("_", " "), "the target's lm_head at the draft's vocabulary",
                choice={"head": "target_head"}, head=target_head[hot])
    if target_norm is not None and tuple(target_norm.shape) == (config.get("hidden_size"),):
        was = "the checkpoint's norm.weight" if "norm.weight" in state else "ones (the checkpoint has no norm.weight)"
        add("norm", was, "the target's final norm", st=dict(state, **{"norm.weight": target_norm}))
    if served["d2t"] and d2t is not None:
        direct = d2t.long() - torch.arange(d2t.shape[0])
        add("d2t", "d2t applied as offsets", "d2t read as target ids", st=dict(state, d2t=direct))
    elif d2t is not None and not served["d2t"]:
        add("d2t", "d2t not applied", "d2t applied as offsets", choice={"d2t": True})
    theta, scaling = _rope(config)
    t_theta, t_scaling = _rope(target_config)
    if (theta or 10000.0) != (t_theta or 10000.0) or (scaling or None) != (t_scaling or None):
        add("rope", "rope_theta %s%s (the draft's config)" % (theta, ", scaling %s" % scaling if scaling else ""),
            "rope_theta %s%s (the target's config)" % (t_theta, ", scaling %s" % t_scaling if t_scaling else ""),
            cfg=_with_rope(config, t_theta, t_scaling))
    mine, theirs = _attention(config), _attention(target_config)
    if None not in theirs and mine != theirs and theirs[0] * theirs[2] == (mine[0] or 0) * (mine[2] or 0) \
            and theirs[1] * theirs[2] == (mine[1] or 0) * (mine[2] or 0):
        add("attention", "%s heads (%s kv) of %s (the draft's config)" % mine,
            "%s heads (%s kv) of %s (the target's config)" % theirs,
            cfg=dict(config, num_attention_heads=theirs[0], num_key_value_heads=theirs[1], head_dim=theirs[2]))
    from remote_probes.eagle3.draft import ACTIVATIONS

    for name in FIELD_SWAPS:
        value, target_value = config.get(name), target_config.get(name)
        if value is None or target_value is None or value == target_value:
            continue
        if name == "hidden_act" and target_value not in ACTIVATIONS:
            continue  # not a swap the draft test can build: said by its absence, the field finding names it
        add("field." + name, "%s %r (the draft's config)" % (name, value),
            "%s %r (the target's config)" % (name, target_value), cfg=dict(config, **{name: target_value}))
    trained_flags = parts["trained"].get("flags") or []
    if served.get("flags") is not None and served.get("flags") != trained_flags:
        ignored = sorted(set(trained_flags) - set(served["flags"]))
        add("flags", "without %s (the engine never reads it)" % ", ".join(ignored),
            "with %s (as the config says the draft was trained)" % ", ".join(ignored),
            choice={"flags": list(trained_flags)})
    if served.get("tensors"):
        from remote_probes.eagle3.names import apply_renames

        n = len(served["tensors"])
        add("tensors", "%d parameter%s at %s initial value%s (the loader places no saved name there)"
            % (n, "s" if n > 1 else "", "their" if n > 1 else "its", "s" if n > 1 else ""),
            "the saved tensors under the names the loader places",
            st=apply_renames(state, (parts.get("renames") or {}).get("trained") or {}),
            choice=dict(parts.get("if_placed") or {}, tensors=[]))
    from remote_probes.eagle3.config import variant_flags, with_flag_off

    flags = variant_flags(config)
    for name in FLAG_SWAPS:
        if flags.get(name):
            add("field." + name, "%s true (the draft's config)" % name, "%s false" % name,
                cfg=with_flag_off(config, name))
    return out


def judge(served: Dict[str, Any], swapped: Dict[str, Any], margin: float, confidence: float) -> Dict[str, Any]:
    """Swapped vs served on the same prompts: ``{"vs_served": {"ratio", "ratio_ci"} | None, "recovers": bool}``.
    Both figures carry ``tau_serving_ci`` and ``_units`` (tokens, cycles per prompt), as draft_test.score_wiring
    returns them. Recovers = the wiring test's mismatch rule: marginal intervals apart and the paired gain's lower
    bound above 1 + margin."""
    iv = paired_ratio_interval(swapped["_units"][0], swapped["_units"][1], served["_units"][0], served["_units"][1],
                               confidence)
    vs: Optional[Dict[str, Any]] = None if iv is None else {"ratio": round(iv.estimate, 4), "ratio_ci": iv.as_list()}
    ci, sci = swapped.get("tau_serving_ci"), served.get("tau_serving_ci")
    gain = (vs or {}).get("ratio_ci")
    recovers = bool(ci and sci and gain and ci[0] > sci[1] and gain[0] > 1.0 + margin)
    hurts = bool(ci and sci and gain and ci[1] < sci[0] and gain[1] < 1.0)
    return {"vs_served": vs, "recovers": recovers, "hurts": hurts}


def verdict(engine: str, wiring: List[int], served: Dict[str, Any], rows: List[Dict[str, Any]]) -> str:
    """One sentence: the part(s) whose swap recovers, with the engine code that decides it; or that none does."""
    name = "SGLang" if engine == "sglang" else "vLLM"
    base = "served tau %.2f %s on %s" % (served.get("tau_serving") or 0, _ci(served.get("tau_serving_ci")), wiring)
    good = [r for r in rows if r["recovers"]]
    if not rows:
        return "%s; no part the engine serves can be swapped here (nothing differs from the target's)" % base
    if not good:
        return ("%s; no swapped part recovers acceptance (%s): the served parts are not the cause"
                % (base, ", ".join("%s %.2fx" % (r["part"], (r["vs_served"] or {}).get("ratio") or 0) for r in rows)))
    parts = []
    for r in good:
        refs = r.get("refs") or []
        where = ", ".join("%s:%d" % (x["file"], x["line"]) for x in refs[:2]) or "not located in the installed %s" % name
        parts.append("%s: %s -> %s recovers tau %.2f %s (%.2fx, CI %s; %s decides at %s)" % (
            r["part"], r["served"], r["swapped"], r["tau_serving"] or 0, _ci(r.get("tau_serving_ci")),
            r["vs_served"]["ratio"], _ci(r["vs_served"]["ratio_ci"]), name, where))
    return "%s; %s" % (base, "; ".join(parts))


def _ci(ci: Optional[List[float]]) -> str:
    return "[%.2f, %.2f]" % (ci[0], ci[1]) if ci else "[n/a]"
