"""Probe: check a server command line with the installed SGLang's own argument parser, before a model load.

Standard library only, Python >= 3.9. Run as ``python3 sglang_flags.py ARGS.json`` next to ``_probe.py``.

Args: ``{"argv": [the flags sglang.launch_server would get, model path included], "package"?: "sglang",
"sys_path"?: [dirs prepended to sys.path], "runtime"?: true, "timeout"?: 60}``.

Two routes, and the result says which one decided:
- ``runtime`` (a real GPU host, where ``import sglang.srt.server_args`` works): ``prepare_server_args(argv)`` (and
  0.5.23's ``resolve_once``) in a subprocess with a timeout: SGLang's real parser and real resolution rules.
- ``static`` (everywhere else, e.g. a CPU box with a ``pip --no-deps`` tree): SGLang's parser rebuilt from the source
  by ``ast`` (sglang_argparse.py), then the speculative-decoding rules that crash or adjust, copied from each
  version with the line they come from read from this tree.

Result: ``{"package", "version", "root", "layout", "route", "runtime_note", "ok", "exit_code", "errors": [{"kind",
"exception", "message", "where", "detail"}], "adjustments": [{"field", "requested", "effective", "message",
"where"}], "notes": [...], "parser": {"options", "source"}, "seconds"}``. ``kind`` is ``unknown_flag``,
``ambiguous_flag`` or ``invalid_flag`` (argparse, exit code 2, ``message`` its own error line), or a start-up
crash (``unknown_algorithm``, ``topk_without_steps``, ``steps_without_topk``, ``startup_error``; exit code 1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

from remote_probes.agent.protocol import ProbeFailure, progress, run_probe
from remote_probes.engine.sglang_argparse import build_parser, check_rules, detect_layout, parse
from remote_probes.engine.sglang_source import locate_package

_MARK = "@@SGLANG-FLAGS-RUNTIME@@"

# Run with the host's python; prints one JSON line after _MARK (SGLang's logging goes to the captured stderr).
_RUNTIME = r"""
import contextlib, io, json, sys, traceback
argv = json.loads(sys.argv[1])
out = {}
try:
    from sglang.srt.server_args import prepare_server_args
except BaseException as exc:
    out = {"imported": False, "error": "%s: %s" % (type(exc).__name__, exc)}
else:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = prepare_server_args(argv)
            if hasattr(args, "resolve_once"):
                args.resolve_once()
        out = {"imported": True, "ok": True, "values": {k: getattr(args, k, None) for k in (
            "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
            "speculative_num_draft_tokens")}}
    except SystemExit as exc:
        out = {"imported": True, "exit_code": exc.code, "stderr": err.getvalue()[-4000:]}
    except BaseException as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        out = {"imported": True, "exception": type(exc).__name__, "message": str(exc),
               "where": "%s:%d" % (frame.filename, frame.lineno)}
print("MARK" + json.dumps(out, default=str))
""".replace("MARK", _MARK)


def _argparse_kind(message: str) -> str:
    if "unrecognized arguments:" in message:
        return "unknown_flag"
    if "ambiguous option:" in message:
        return "ambiguous_flag"
    return "invalid_flag"


def _runtime(argv: List[str], sys_path: List[str], timeout: float) -> Dict[str, Any]:
    """SGLang's own ``prepare_server_args`` in a subprocess; ``{"imported": False, ...}`` where it cannot load."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*sys_path, env.get("PYTHONPATH", "")]).strip(os.pathsep)
    try:
        proc = subprocess.run([sys.executable, "-c", _RUNTIME, json.dumps(argv)], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"imported": False, "error": "prepare_server_args did not finish within %gs" % timeout}
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(_MARK)), None)
    if line is None:
        return {"imported": False, "error": "exit code %s, no answer: %s" % (proc.returncode, proc.stderr[-300:])}
    answer: Dict[str, Any] = json.loads(line[len(_MARK):])
    return answer


def _runtime_verdict(answer: Dict[str, Any], argv: List[str]) -> Dict[str, Any]:
    errors: List[Dict[str, Any]] = []
    adjustments: List[Dict[str, Any]] = []
    exit_code = 0
    if "exit_code" in answer:
        exit_code = answer["exit_code"] if isinstance(answer["exit_code"], int) else 1
        lines = [ln for ln in str(answer.get("stderr") or "").splitlines() if ln.strip()]
        message = next((ln for ln in reversed(lines) if ": error: " in ln), lines[-1] if lines else "")
        if exit_code:
            errors.append({"kind": _argparse_kind(message), "exception": "SystemExit", "message": message,
                           "where": "argparse", "detail": ""})
    elif "exception" in answer:
        exit_code = 1
        errors.append({"kind": "startup_error", "exception": answer["exception"], "message": answer["message"],
                       "where": answer.get("where", ""), "detail": ""})
    else:
        values = answer.get("values") or {}
        requested = _requested_int(argv, "--speculative-num-draft-tokens")
        effective = values.get("speculative_num_draft_tokens")
        if requested is not None and effective is not None and requested != effective:
            adjustments.append({"field": "speculative_num_draft_tokens", "requested": requested,
                                "effective": effective, "message": "resolved by prepare_server_args",
                                "where": "runtime"})
    return {"errors": errors, "adjustments": adjustments, "exit_code": exit_code}


def _requested_int(argv: List[str], flag: str) -> Optional[int]:
    for i, word in enumerate(argv):
        value = word.split("=", 1)[1] if word.startswith(flag + "=") else (
            argv[i + 1] if word == flag and i + 1 < len(argv) else None)
        if value is not None:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def main(args: Dict[str, Any]) -> Dict[str, Any]:
    started = time.monotonic()
    argv = args.get("argv")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ProbeFailure("bad_args", "argv must be a list of strings (the server's flags and their values)")
    package = str(args.get("package") or "sglang")
    sys_path = [str(p) for p in args.get("sys_path") or []]
    for entry in reversed(sys_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    found = locate_package(package)
    root = found["root"]
    layout = detect_layout(root)
    result: Dict[str, Any] = {"package": package, "version": found["version"], "root": root, "layout": layout,
                              "route": "static", "runtime_note": None, "notes": []}
    if args.get("runtime", True):
        progress("trying SGLang's own prepare_server_args")
        answer = _runtime(argv, sys_path, float(args.get("timeout") or 60))
        if answer.get("imported"):
            verdict = _runtime_verdict(answer, argv)
            result.update(route="runtime", ok=not verdict["errors"], exit_code=verdict["exit_code"],
                          errors=verdict["errors"], adjustments=verdict["adjustments"],
                          parser={"options": None, "source": "sglang.srt.server_args.prepare_server_args"},
                          seconds=round(time.monotonic() - started, 3))
            return result
        result["runtime_note"] = "import sglang.srt.server_args failed (%s); the static route decided" % (
            str(answer.get("error"))[:300])
    try:
        parser, info = build_parser(root)
    except (OSError, SyntaxError) as exc:
        raise ProbeFailure("unreadable_tree", "cannot rebuild SGLang's parser from %s: %s" % (root, exc),
                           root=root) from None
    result["notes"] = list(info["notes"])
    result["parser"] = {"options": info["options"], "source": info["source"]}
    ns, refused = parse(parser, argv)
    if refused is not None:
        result.update(ok=False, exit_code=refused["exit_code"], adjustments=[], errors=[
            {"kind": _argparse_kind(refused["message"]), "exception": "SystemExit", "message": refused["message"],
             "where": "argparse", "detail": ""}])
    else:
        assert ns is not None
        rules = check_rules(ns, root=root, layout=layout)
        result["notes"] += rules["notes"]
        result.update(ok=not rules["errors"], exit_code=1 if rules["errors"] else 0, errors=rules["errors"],
                      adjustments=rules["adjustments"])
    result["seconds"] = round(time.monotonic() - started, 3)
    return result


if __name__ == "__main__":
    run_probe(main)
