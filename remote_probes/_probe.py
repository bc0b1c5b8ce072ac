"""The probe protocol, shared by every probe script (standard library only, Python >= 3.9).

A probe reads one JSON object of arguments (from the file named by argv[1], or stdin when absent),
prints exactly one JSON result between marker lines on stdout, and exits 0. On failure it prints a
JSON error ``{"kind", "message", "details"}`` between the same markers and exits 3. The markers carry
a nonce chosen by the caller (env ORCH_PROBE_NONCE), so nothing a library prints can forge them.
Progress goes to stderr as ``@@ORCH-PROGRESS@@ {json}`` lines, one per update.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any, Callable, Dict

EXIT_PROBE_ERROR = 3


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
    sys.stderr.write("@@ORCH-PROGRESS@@ " + json.dumps(payload, default=str) + "\n")
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


def run_probe(main: Callable[[Dict[str, Any]], Dict[str, Any]]) -> None:
    """Run ``main(args) -> result`` under the protocol and exit."""
    try:
        args = _read_args(sys.argv)
        result = main(args)
        _emit({"ok": True, "result": result})
        code = 0
    except ProbeFailure as exc:
        _emit({"ok": False, "error": {"kind": exc.kind, "message": exc.message, "details": exc.details}})
        code = EXIT_PROBE_ERROR
    except json.JSONDecodeError as exc:
        _emit({"ok": False, "error": {"kind": "bad_args", "message": "probe arguments are not JSON: %s" % exc, "details": {}}})
        code = EXIT_PROBE_ERROR
    except Exception as exc:  # a probe bug: report it as data so the orchestrator can show it
        _emit({"ok": False, "error": {"kind": "crash", "message": "%s: %s" % (type(exc).__name__, exc),
                                      "details": {"traceback": traceback.format_exc()[-4000:]}}})
        code = EXIT_PROBE_ERROR
    sys.stdout.flush()
    sys.exit(code)
