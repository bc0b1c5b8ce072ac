"""The probe protocol, shared by every probe script (standard library only, Python >= 3.9).

A probe reads one JSON object of arguments (from the file named by argv[1], or stdin when absent),
prints exactly one JSON result between marker lines on stdout, and exits 0. On failure it prints a
JSON error ``{"kind", "message", "details"}`` between the same markers and exits 3. The markers carry
a nonce chosen by the caller (env ORCH_PROBE_NONCE), so nothing a library prints can forge them.
Progress goes to stderr as ``@@ORCH-PROGRESS@@ {json}`` lines, one per update.

A probe that says so (``# orchestrator-agent: in-process`` in its first lines: pure, read-only, stdlib-only) may also
be run inside the agent's own process (_agent.py): ``run_in_process`` returns the same document the markers would
carry, and ``progress`` then goes to that call's own stderr instead of the process's.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from typing import Any, Callable, Dict

EXIT_PROBE_ERROR = 3
# The call an in-process probe runs for, per thread: where its progress lines go (unset: the process's stderr).
_CALL = threading.local()


class ProbeFailure(Exception):
    """A failure the probe understands: reported with a kind, a sentence and details, no traceback."""

    def __init__(self, kind: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.details = details


def _markers() -> "tuple[str, str]":
    nonce = os.environ.get("ORCH_PROBE_NONCE", "0")
    return "@@ORCH-RESULT-BEGIN %s@@" % nonce, "@@ORCH-RESULT-END %s@@" % nonce


def progress(message: str, **fields: Any) -> None:
    """Report progress to the orchestrator (shown live, recorded in the session)."""
    payload = dict(fields, message=message)
    line = "@@ORCH-PROGRESS@@ " + json.dumps(payload, default=str) + "\n"
    sink = getattr(_CALL, "stderr", None)
    if sink is not None:
        sink(line)
        return
    sys.stderr.write(line)
    sys.stderr.flush()


def _emit(document: Dict[str, Any]) -> None:
    begin, end = _markers()
    text = json.dumps(document, default=str, allow_nan=False)
    # A leading newline keeps the marker on its own line even after a stray partial print.
    sys.stdout.write("\n" + begin + "\n" + text + "\n" + end + "\n")
    sys.stdout.flush()


def _read_args(argv: "list[str]") -> Dict[str, Any]:
    raw = open(argv[1], encoding="utf-8").read() if len(argv) > 1 else sys.stdin.read()
    if not raw.strip():
        return {}
    args = json.loads(raw)
    if not isinstance(args, dict):
        raise ProbeFailure("bad_args", "probe arguments must be a JSON object")
    return args


def _document(main: Callable[[Dict[str, Any]], Dict[str, Any]], args: "Dict[str, Any] | None") -> "tuple[Dict[str, Any], int]":
    """``main`` run under the protocol: (the document to report, the exit status). ``args`` None: read them."""
    try:
        if args is None:
            args = _read_args(sys.argv)
        result = main(args)
        return {"ok": True, "result": result}, 0
    except ProbeFailure as exc:
        return {"ok": False, "error": {"kind": exc.kind, "message": exc.message, "details": exc.details}}, EXIT_PROBE_ERROR
    except json.JSONDecodeError as exc:
        return {"ok": False, "error": {"kind": "bad_args", "message": "probe arguments are not JSON: %s" % exc,
                                       "details": {}}}, EXIT_PROBE_ERROR
    except Exception as exc:  # a probe bug: report it as data so the orchestrator can show it
        return {"ok": False, "error": {"kind": "crash", "message": "%s: %s" % (type(exc).__name__, exc),
                                       "details": {"traceback": traceback.format_exc()[-4000:]}}}, EXIT_PROBE_ERROR


def run_probe(main: Callable[[Dict[str, Any]], Dict[str, Any]]) -> None:
    """Run ``main(args) -> result`` under the protocol and exit."""
    document, code = _document(main, None)
    _emit(document)
    sys.stdout.flush()
    sys.exit(code)


def run_in_process(main: Callable[[Dict[str, Any]], Dict[str, Any]], args: Any,
                   stderr: Callable[[str], None]) -> Dict[str, Any]:
    """``main(args)`` in this thread for the agent: the document ``run_probe`` would print (a failure included, as
    data), progress lines to ``stderr``."""
    if not isinstance(args, dict):
        return {"ok": False, "error": {"kind": "bad_args", "message": "probe arguments must be a JSON object",
                                       "details": {}}}
    _CALL.stderr = stderr
    try:
        document, _ = _document(main, args)
    finally:
        _CALL.stderr = None
    return document
