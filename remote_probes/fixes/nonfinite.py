"""A weight holding a few non-finite values, mended in a copy so that the fix can be served and verified, for
draft_fix.py. Standard library only.

A NaN or Inf in a weight makes every draft step that reads it non-finite (checks/tensor_values.py finds them), so
the draft proposes nothing the target accepts. The trained values are lost: only a re-export from a finite training
checkpoint restores them. But whether those values ARE the fault is a question the server can answer: the copy beside
the draft with each non-finite element set to 0 (every other byte as trained) is served like any corrected draft, and
a recovered accept length confirms the cause. Where the non-finite values are more than a sliver of the tensor
(``MEND_AT_MOST``), a zeroed copy would be another tensor rather than the trained one with a hole: that stays a
blocker (re-export), as does a matrix of zeros (nothing trained is left in it to serve).

Public API: ``mend_nonfinite(draft_dir, findings, changes, blockers) -> {tensor name: new raw bytes}``.
"""

from __future__ import annotations

from typing import Any, Dict, List

from remote_probes.checks.tensor_values import SCANNED, nonfinite_positions
from remote_probes.draft_reading.field_findings import SUMMARY_ID
from remote_probes.fixes.parts import raw_tensor

#: the share of a tensor's elements a mended copy may set to 0 and still be the trained tensor (a few lost values)
MEND_AT_MOST = 0.01
_SIZE = {"F32": 4, "BF16": 2, "F16": 2, "F64": 8}


def _value_findings(findings: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The error ``tensor.values`` findings, top-level or inside the field reading's summary."""
    out = [f for f in findings if f.get("id") == "tensor.values"]
    for f in findings:
        if f.get("id") == SUMMARY_ID:
            out += [g for g in (f.get("details") or {}).get("findings") or []
                    if isinstance(g, dict) and g.get("id") == "tensor.values"]
    return [f for f in out if f.get("severity") == "error"]


def mend_nonfinite(draft_dir: str, findings: List[Dict[str, Any]], changes: List[Dict[str, Any]],
                   blockers: List[Dict[str, Any]]) -> Dict[str, bytes]:
    """For each tensor with a few non-finite values: its bytes with those elements set to 0 (a change that says the
    trained values are lost); for the rest (too many, all zeros, unreadable) a blocker whose remedy is re-export."""
    out: Dict[str, bytes] = {}
    for f in _value_findings(findings):
        d = f.get("details") or {}
        name = str(d.get("field") or "")
        canonical = name[len("model."):] if name.startswith("model.") else name
        elements = int(d.get("elements") or 0)
        bad = int(d.get("nonfinite") or 0)
        remedy = "re-export %s from a finite training checkpoint" % name
        if not bad:  # all zeros: nothing trained left to serve
            blockers.append({"what": "tensor %s" % name, "why": str(f.get("message")), "remedies": [remedy]})
            continue
        raw, dtype, _ = raw_tensor(draft_dir, (name, "model." + name))
        positions = (nonfinite_positions(raw, dtype, int(elements * MEND_AT_MOST))
                     if raw is not None and dtype in SCANNED else None)
        if raw is None or dtype not in _SIZE or positions is None:
            why = ("%d of its %d values are not finite: more than %g%% of the tensor, so a copy with them zeroed "
                   "would not be the trained tensor" % (bad, elements, 100 * MEND_AT_MOST)) if raw is not None \
                else "it could not be read back"
            blockers.append({"what": "tensor %s" % name, "why": "%s; %s" % (f.get("message"), why),
                             "remedies": [remedy]})
            continue
        size = _SIZE[str(dtype)]
        mended = bytearray(raw)
        for j in positions:
            mended[j * size:(j + 1) * size] = b"\0" * size
        out[canonical] = bytes(mended)
        changes.append({"what": "tensor %s" % name, "from": "%d non-finite of %d" % (len(positions), elements),
                        "to": "0 at those %d positions (a mended copy)" % len(positions),
                        "why": "every draft step that reads a non-finite weight is non-finite; the copy serves the "
                               "trained tensor with only those values zeroed, so a recovered accept length shows they "
                               "are the fault (%s for the values training meant)" % remedy})
    return out
