"""The pre-flight flag check: the installed SGLang's own parser judges a command line before a multi-minute load.

``run_preflight`` runs the ``sglang_flags`` probe (remote_probes/engine/sglang_flags.py) on the server's host with the
server's python: SGLang's real ``prepare_server_args`` where it imports (a GPU host), else SGLang's parser rebuilt
from the installed source plus the start-up rules that crash. A refusal becomes a ``StartFailure`` shaped like a
failed start's (startlog.py), so ``srv.failure`` and the flagship's ``server_start`` hypothesis read it the same
way; nothing is started. When the check itself cannot run (no sglang for that python, the probe broke) the start
goes on and the result says why the check was skipped: the check may only ever save time, never block a start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.errors import ProbeError
from orchestrator.servers.startlog import StartFailure

if TYPE_CHECKING:
    from orchestrator.servers.base import EngineAdapter, LaunchSpec
    from orchestrator.transport.base import Transport

#: the probe's own time limit; SGLang's prepare_server_args (the runtime route) reads the model's config
PREFLIGHT_TIMEOUT = 60.0

_CAUSES = {"unknown_flag": "unknown_flag", "ambiguous_flag": "ambiguous_flag", "invalid_flag": "invalid_flag"}


@dataclass
class Preflight:
    """The check's verdict, as recorded in a server step's result (``srv.preflight``)."""

    ok: bool
    route: str | None = None  # static | runtime; None when skipped
    version: str | None = None
    layout: str | None = None
    exit_code: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    adjustments: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float | None = None
    skipped: str | None = None  # why the check did not run

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "route": self.route, "version": self.version, "layout": self.layout,
                "exit_code": self.exit_code, "errors": list(self.errors), "adjustments": list(self.adjustments),
                "notes": list(self.notes), "seconds": self.seconds, "skipped": self.skipped}

    def note(self) -> str:
        """One line for the step's output."""
        if self.skipped:
            return f"pre-flight skipped: {self.skipped}"
        head = f"pre-flight: SGLang {self.version} ({self.route} route, {self.seconds}s)"
        if not self.ok:
            return f"{head} refuses the flags: {self.errors[0]['message'] or self.errors[0]['exception']}"
        adjusted = "; ".join(f"it will set {a['field']} {a['requested']} -> {a['effective']}" for a in self.adjustments)
        return f"{head} accepts the flags" + (f"; {adjusted}" if adjusted else "")

    def failure(self) -> StartFailure:
        """The refusal as a failed start (reason ``preflight``)."""
        first = self.errors[0]
        kind = first["kind"]
        cause = _CAUSES.get(kind, "bad_combination")
        said = first["message"].split(": error: ", 1)[-1]
        if cause == "unknown_flag":
            summary = f"the server does not accept a flag ({said})"
        elif cause == "ambiguous_flag":
            summary = f"the server's parser cannot tell which flag is meant ({said})"
        elif cause == "invalid_flag":
            summary = f"the server's argument parser refused the command line ({said})"
        else:
            raised = f"{first['exception']}: {first['message']}" if first["message"] else first["exception"]
            summary = (f"SGLang {self.version} crashes at start-up with these flags ({raised} at "
                       f"{first['where']}){': ' + first['detail'] if first.get('detail') else ''}")
        lines: list[str] = []
        for error in self.errors:
            if error["exception"] == "SystemExit":
                lines.append(error["message"])
            else:
                lines.append(f"{error['exception']}: {error['message']}" if error["message"] else error["exception"])
                lines.append(f"  (sglang {self.version} {error['where']}) {error.get('detail') or ''}".rstrip())
        return StartFailure(cause=cause, summary=summary, reason="preflight", exit_code=self.exit_code,
                            error_lines=lines)


def _sys_path(spec: LaunchSpec) -> list[str]:
    """The step's own PYTHONPATH (``env:``), which the server would see; the host's is in the probe's env already."""
    value = spec.env.get("PYTHONPATH", "")
    return [p for p in value.split(os.pathsep) if p]


async def run_preflight(transport: Transport, adapter: EngineAdapter, spec: LaunchSpec, *,
                        timeout: float = PREFLIGHT_TIMEOUT) -> Preflight:
    """Check ``spec``'s command line on the host. Never raises for the check's own trouble (it is skipped then).

    :raises HostUnreachable: the host went away.
    """
    from orchestrator.probes.invoke import run_probe

    argv = adapter.preflight_argv(spec)
    try:
        result = await run_probe(transport, "sglang_flags", {"argv": argv, "sys_path": _sys_path(spec),
                                                              "timeout": timeout},
                                 python=spec.python, timeout=timeout + 30)
    except ProbeError as exc:
        if exc.kind == "package_not_found":
            return Preflight(ok=True, skipped=f"sglang is not installed for {spec.python} on {transport.host}")
        return Preflight(ok=True, skipped=f"the check could not run ({exc.reason or exc.message.splitlines()[0]})")
    notes = list(result.get("notes") or [])
    if result.get("runtime_note"):
        notes.insert(0, result["runtime_note"])
    return Preflight(ok=bool(result["ok"]), route=result["route"], version=result.get("version"),
                     layout=result.get("layout"), exit_code=int(result["exit_code"]),
                     errors=list(result.get("errors") or []), adjustments=list(result.get("adjustments") or []),
                     notes=notes, seconds=result.get("seconds"))
