"""`env_diff`: compare a fanned-out ``env_info`` across hosts and show what differs (runs once, on the controller).

```yaml
- probe: env_info                 # on every node of an allocation (hosts: cluster)
  hosts: cluster
  register: env
- env_diff: env                   # table of differences: driver, CUDA, sglang, GPU count, torch, python, packages
  register: envdiff               # envdiff.differences: {field: {host: value}}; fail_on_difference: true to stop
```

Nodes of one allocation are meant to be alike; a multi-node server whose ranks run different drivers or sglang
versions fails in ways that look like anything but that. This names the difference before a server starts.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from orchestrator.actions.base import Action, ActionArgs, ActionContext, StepFailed

MISSING = "-"


class EnvDiffArgs(ActionArgs):
    source: str = Field(description="name of the registered env_info result to compare (register: of a probe step)")
    fail_on_difference: bool = Field(default=False, description="fail the step when any field differs")


def env_fields(result: dict[str, Any]) -> dict[str, str]:
    """The fields compared, as text, from one host's env_info result."""
    if result.get("status") not in (None, "ok"):
        return {"status": str(result.get("status"))}
    gpus = result.get("gpus") or []
    smi = result.get("nvidia_smi") or {}
    cuda = result.get("cuda") or {}
    torch = result.get("torch") or {}
    packages = result.get("packages") or {}
    fields = {
        "driver": smi.get("driver_version") or (gpus[0].get("driver_version") if gpus else None),
        "cuda (driver)": cuda.get("driver_cuda_version"),
        "cuda (torch)": cuda.get("torch_cuda_version"),
        "gpu count": len(gpus),
        "gpu model": ", ".join(sorted({str(g.get("name")) for g in gpus})) or None,
        "torch": torch.get("version"),
        "python": (result.get("python") or {}).get("version"),
    }
    fields.update({f"pkg {name}": version for name, version in sorted(packages.items())})
    return {key: MISSING if value is None else str(value) for key, value in fields.items()}


def per_host_results(registered: Any, name: str) -> dict[str, dict[str, Any]]:
    """``{host: result}`` from a registered value (several hosts: ``{"hosts": {...}}``; one host: the result)."""
    if not isinstance(registered, dict):
        raise StepFailed(f"{name!r} is not a registered env_info result")
    if isinstance(registered.get("hosts"), dict):
        return {str(h): r for h, r in registered["hosts"].items() if isinstance(r, dict)}
    return {str(registered.get("host", "host")): registered}


def difference_table(fields: dict[str, dict[str, str]], hosts: list[str]) -> list[str]:
    """Plain-text rows: a header, then one row per differing field."""
    rows = [["field", *hosts], *([key, *(values.get(h, MISSING) for h in hosts)] for key, values in fields.items())]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]


class EnvDiffAction(Action[EnvDiffArgs]):
    kind = "env_diff"
    Args = EnvDiffArgs
    shorthand = "source"
    per_host = False
    summary = "Compare a registered env_info over several hosts: a table of the fields that differ."

    async def run(self, args: EnvDiffArgs, ctx: ActionContext) -> dict[str, Any]:
        if args.source not in ctx.variables:
            raise StepFailed(f"no registered result named {args.source!r} (register: it on the env_info step)")
        results = per_host_results(ctx.variables[args.source], args.source)
        hosts = sorted(results)
        by_host = {host: env_fields(results[host]) for host in hosts}
        keys = list(dict.fromkeys(k for fields in by_host.values() for k in fields))
        table = {key: {h: by_host[h].get(key, MISSING) for h in hosts} for key in keys}
        differences = {key: values for key, values in table.items() if len(set(values.values())) > 1}
        same = {key: next(iter(values.values())) for key, values in table.items() if key not in differences}
        if differences:
            ctx.output(f"{len(differences)} field(s) differ across {len(hosts)} hosts:\n", "stdout")
            ctx.output("\n".join(difference_table(differences, hosts)) + "\n", "stdout")
        else:
            ctx.output(f"all {len(hosts)} hosts agree on {len(same)} fields "
                       f"(driver {same.get('driver', MISSING)}, sglang {same.get('pkg sglang', MISSING)})\n", "stdout")
        result = {"hosts": hosts, "differences": differences, "same": same, "count": len(differences)}
        if differences and args.fail_on_difference:
            raise StepFailed(f"{len(differences)} field(s) differ across hosts: {', '.join(differences)}", result)
        return result
