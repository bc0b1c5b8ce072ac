"""Probe: derive, from the investigation's evidence, the fix a real SGLang host can serve — or say why none can.
With ``engine: vllm`` the fix is derived for ``vllm serve`` by draft_fix_vllm.py instead.

Standard library only, Python >= 3.9; sglang is never imported (its capture rule is read from its source,
sglang_capture.py). Run on the host that serves, because a corrected draft is written there.

Args: ``{"draft": dir, "target": dir, "candidate_flags": {flag: value}, "engine": "sglang" | "vllm",
"engine_sys_path"?: [dirs holding the engine's package], "effective"?: {flag: value the server resolved},
"overrides"?: [{"flag", "requested", "effective"}], "findings"?: [draft_inspect findings],
"wiring"?: {"decision", "best", "served"} (the draft test's decision, best and served HF wirings),
"parts"?: [the counterfactual draft test's recovering swaps: {"part", "served", "swapped", "refs"}],
"out_dir"?: where to write the corrected draft (default: beside the draft)}``.

What it derives (each with its reason; research/sglang-eagle3-facts.md):
- ``--speculative-algorithm EAGLE`` with an EAGLE-3 draft -> EAGLE3 (the EAGLE branch skips fc and swaps the head);
- num_draft_tokens capped at steps + 1 by topk == 1 -> ``--speculative-num-steps`` = the requested tokens - 1, so
  the chain really drafts what was asked for — only once the draft test cleared the draft (decision ``fine``):
  before that the cap is the seed's red herring, and the result only notes it;
- a wiring mismatch -> the trained wiring expressed as nested ``eagle_config`` ids (SGLang adds 1), written with
  the rest of the draft (symlinked, never copied or modified) into a corrected directory BESIDE the draft, and
  ``--speculative-draft-model-path`` pointed at it — when this SGLang can capture every state of that wiring;
- a base architecture named for an EAGLE-3 checkpoint -> ``LlamaForCausalLMEagle3`` in the corrected config;
- a served part the counterfactual draft test named (draft_fix_parts.py): the target's RoPE or attention layout in
  the corrected config; on vLLM a distinct embed_tokens dropped from a filtered copy of the weights;
- a draft-config field the installed engine reads against what the checkpoint holds (draft_inspect's
  ``draft_fields`` error, remote_probes/draft_reading/): the field's value in the corrected config (fixes/fields.py);
  the served parts that field explains are not blamed on the checkpoint again;
- a d2t that holds target ids instead of offsets -> the offsets d2t[i] - i in a rewritten copy of the weights
  (draft_fix_d2t.py: both engines add arange, so the ids determine the offsets);
- a weight holding a few NaN or Inf values -> a copy with those values set to 0 (fixes/nonfinite.py): served, it
  shows whether they are the fault; the remedy for the trained values stays a re-export.

What config cannot fix becomes a blocker with the remedies that remain (retrain on a servable wiring, another
SGLang version, an engine change, a re-export of the weights).

Result: ``{"fix_status": "fix" | "partial" | "blocked" | "nothing_to_fix", "flags", "draft", "changes":
[{what, from, to, why}], "blockers": [{what, why, remedies}], "notes": [what was seen and left alone], "capture", "engine": {version, root}, "summary"}``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional

from remote_probes.agent.protocol import ProbeFailure, run_probe
from remote_probes.eagle3.config import flat_config
from remote_probes.eagle3.wiring import default_wiring, nested_ids, top_level_ids
from remote_probes.engine.registry import installed_version
from remote_probes.engine.sglang_capture import capture_rules, find_sglang_root, servable_ids
from remote_probes.engine.target_capture import target_loop
from remote_probes.fixes.d2t import d2t_as_offsets, d2t_from_disagreeing_t2d, d2t_from_t2d
from remote_probes.fixes.fields import field_fixes, field_renames
from remote_probes.fixes.nonfinite import mend_nonfinite
from remote_probes.fixes.parts import part_fixes, tensor_names, write_added, write_without
from remote_probes.fixes.vllm import derive_vllm

MARKER = "ORCHESTRATOR_FIX.json"  # written in every corrected draft: what was changed, from which draft
EAGLE3_LOADER = "LlamaForCausalLMEagle3"
BASE_LLAMA = ("LlamaForCausalLM", "LlamaModel")


def _key(name: str) -> str:
    return str(name).lstrip("-").replace("-", "_").lower()


def _read_json(path: str, what: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as exc:
        raise ProbeFailure("not_found", "cannot read the %s %s: %s" % (what, path, exc.strerror or exc), path=path) from None
    except ValueError as exc:
        raise ProbeFailure("bad_config", "the %s %s is not JSON: %s" % (what, path, exc), path=path) from None
    if not isinstance(doc, dict):
        raise ProbeFailure("bad_config", "the %s %s is not a JSON object" % (what, path), path=path)
    return doc


class Flags:
    """The candidate flags as written (dashes or underscores, aliases), changed by canonical name."""

    ALIASES = {"speculative_draft_model": "speculative_draft_model_path"}

    def __init__(self, flags: Dict[str, Any]) -> None:
        self.flags = dict(flags)

    def _name(self, key: str) -> Optional[str]:
        for name in self.flags:
            k = _key(name)
            if self.ALIASES.get(k, k) == key:
                return name
        return None

    def get(self, key: str) -> Any:
        name = self._name(key)
        return None if name is None else self.flags[name]

    def set(self, key: str, value: Any) -> None:
        self.flags[self._name(key) or key.replace("_", "-")] = value


def _is_eagle3_draft(config: Dict[str, Any], findings: List[Dict[str, Any]]) -> bool:
    archs = config.get("architectures") or []
    if any(isinstance(a, str) and "eagle3" in a.lower() for a in archs):
        return True
    if isinstance(config.get("eagle_config"), dict) or "speculators_config" in config:
        return True
    return any(f.get("id") == "fc_width" for f in findings)


def derive(args: Dict[str, Any]) -> Dict[str, Any]:
    draft = os.path.abspath(os.path.expanduser(str(args["draft"])))
    target = os.path.abspath(os.path.expanduser(str(args["target"])))
    raw = _read_json(os.path.join(draft, "config.json"), "draft config")
    tcfg = flat_config(_read_json(os.path.join(target, "config.json"), "target config"))
    n_layers = tcfg.get("num_hidden_layers")
    if not isinstance(n_layers, int) or n_layers < 1:
        raise ProbeFailure("bad_config", "the target config has no num_hidden_layers", path=target)
    findings = [f for f in args.get("findings") or [] if isinstance(f, dict)]
    swaps = [p for p in args.get("parts") or [] if isinstance(p, dict) and p.get("part")]
    if args.get("engine") == "vllm":
        part = derive_vllm(args, raw, n_layers, findings, _is_eagle3_draft(raw, findings))
        changed, swaps = field_fixes(findings, part["config"], swaps, part["changes"], part["notes"], part["name"])
        part["rename"] = field_renames(findings, part["changes"], part["name"])
        part["config_changed"] = part["config_changed"] or changed or bool(part["rename"])
        fixed = part_fixes(swaps, part["config"], tcfg, "vllm", part["name"])
        part.update(config=fixed["config"], config_changed=part["config_changed"] or fixed["config_changed"]
                    or bool(fixed["drop"]), drop=fixed["drop"])
        part["changes"] += fixed["changes"]
        part["blockers"] += fixed["blockers"]
        part["replace"] = _mend_d2t(draft, findings, tcfg.get("vocab_size"), part["changes"], part["blockers"],
                                    "%s's compute_logits" % part["name"], raw.get("draft_vocab_size"))
        part["replace"] = {**(part["replace"] or {}),
                           **mend_nonfinite(draft, findings, part["changes"], part["blockers"])} or None
        part["config_changed"] = part["config_changed"] or bool(part["replace"])
        return _finish_vllm(args, draft, part)
    root = find_sglang_root(args.get("engine_sys_path"))
    rules = capture_rules(root, target_loop(target, "sglang", root)) if root else {"embedding": None, "final_norm": False, "evidence": [],
                                              "why": "no sglang package found for this python, so its capture "
                                                     "rule cannot be read"}
    version = installed_version(root) if root else None
    severity = {str(f.get("id")): f.get("severity") for f in findings}
    message = {str(f.get("id")): f.get("message") for f in findings}
    flags = Flags(args.get("candidate_flags") or {})
    effective = {_key(k): v for k, v in (args.get("effective") or {}).items()}
    changes: List[Dict[str, Any]] = []
    blockers: List[Dict[str, Any]] = []
    notes: List[str] = []
    config = json.loads(json.dumps(raw))  # the corrected config starts as a deep copy
    config_changed = False
    sglang = "SGLang %s" % (version or "(version unknown)")

    # --- the algorithm
    algo = str(effective.get("speculative_algorithm") or flags.get("speculative_algorithm") or "").upper()
    if algo in ("EAGLE", "NEXTN") and _is_eagle3_draft(raw, findings):
        changes.append({"what": "speculative-algorithm", "from": flags.get("speculative_algorithm") or algo,
                        "to": "EAGLE3", "why": "an EAGLE-3 draft served as EAGLE: the EAGLE branch feeds one hidden "
                        "state (fc skipped, width == hidden_size) and swaps in the target's head"})
        flags.set("speculative_algorithm", "EAGLE3")

    # --- flags the server overrode: the topk == 1 cap on draft tokens
    for o in args.get("overrides") or []:
        if not isinstance(o, dict) or _key(str(o.get("flag", ""))) != "speculative_num_draft_tokens":
            continue
        topk = effective.get("speculative_eagle_topk", flags.get("speculative_eagle_topk"))
        try:
            want, topk_n = int(float(str(o.get("requested")))), int(float(str(topk if topk is not None else 1)))
        except (TypeError, ValueError):
            continue
        if topk_n == 1 and want >= 2:
            steps = flags.get("speculative_num_steps")
            decision = (args.get("wiring") or {}).get("decision")
            if decision != "fine":
                # the seed's red herring: the cap is real, but while the draft test does not clear the draft, a
                # longer chain of a mis-wired draft only costs more; the wiring comes first
                notes.append("num_draft_tokens %s was capped to %s by topk 1; num_steps left at %s because the draft "
                             "test %s" % (want, o.get("effective"), steps, "found a wiring mismatch"
                                          if decision == "mismatch" else "did not clear the draft (%s)" % decision))
                continue
            changes.append({"what": "speculative-num-steps", "from": steps, "to": want - 1,
                            "why": "with topk 1 %s drafts a chain of num_steps tokens and resets num_draft_tokens "
                                   "to num_steps + 1 (%s -> %s), so %d draft tokens need num_steps %d"
                                   % (sglang, want, o.get("effective"), want, want - 1)})
            flags.set("speculative_num_steps", want - 1)

    # --- the architecture the loader is chosen by
    archs = raw.get("architectures") if isinstance(raw.get("architectures"), list) else []
    if severity.get("architecture") == "error":
        if archs and archs[0] in BASE_LLAMA and _is_eagle3_draft(raw, findings) and "speculators_config" not in raw:
            config["architectures"] = [EAGLE3_LOADER]
            config_changed = True
            changes.append({"what": "config architectures", "from": archs, "to": [EAGLE3_LOADER],
                            "why": "%s picks the loader by architectures[0]; %s loads the draft as a plain model"
                                   % (sglang, archs[0])})
        else:
            blockers.append({"what": "architecture", "why": message.get("architecture") or "no loader",
                             "remedies": ["convert the checkpoint to SpecForge's layout (LlamaForCausalLMEagle3, "
                                          "midlayer.*, nested eagle_config)", "serve it with an engine that has a "
                                          "loader for %s" % (archs[0] if archs else "it")]})

    # --- weights config cannot mend
    if severity.get("lm_head") == "error":
        blockers.append({"what": "lm_head", "why": message.get("lm_head") or "lm_head missing",
                         "remedies": ["re-export the draft with its trained lm_head.weight"]})
    if severity.get("d2t") == "error":
        blockers.append({"what": "d2t", "why": message.get("d2t") or "d2t is wrong",
                         "remedies": ["re-export d2t as offsets (d2t[i] = target_id(i) - i), as SGLang adds arange"]})

    # --- the wiring
    wiring = args.get("wiring") or {}
    decision, best = wiring.get("decision"), wiring.get("best")
    if decision == "mismatch" and isinstance(best, list) and best:
        ids, why_not = servable_ids([int(i) for i in best], n_layers, rules)
        if ids is not None:
            eagle = dict(config.get("eagle_config") or {})
            before = nested_ids(raw)
            eagle["eagle_aux_hidden_state_layer_ids"] = ids
            eagle["use_aux_hidden_state"] = True
            config["eagle_config"] = eagle
            if top_level_ids(raw) is not None:
                config["eagle_aux_hidden_state_layer_ids"] = list(best)  # vLLM reads them as HF indices
            config_changed = True
            changes.append({"what": "eagle_config.eagle_aux_hidden_state_layer_ids", "from": before, "to": ids,
                            "why": "the draft scores best on hidden_states %s; %s captures at the entry of layer "
                                   "id + 1, so it feeds %s with these ids (it fed %s)"
                                   % (best, sglang, best, wiring.get("served"))})
        else:
            default = default_wiring(n_layers)
            remedies = ["retrain the draft on a wiring %s can capture, e.g. its default %s (hidden_states 1..%d "
                        "are capturable)" % (sglang, default, n_layers - 1)]
            if any("embedding" in b for b in why_not) and rules.get("embedding") is False:
                remedies.append("serve with an SGLang whose layer boundary captures the embedding output "
                                "(0.5.23 does: eagle_config id -1)")
                remedies.append("change the engine: capture the embedding output before layer 0 "
                                "(%s appends hidden_states + residual, and residual is None there)"
                                % (rules.get("loop") or "LlamaModel.forward"))
            blockers.append({"what": "wiring", "why": "the draft was trained on hidden_states %s, which %s cannot "
                             "feed by config: %s" % (best, sglang, "; ".join(why_not)), "remedies": remedies})

    changed, swaps = field_fixes(findings, config, swaps, changes, notes, sglang)
    rename = field_renames(findings, changes, sglang)
    fixed = part_fixes(swaps, config, tcfg, "sglang", sglang)
    config, config_changed = fixed["config"], config_changed or changed or fixed["config_changed"] or bool(rename)
    changes += fixed["changes"]
    blockers += fixed["blockers"]
    replace = _mend_d2t(draft, findings, tcfg.get("vocab_size"), changes, blockers, "%s's hot_token_id" % sglang,
                        raw.get("draft_vocab_size"))
    replace = {**(replace or {}), **mend_nonfinite(draft, findings, changes, blockers)} or None
    config_changed = config_changed or bool(replace)
    written = None
    if config_changed:
        written = _write_corrected(draft, config, changes, args.get("out_dir"), replace=replace, rename=rename)
        old = flags.get("speculative_draft_model_path")
        changes.append({"what": "speculative-draft-model-path", "from": old, "to": written,
                        "why": "the corrected config lives beside the draft (the draft itself is never changed)"})
        flags.set("speculative_draft_model_path", written)

    status = fix_status(changes, blockers)
    return {"fix_status": status, "flags": flags.flags, "draft": written, "changes": changes,
            "blockers": blockers, "notes": notes, "capture": {k: rules.get(k) for k in ("embedding", "final_norm", "why", "evidence")},
            "engine": {"engine": "sglang", "version": version, "root": root},
            "summary": summary(status, changes, blockers, sglang)}


def _finish_vllm(args: Dict[str, Any], draft: str, part: Dict[str, Any]) -> Dict[str, Any]:
    """Write the corrected draft vLLM will load, point --speculative-config's model at it, and say what was done."""
    changes, spec, flags = part["changes"], part["spec"], part["flags"]
    written = None
    if part["config_changed"]:
        written = _write_corrected(draft, part["config"], changes, args.get("out_dir"), drop=part.get("drop") or [],
                                   replace=part.get("replace"), rename=part.get("rename"))
        changes.append({"what": "speculative-config model", "from": spec.get("model"), "to": written,
                        "why": "the corrected config lives beside the draft (the draft itself is never changed)"})
        spec["model"] = written
    if part["flag_name"] is not None and changes:
        flags[part["flag_name"]] = spec
    status = fix_status(changes, part["blockers"])
    return {"fix_status": status, "flags": flags, "draft": written, "changes": changes, "blockers": part["blockers"],
            "notes": part["notes"], "capture": part["capture"], "engine": part["engine"],
            "summary": summary(status, changes, part["blockers"], part["name"])}


def fix_status(changes: List[Dict[str, Any]], blockers: List[Dict[str, Any]]) -> str:
    if changes and blockers:
        return "partial"
    if changes:
        return "fix"
    return "blocked" if blockers else "nothing_to_fix"


def summary(status: str, changes: List[Dict[str, Any]], blockers: List[Dict[str, Any]], sglang: str) -> str:
    did = "; ".join("%s %s -> %s" % (c["what"], c["from"], c["to"]) for c in changes
                    if c["what"] not in ("speculative-draft-model-path", "speculative-config model"))
    cannot = "; ".join("%s: %s (remedies: %s)" % (b["what"], b["why"], " | ".join(b["remedies"])) for b in blockers)
    if status == "fix":
        return "servable fix on %s: %s" % (sglang, did)
    if status == "partial":
        return "partial fix on %s: %s; still not servable by config: %s" % (sglang, did, cannot)
    if status == "blocked":
        return "no fix %s can serve by config or flags: %s" % (sglang, cannot)
    return "nothing in the evidence calls for a config or flag change"


def _mend_d2t(draft: str, findings: List[Dict[str, Any]], vocab: Any, changes: List[Dict[str, Any]],
              blockers: List[Dict[str, Any]], adds: str, draft_vocab_size: Any = None) -> Optional[Dict[str, bytes]]:
    """A d2t that holds target ids (draft_inspect's ``direct_ids``) rewritten as the offsets the engine adds to
    arange, or a d2t lost on export rebuilt from the checkpoint's t2d (fixes/d2t.py): its blocker becomes a change
    and the tensor's new bytes are returned for the corrected copy (a d2t the checkpoint lacks is added in a file of
    its own); any other d2t fault stays a blocker (re-export)."""
    found = next((f for f in findings if f.get("id") == "d2t" and f.get("severity") == "error"), None)
    verdict = (found.get("details") or {}).get("verdict") if found else None
    disagrees = any(f.get("id") == "t2d" and f.get("severity") == "warning" and "disagrees" in str(f.get("message"))
                    for f in findings)
    if verdict not in ("direct_ids", "missing") and (found is not None or disagrees):
        # the two maps disagree (a d2t shifted, permuted or out of the vocabulary beside a t2d that names exactly the
        # draft vocabulary): t2d's map is served in a copy, and the served fix says which one was right
        blob, why = d2t_from_disagreeing_t2d(draft, draft_vocab_size)
        if blob is None:
            return None
        blockers[:] = [b for b in blockers if b.get("what") != "d2t"]
        changes.append({"what": "d2t", "from": "a map that disagrees with t2d" + (" (%s)" % found.get("message")
                                                                                 if found else ""),
                        "to": "offsets nonzero(t2d)[i] - i (a rewritten copy of the weights)",
                        "why": "d2t and t2d must name the same target ids (%s maps draft id i to i + d2t[i]); t2d marks "
                               "exactly draft_vocab_size ids, in order, so its map is served to verify which is "
                               "right" % adds})
        return {"d2t": blob}
    if verdict not in ("direct_ids", "missing"):
        return None
    if verdict == "missing":
        blob, why = d2t_from_t2d(draft, draft_vocab_size)
        frm, to = "absent", "offsets nonzero(t2d)[i] - i (a tensor added beside the weights)"
        because = ("the checkpoint has no d2t, so %s reads draft id i as target id i; its t2d marks the target ids "
                   "the draft vocabulary holds, in order, so d2t is read from it (no training needed)" % adds)
    else:
        blob, why = d2t_as_offsets(draft, vocab if isinstance(vocab, int) else None)
        frm, to = "target ids", "offsets d2t[i] - i (a rewritten copy of the weights)"
        because = ("d2t holds target ids; %s maps draft id i to i + d2t[i], so the offsets are the ids minus i (no "
                   "training needed)" % adds)
    if blob is None:
        for b in blockers:
            if b.get("what") == "d2t":
                b["why"] += "; %s" % why
        if verdict == "missing" and not any(b.get("what") == "d2t" for b in blockers):
            blockers.append({"what": "d2t", "why": "the checkpoint has no d2t and %s" % why,
                             "remedies": ["re-export the draft with its d2t (the training vocabulary's offsets)"]})
        return None
    blockers[:] = [b for b in blockers if b.get("what") != "d2t"]
    changes.append({"what": "d2t", "from": frm, "to": to, "why": because})
    return {"d2t": blob}


def _write_corrected(draft: str, config: Dict[str, Any], changes: List[Dict[str, Any]],
                     out_dir: Optional[str], drop: Optional[List[str]] = None,
                     replace: Optional[Dict[str, bytes]] = None, rename: Optional[Dict[str, str]] = None) -> str:
    """``<draft>.orchestrator-fix/``: the corrected config.json, a marker, the weights files rewritten without the
    ``drop`` tensors and with the ``replace`` ones' new bytes (draft_fix_parts.write_without), and a symlink for
    every other file."""
    dest = os.path.abspath(os.path.expanduser(out_dir)) if out_dir else draft.rstrip(os.sep) + ".orchestrator-fix"
    if os.path.exists(dest) and not os.path.isfile(os.path.join(dest, MARKER)):
        raise ProbeFailure("exists", "%s exists and was not written by orchestrator; refusing to touch it" % dest,
                           path=dest)
    try:
        os.makedirs(dest, exist_ok=True)
        for name in os.listdir(dest):  # a filtered file from an earlier fix is rewritten (or linked) below
            if name.endswith(".safetensors") or name == "model.safetensors.index.json":
                os.unlink(os.path.join(dest, name))
        present = tensor_names(draft) if replace else set()
        added = {k: v for k, v in (replace or {}).items() if k not in present}
        replace = {k: v for k, v in (replace or {}).items() if k in present}
        rewritten = (set(write_without(draft, dest, drop or [], replace, rename)) if drop or replace or rename
                     else set())
        if added:
            rewritten |= set(write_added(draft, dest, added))
        for name in sorted(os.listdir(draft)):
            if name == "config.json" or name in rewritten:
                continue
            link = os.path.join(dest, name)
            if os.path.islink(link):
                os.unlink(link)
            if not os.path.exists(link):
                os.symlink(os.path.join(draft, name), link)
        tmp = os.path.join(dest, "config.json.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(config, fh, indent=2)
        os.replace(tmp, os.path.join(dest, "config.json"))
        with open(os.path.join(dest, MARKER), "w", encoding="utf-8") as fh:
            json.dump({"from": draft, "changes": changes}, fh, indent=2)
    except OSError as exc:
        raise ProbeFailure("write_failed", "cannot write the corrected draft %s: %s" % (dest, exc), path=dest) from None
    return dest


def main(args: Dict[str, Any]) -> Dict[str, Any]:
    for key in ("draft", "target"):
        if not isinstance(args.get(key), str) or not args[key]:
            raise ProbeFailure("bad_args", "'%s' (a checkpoint directory) is required" % key)
    if args.get("engine", "sglang") not in ("sglang", "vllm"):
        raise ProbeFailure("bad_args", "draft_fix knows engines sglang and vllm, not %r" % args.get("engine"))
    return derive(args)


if __name__ == "__main__":
    run_probe(main)
