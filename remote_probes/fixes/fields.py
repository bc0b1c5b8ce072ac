"""The fix for draft-config fields that contradict the checkpoint (draft_inspect's ``draft_fields`` error, read by
remote_probes/draft_reading/field_findings.py), for draft_fix.py. Standard library only.

Each field finding of severity error carries its fix (``details.fix``: config keys and values); they are written
into the corrected config beside the draft. The served parts such a field explains (``details.parts``: a tied head
is the head the counterfactual names) are taken off the counterfactual's recovering swaps, so the checkpoint is not
also sent back for a re-export of a part it holds.

Tensor names the engine's loader cannot place (the ``tensor.names`` field finding) are fixed by a renamed copy of the
weights: ``field_renames`` returns the renames (saved name -> the name the loader places) and says the change.

Public API: ``field_fixes(findings, config, swaps, changes, notes, engine) -> (changed, remaining swaps)``,
``field_renames(findings, changes, engine) -> {saved name: new name}``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from remote_probes.draft_reading.field_findings import SUMMARY_ID


def field_fixes(findings: List[Dict[str, Any]], config: Dict[str, Any], swaps: List[Dict[str, Any]],
                changes: List[Dict[str, Any]], notes: List[str], engine: str
                ) -> Tuple[bool, List[Dict[str, Any]]]:
    """Apply the error fields' fixes to ``config`` in place (appending to ``changes``); return whether the config
    changed and the swaps no field explains."""
    summary = next((f for f in findings if f.get("id") == SUMMARY_ID and f.get("severity") == "error"), None)
    if summary is None:
        return False, swaps
    details = summary.get("details") or {}
    changed = False
    for f in details.get("findings") or []:
        if not isinstance(f, dict) or f.get("severity") != "error":
            continue
        d = f.get("details") or {}
        fix = d.get("fix")
        if not isinstance(fix, dict) or not fix:
            continue
        before = {k: config.get(k) for k in fix}
        config.update(fix)
        changed = True
        where = "%s:%s" % (d.get("file"), d.get("line")) if d.get("file") else "its draft class"
        changes.append({"what": "config %s" % "/".join(sorted(fix)), "from": before, "to": dict(fix),
                        "why": "%s reads %s at %s: %s" % (engine, d.get("field"), where, f.get("message"))})
    explained = {str(p) for p in details.get("parts") or []}
    remaining = [s for s in swaps if str(s.get("part")) not in explained]
    for s in swaps:
        if str(s.get("part")) in explained:
            notes.append("the counterfactual's %s swap (%s -> %s) is what the corrected field serves: not a part to "
                         "re-export" % (s.get("part"), s.get("served"), s.get("swapped")))
    return changed, remaining


def field_renames(findings: List[Dict[str, Any]], changes: List[Dict[str, Any]], engine: str) -> Dict[str, str]:
    """The renames of the error ``tensor.names`` finding (empty when there is none), said in ``changes``."""
    summary = next((f for f in findings if f.get("id") == SUMMARY_ID and f.get("severity") == "error"), None)
    out: Dict[str, str] = {}
    for f in (summary or {}).get("details", {}).get("findings") or []:
        d = f.get("details") or {} if isinstance(f, dict) else {}
        if f.get("severity") != "error" or not isinstance(d.get("rename"), dict) or not d["rename"]:
            continue
        out.update({str(k): str(v) for k, v in d["rename"].items()})
        where = "%s:%s" % (d.get("file"), d.get("line")) if d.get("file") else "its loader"
        what = ("without the prefix %r" % d["prefix"]) if d.get("prefix") else "under the names its loader places"
        changes.append({"what": "tensor names", "from": sorted(d["rename"])[:4], "to": [d["rename"][k] for k in
                                                                                      sorted(d["rename"])[:4]],
                        "why": "%s loads the draft by name (%s): %d saved tensor%s written %s in a copy of the "
                               "weights" % (engine, where, len(d["rename"]), "s" if len(d["rename"]) > 1 else "",
                                            what)})
    return out
