"""`probe`: run any probe script from remote_probes/ on each host and register its parsed result.

```yaml
- probe: env_info                         # shorthand
- probe: {name: draft_inspect, args: {path: "{{ draft }}", target_path: "{{ target }}"}}
  register: inspect
```
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from orchestrator.actions.base import Action, ActionArgs, ActionContext, StepFailed
from orchestrator.errors import ProbeError


class ProbeArgs(ActionArgs):
    name: str = Field(description="probe script name (remote_probes/<name>.py)")
    args: dict[str, Any] = Field(default_factory=dict, description="JSON arguments for the probe")
    python: str | None = Field(default=None, description="interpreter on the host (default: the inventory's python)")


def progress_printer(ctx: ActionContext) -> Any:
    def on_progress(update: dict[str, Any]) -> None:
        extras = " ".join(f"{k}={v}" for k, v in update.items() if k != "message")
        ctx.output(f"{update.get('message', '')}{' ' + extras if extras else ''}\n", "progress")

    return on_progress


async def run_probe_step(ctx: ActionContext, name: str, args: dict[str, Any], *, python: str | None = None) -> dict[str, Any]:
    from orchestrator.probes import PROBES, validate_args
    from orchestrator.probes.invoke import run_probe

    transport = ctx.require_transport()
    if name in PROBES:
        try:
            args = validate_args(name, args)
        except ProbeError as exc:
            raise StepFailed(exc.message) from None
    interpreter = python or (ctx.host_spec.python if ctx.host_spec else "python3")
    try:
        return await run_probe(transport, name, args, python=interpreter, on_progress=progress_printer(ctx),
                               on_stderr=lambda text: ctx.output(text, "stderr"))
    except ProbeError as exc:
        raise StepFailed(exc.message) from None


SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


def worst_severity(findings: list[dict[str, Any]]) -> dict[str, str]:
    """``{finding id: worst severity}`` so rules can say ``inspect.severity.d2t == 'error'``."""
    worst: dict[str, str] = {}
    for finding in findings:
        fid, sev = str(finding.get("id")), str(finding.get("severity", "info"))
        if SEVERITY_RANK.get(sev, 0) >= SEVERITY_RANK.get(worst.get(fid, "info"), 0):
            worst[fid] = sev
    return worst


class ProbeAction(Action[ProbeArgs]):
    kind = "probe"
    Args = ProbeArgs
    shorthand = "name"
    summary = "Run a probe script (env_info, draft_inspect, sglang_source, ...) and register its JSON result."

    async def run(self, args: ProbeArgs, ctx: ActionContext) -> dict[str, Any]:
        result = await run_probe_step(ctx, args.name, args.args, python=args.python)
        if args.name == "draft_inspect":
            result["severity"] = worst_severity(result.get("findings", []))
            for finding in result.get("findings", []):
                if finding.get("severity") in ("warning", "error"):
                    ctx.output(f"[{finding['severity']}] {finding.get('id')}: {finding.get('message')}\n", "stdout")
        elif args.name == "target_capture":
            ctx.output(target_capture_line(result) + "\n", "stdout")
        elif args.name == "states_plan":
            ctx.output(states_plan_line(result) + "\n", "stdout")
        return result


def states_plan_line(result: dict[str, Any]) -> str:
    """One line for the console, the TUI and the report: where the draft test's hidden states come from, why, and
    (from an engine) the ids the capture server is asked for."""
    line = f"hidden states from {result.get('source')}: {result.get('why')}"
    if result.get("source") == "engine":
        line += f"; the capture server writes ids {result.get('layers')}"
    return line + (f"; {result['embedding_note']}" if result.get("embedding_note") else "")


def target_capture_line(result: dict[str, Any]) -> str:
    """One line for the console, the TUI and the report: the chain followed and the default ids, or why not."""
    engine = f"{result.get('engine')} {result.get('version') or ''}".strip()
    if not result.get("found"):
        return f"target class on {engine}: not followed ({result.get('why')})"
    capture = result.get("capture") or {}
    loop = result.get("capture_loop") or {}
    return (f"target class on {engine}: {result.get('followed')} at {capture.get('where')}; default ids "
            f"{result.get('default_ids')} (N = {result.get('num_layers')}, {result.get('num_layers_source')})"
            + (f"; captured in {loop.get('symbol')} at {loop.get('where')}" if loop.get("where") else ""))
