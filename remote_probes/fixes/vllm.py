"""draft_fix for ``vllm serve``: the fix this host's vLLM can serve, read from its source (vllm_capture.py).

Standard library only; vllm is never imported. What it derives (each with its reason):
- ``--speculative-config`` method ``eagle`` with an EAGLE-3 draft -> ``eagle3`` (the eagle method loads an EAGLE-1
  head: no fc over the concatenated aux states);
- a wiring mismatch -> the trained wiring as TOP-LEVEL ``eagle_aux_hidden_state_layer_ids`` (the ids vLLM 0.33 reads
  first in both runners, as HF indices), written with the rest of the draft (symlinked) into a corrected directory
  BESIDE the draft, and the config's ``model`` pointed at it — when this vLLM reads ids from the draft config and
  captures every state of that wiring; the result is checked by feeding the corrected config through the same
  reading the draft test predicts with (``vllm_wiring``).

What config cannot fix becomes a blocker with the remedies that remain: vLLM 0.11 reads no ids at all (it always
feeds ``(2, N//2, N-3)``), the entry capture of 0.11 cannot feed the embedding output, and no vLLM feeds the
final-normed state (its last boundary is the last layer's PRE-norm output).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from remote_probes.agent.protocol import ProbeFailure
from remote_probes.eagle3.wiring import default_wiring, top_level_ids
from remote_probes.engine.target_capture import target_loop
from remote_probes.engine.vllm_capture import NEWEST, capture_rules, find_vllm_root, vllm_wiring


def _spec_config(flags: Dict[str, Any]) -> "tuple[Optional[str], Dict[str, Any]]":
    """The flag name holding vLLM's --speculative-config and its value as a dict (it may be given as JSON text)."""
    for name, value in flags.items():
        if str(name).lstrip("-").replace("_", "-").lower() != "speculative-config":
            continue
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise ProbeFailure("bad_args", "--speculative-config is not JSON: %s" % exc) from None
        if not isinstance(value, dict):
            raise ProbeFailure("bad_args", "--speculative-config must be a JSON object, got %r" % (value,))
        return str(name), dict(value)
    return None, {}


def servable_top_level_ids(best: List[int], n_layers: int, rules: Dict[str, Any]) -> "tuple[Optional[List[int]], List[str]]":
    """The top-level ids that make this vLLM feed ``best`` (HF indices), or None and why not."""
    why_not: List[str] = []
    if not (rules.get("reads_top_level") or rules.get("reads_nested") or rules.get("reads_layer_ids")):
        why_not.append("vLLM %s reads no layer ids from the draft config: it always feeds %s"
                       % (rules.get("version"), default_wiring(n_layers)))
    for index in best:
        if index == n_layers:
            why_not.append("hidden_states %d is after the final norm; vLLM's last capture point is the last layer's "
                           "pre-norm output" % index)
        elif index == 0 and rules.get("embedding") is False:
            why_not.append("hidden_states 0 (the embedding output): vLLM %s captures at layer entry, where the "
                           "residual is None (TypeError at the first forward)" % rules.get("version"))
        elif not 0 <= index < n_layers:
            why_not.append("hidden_states %d is outside the target's 0..%d" % (index, n_layers))
    if why_not:
        return None, why_not
    ids = sorted(set(best))
    if not rules.get("reads_top_level"):
        return None, ["vLLM %s (%s runner) does not read top-level ids" % (rules.get("version"), rules.get("runner"))]
    return ids, []


def derive_vllm(args: Dict[str, Any], raw: Dict[str, Any], n_layers: int, findings: List[Dict[str, Any]],
                is_eagle3: bool) -> Dict[str, Any]:
    """The vLLM part of draft_fix.derive: changes, blockers and notes, the corrected config and the new flags."""
    root = find_vllm_root(args.get("engine_sys_path"))
    rules = capture_rules(root, None, target_loop(args.get("target"), "vllm", root)) if root else dict(NEWEST)
    vllm = "vLLM %s" % (rules.get("version") or "(version unknown)")
    flags = {str(k): v for k, v in (args.get("candidate_flags") or {}).items()}
    flag_name, spec = _spec_config(flags)
    changes: List[Dict[str, Any]] = []
    blockers: List[Dict[str, Any]] = []
    notes: List[str] = []
    config = json.loads(json.dumps(raw))
    config_changed = False
    if flag_name is None:
        notes.append("no --speculative-config among the candidate flags: nothing on the command line to correct")

    method = str(spec.get("method") or "").lower()
    if method == "eagle" and is_eagle3:
        changes.append({"what": "speculative-config method", "from": "eagle", "to": "eagle3",
                        "why": "an EAGLE-3 draft served with method eagle: %s loads it as an EAGLE-1 head (no fc "
                               "over the concatenated aux hidden states)" % vllm})
        spec["method"] = "eagle3"

    severity = {str(f.get("id")): f.get("severity") for f in findings}
    message = {str(f.get("id")): f.get("message") for f in findings}
    if severity.get("lm_head") == "error":
        shared = rules.get("lm_head_missing") == "target_head"
        blockers.append({"what": "lm_head", "why": (message.get("lm_head") or "lm_head missing") + (
            "; %s shares the target's head cut to the draft vocabulary instead" % vllm if shared else
            "; %s keeps a randomly initialised head" % vllm),
            "remedies": ["re-export the draft with its trained lm_head.weight"]})
    if severity.get("d2t") == "error":
        blockers.append({"what": "d2t", "why": message.get("d2t") or "d2t is wrong",
                         "remedies": ["re-export d2t as offsets (d2t[i] = target_id(i) - i): %s's compute_logits "
                                      "adds arange" % vllm]})

    wiring = args.get("wiring") or {}
    decision, best = wiring.get("decision"), wiring.get("best")
    if decision == "mismatch" and isinstance(best, list) and best:
        best = [int(i) for i in best]
        ids, why_not = servable_top_level_ids(best, n_layers, rules)
        if ids is not None:
            config["eagle_aux_hidden_state_layer_ids"] = ids
            fed = vllm_wiring(config, n_layers, rules)
            if fed != sorted(set(best)):  # the reading the draft test predicts with must agree, or we say so
                raise ProbeFailure("inconsistent", "the corrected ids %s would feed %s on %s, not %s"
                                   % (ids, fed, vllm, best))
            config_changed = True
            changes.append({"what": "eagle_aux_hidden_state_layer_ids", "from": top_level_ids(raw), "to": ids,
                            "why": "the draft scores best on hidden_states %s; %s (%s runner) reads top-level ids "
                                   "as HF indices and captures at layer boundaries, so it feeds %s with these ids "
                                   "(it fed %s)" % (best, vllm, rules.get("runner"), best, wiring.get("served"))})
        else:
            blockers.append({"what": "wiring", "why": "the draft was trained on hidden_states %s, which %s cannot "
                             "feed by config: %s" % (best, vllm, "; ".join(why_not)),
                             "remedies": ["serve with a vLLM that reads top-level eagle_aux_hidden_state_layer_ids "
                                          "(0.33 does)", "retrain the draft on %s's default %s"
                                          % (vllm, default_wiring(n_layers))]})
    return {"changes": changes, "blockers": blockers, "notes": notes, "config": config,
            "config_changed": config_changed, "flag_name": flag_name, "spec": spec, "flags": flags,
            "capture": {k: rules.get(k) for k in ("runner", "capture", "embedding", "reads_top_level", "evidence")},
            "engine": {"engine": "vllm", "version": rules.get("version"), "root": root}, "name": vllm}
