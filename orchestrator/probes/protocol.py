"""The orchestrator side of the probe protocol (remote_probes/agent/protocol.py): find the result block, parse it.

A probe prints ``@@ORCH-RESULT-BEGIN <nonce>@@``, one JSON line, ``@@ORCH-RESULT-END <nonce>@@`` on stdout; the
nonce is chosen per run by the caller (env ORCH_PROBE_NONCE) so library output cannot forge a result. Anything
else on stdout is stray output: kept for the log, never parsed. This module imports neither torch nor a transport.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field

from orchestrator.errors import ProbeError

PROGRESS_PREFIX = "@@ORCH-PROGRESS@@ "
# Kinds this parser reports when the output itself is broken (the probe reports its own kinds, e.g. "crash").
PROTOCOL_KINDS = ("no_output", "missing_markers", "truncated", "not_json", "bad_document", "multiple_results")


class ProbeErrorInfo(BaseModel):
    kind: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class ProbeOutcome(BaseModel):
    """What one probe run produced: a result, or an error saying what went wrong (never both)."""

    ok: bool
    result: dict[str, Any] | None = None
    error: ProbeErrorInfo | None = None
    stray_output: str = ""  # stdout outside the markers, e.g. warnings a library printed

    def unwrap(self, probe: str = "probe") -> dict[str, Any]:
        """The result, or :raises ProbeError: naming the probe, the kind and the message."""
        if self.ok and self.result is not None:
            return self.result
        err = self.error or ProbeErrorInfo(kind="bad_document", message="no result and no error")
        raise ProbeError(f"{probe} failed ({err.kind}): {err.message}")


def new_nonce() -> str:
    import secrets

    return secrets.token_hex(8)


def _protocol_error(kind: str, message: str, stray: str, **details: Any) -> ProbeOutcome:
    return ProbeOutcome(ok=False, error=ProbeErrorInfo(kind=kind, message=message, details=details),
                        stray_output=stray)


def _tail(text: str, limit: int = 2000) -> str:
    return text[-limit:]


def parse_probe_output(stdout: str, nonce: str, *, exit_status: int | None = None,
                       stderr: str = "") -> ProbeOutcome:
    """Parse a probe's stdout. Broken output (nothing, no markers, cut off, not JSON) becomes an outcome with a
    protocol error kind (see PROTOCOL_KINDS) and the output tails as details; this function never raises."""
    begin, end = f"@@ORCH-RESULT-BEGIN {nonce}@@", f"@@ORCH-RESULT-END {nonce}@@"
    context = {"exit_status": exit_status, "stdout_tail": _tail(stdout), "stderr_tail": _tail(stderr)}
    starts = [m.start() for m in re.finditer(re.escape(begin), stdout)]
    if not starts:
        if not stdout.strip():
            why = f" (exit status {exit_status})" if exit_status is not None else ""
            hint = _last_line(stderr)
            return _protocol_error("no_output", f"the probe printed nothing{why}" + (f": {hint}" if hint else ""),
                                   "", **context)
        return _protocol_error("missing_markers", "the probe's output has no result block (did it run under "
                               "the probe protocol, with the same nonce?)", stdout, **context)
    if len(starts) > 1:
        return _protocol_error("multiple_results", f"the probe printed {len(starts)} result blocks; expected one",
                               stdout, **context)
    body_start = starts[0] + len(begin)
    stop = stdout.find(end, body_start)
    if stop < 0:
        return _protocol_error("truncated", "the probe's result block was cut off before its end marker (killed "
                               "or timed out?)", stdout[:starts[0]], **context)
    stray = (stdout[:starts[0]] + stdout[stop + len(end):]).strip("\n")
    body = stdout[body_start:stop].strip()
    try:
        document = json.loads(body)
    except ValueError as exc:
        return _protocol_error("not_json", f"the probe's result block is not JSON: {exc}", stray,
                               body_head=body[:500], **context)
    return outcome_from_document(document, stray=stray, body_head=body[:500], **context)


def outcome_from_document(document: Any, *, stray: str = "", **context: Any) -> ProbeOutcome:
    """The outcome a probe's document says (``{"ok": true, "result"}`` or ``{"ok": false, "error"}``), whether it
    came between the markers on stdout or straight from the agent (a probe it ran in its own process). A document
    of the wrong shape is a ``bad_document`` outcome; this function never raises."""
    body_head = context.pop("body_head", None)
    if not isinstance(document, dict) or not isinstance(document.get("ok"), bool):
        extra = {"body_head": body_head} if body_head is not None else {}
        return _protocol_error("bad_document", "the probe's result is not an object with a boolean 'ok'", stray,
                               **extra, **context)
    if document["ok"]:
        result = document.get("result")
        if not isinstance(result, dict):
            return _protocol_error("bad_document", "the probe reported ok without a result object", stray, **context)
        # constructed, not validated: the check above is all this model's validation would do, and the result's
        # own shape is checked once, against the probe's result model, by the caller
        return ProbeOutcome.model_construct(ok=True, result=result, error=None, stray_output=stray)
    error = document.get("error")
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return _protocol_error("bad_document", "the probe reported failure without an error message", stray,
                               **context)
    details = error.get("details")
    if not isinstance(details, dict):
        details = {}
    return ProbeOutcome(ok=False, stray_output=stray,
                        error=ProbeErrorInfo(kind=str(error.get("kind") or "unknown"), message=error["message"],
                                             details=dict(details, exit_status=context.get("exit_status"))))


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def parse_progress_line(line: str) -> dict[str, Any] | None:
    """A ``@@ORCH-PROGRESS@@ {json}`` stderr line as a dict (with "message"), or None for any other line."""
    if not line.startswith(PROGRESS_PREFIX):
        return None
    try:
        payload = json.loads(line[len(PROGRESS_PREFIX):])
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None
