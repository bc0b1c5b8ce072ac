"""`sweep`: start -> bench -> stop for each flag set (a matrix or a list) plus the no-speculation baseline.

```yaml
- sweep:
    engine: lab
    model: "{{ target }}"
    flags: {speculative-algorithm: EAGLE3, speculative-draft-model-path: "{{ draft }}"}   # base flags (alias base_flags)
    matrix: {speculative-num-steps: [1, 3, 7], speculative-eagle-topk: [1], speculative-num-draft-tokens: [2, 4, 8]}
    # or configs: [{speculative-num-steps: 3, ...}, ...]
    baseline: true
    bench: {n: 4, max_new_tokens: 64}
  register: sw   # sw.rows, sw.best (label, flags, tok_s, speedup), sw.baseline, sw.artifacts, sw.table
```
Combinations SGLang's bench_speculative would skip (steps*topk+1 < num_draft_tokens) are recorded as skipped.
A config whose server fails to start is a failed row, not a failed step (``stop_on_error: true`` changes that).
The table (.json/.csv/.md) and an SVG chart go to ``<session>/artifacts/``.
"""

from __future__ import annotations

import itertools
from typing import Any

from pydantic import Field, model_validator

from orchestrator.actions.base import Action, ActionContext, StepFailed
from orchestrator.actions.bench import BenchSettings, run_bench
from orchestrator.actions.server import FlagMap, ServerLaunchArgs, launch_parts
from orchestrator.errors import OrchestratorError

MAX_CONFIGS = 256


class SweepArgs(ServerLaunchArgs):
    matrix: dict[str, list[str | int | float | bool | None]] | None = Field(
        default=None, description="flag -> values; every combination is run")
    configs: list[FlagMap] | None = Field(default=None, description="explicit flag sets (merged onto flags)")
    baseline: bool = Field(default=True, description="also run without any speculative flag")
    bench: BenchSettings = Field(default_factory=lambda: BenchSettings(n=4))
    stop_on_error: bool = False

    @model_validator(mode="before")
    @classmethod
    def _alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "base_flags" in data:
            data = dict(data)
            if "flags" in data:
                raise ValueError("give 'flags' or 'base_flags', not both")
            data["flags"] = data.pop("base_flags")
        return data

    @model_validator(mode="after")
    def _shape(self) -> SweepArgs:
        if self.matrix is not None and self.configs is not None:
            raise ValueError("give 'matrix' or 'configs', not both")
        if self.matrix is None and self.configs is None:
            raise ValueError("give 'matrix' (flag -> list of values) or 'configs' (list of flag sets)")
        for name, values in (self.matrix or {}).items():
            if not values:
                raise ValueError(f"matrix.{name}: needs at least one value")
        if len(expand(self)) > MAX_CONFIGS:
            raise ValueError(f"the sweep has more than {MAX_CONFIGS} configurations")
        return self


def expand(args: SweepArgs) -> list[dict[str, Any]]:
    """The flag sets to run, each merged onto the base flags (baseline not included)."""
    sets: list[dict[str, Any]]
    if args.matrix is not None:
        names = list(args.matrix)
        sets = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(args.matrix[n] for n in names))]
    else:
        sets = [dict(c) for c in args.configs or []]
    return [{**args.flags, **s} for s in sets]


async def start_bench_stop(args: SweepArgs | Any, ctx: ActionContext, adapter: Any, spec: Any, client_python: str,
                           auto: bool, *, name: str) -> tuple[Any, dict[str, Any]]:
    """One configuration measured, as `sweep` and `tune` do it: start the server with ``spec``, run ``args.bench``
    against it, stop it whatever happened. :raises StepFailed: the bench; :raises OrchestratorError: the start."""
    record = await _start(args, ctx, adapter, spec, client_python, auto, name=name)
    try:
        return record, await run_bench(record.client, record.url, args.bench)
    finally:
        await ctx.services.servers.stop(name)


async def _start(args: Any, ctx: ActionContext, adapter: Any, spec: Any, client_python: str, auto: bool, *,
                 name: str) -> Any:
    manager = ctx.services.servers
    return await manager.start(
        name=name, host=ctx.host, transport=ctx.require_transport(), adapter=adapter, spec=spec,
        client_python=client_python, ready_timeout=args.ready_timeout, grace=args.grace, step_id=ctx.step_id,
        on_log=manager.log_forwarder(ctx.step_id, ctx.host), auto_port=auto, preflight=args.preflight)


async def start_bench_each(args: Any, ctx: ActionContext, adapter: Any, spec: Any, client_python: str, auto: bool,
                           *, name: str, concurrencies: list[int], warm_up: bool = False) -> dict[int, dict[str, Any]]:
    """``start_bench_stop`` with one benchmark per concurrency against the one server start (the tuner's concurrency
    profile; SGLang's bench_speculative.py loops its batch sizes inside each server the same way), in the order
    given. ``warm_up``: first one untimed batch of ``c`` short requests at each concurrency ``c`` (a fresh server's
    first batch of a shape pays one-time costs: the CPU backend's kernels for it, the engine's first cycles), its
    wall time kept in the result as ``warm_up_s``. :raises StepFailed: a bench; :raises OrchestratorError: the
    start."""
    record = await _start(args, ctx, adapter, spec, client_python, auto, name=name)
    try:
        results = {}
        for c in concurrencies:
            warm = None
            if warm_up:
                warm = await run_bench(record.client, record.url, args.bench.model_copy(update={
                    "concurrency": c, "n": c, "max_new_tokens": min(16, args.bench.max_new_tokens), "traffic": None}))
            result = await run_bench(record.client, record.url, args.bench.model_copy(update={"concurrency": c}))
            results[c] = {**result, **({"warm_up_s": warm.get("wall_s")} if warm is not None else {})}
        return results
    finally:
        await ctx.services.servers.stop(name)


def label_for(varied: dict[str, Any]) -> str:
    short = {"speculative-num-steps": "steps", "speculative-eagle-topk": "topk",
             "speculative-num-draft-tokens": "draft", "speculative-algorithm": "algo"}
    parts = [f"{short.get(k.replace('_', '-'), k.replace('speculative-', ''))}={v}" for k, v in varied.items()]
    return " ".join(parts) or "base flags"


class SweepAction(Action[SweepArgs]):
    kind = "sweep"
    Args = SweepArgs
    summary = "Start->bench->stop per flag set (matrix or list) plus a no-spec baseline; table + SVG chart saved."

    async def run(self, args: SweepArgs, ctx: ActionContext) -> dict[str, Any]:
        try:
            adapter, base_spec, client_python, auto = launch_parts(args, ctx)
        except OrchestratorError as exc:
            raise StepFailed(exc.message) from None
        plans: list[tuple[str, dict[str, Any], bool]] = []
        if args.baseline:
            plans.append(("baseline (no spec)", adapter.baseline_flags(args.flags), True))
        for flags in expand(args):
            varied = {k: v for k, v in flags.items() if args.flags.get(k, object()) != v}
            plans.append((label_for(varied), flags, False))
        rows: list[dict[str, Any]] = []
        for index, (label, flags, is_baseline) in enumerate(plans):
            rows.append(await self._one(args, ctx, adapter, base_spec, client_python, auto,
                                        index, label, flags, is_baseline))
            if args.stop_on_error and rows[-1]["status"] == "failed":
                break
        return self._finish(args, ctx, rows)

    async def _one(self, args: SweepArgs, ctx: ActionContext, adapter: Any, base_spec: Any,
                   client_python: str, auto: bool, index: int, label: str, flags: dict[str, Any],
                   is_baseline: bool) -> dict[str, Any]:
        from dataclasses import replace

        row: dict[str, Any] = {"label": label, "flags": flags, "baseline": is_baseline, "status": "ok"}
        reason = None if is_baseline else adapter.invalid_reason(flags)
        if reason:
            ctx.output(f"sweep [{label}]: skipped ({reason})\n")
            return {**row, "status": "skipped", "reason": reason}
        ctx.output(f"sweep [{label}]: starting\n")
        try:
            record, result = await start_bench_stop(args, ctx, adapter, replace(base_spec, flags=dict(flags)),
                                                    client_python, auto, name=f"sweep-{ctx.step_id}-{index}")
        except StepFailed as exc:
            return {**row, "status": "failed", "reason": exc.message}
        except OrchestratorError as exc:
            failure = (getattr(exc, "result", None) or {}).get("failure") or {}
            return {**row, "status": "failed", "reason": exc.message.splitlines()[0], "cause": failure.get("cause"),
                    "log_tail": getattr(exc, "result", {}).get("log_tail")}
        keys = ("tok_s", "tok_s_ci", "accept_length", "accept_length_ci", "server_accept_length", "latency_p50",
                "latency_p99", "ttft_p50", "verify_ct", "completed", "completion_tokens")
        row.update({k: result.get(k) for k in keys})
        row["overrides"] = record.diff.get("overrides", [])
        row["port"] = record.spec.port
        ctx.output(f"sweep [{label}]: {row['tok_s']} tok/s, accept length {row['accept_length']}\n")
        return row

    def _finish(self, args: SweepArgs, ctx: ActionContext, rows: list[dict[str, Any]]) -> dict[str, Any]:
        from orchestrator.servers.sweep_report import markdown_table, write_artifacts

        base = next((r for r in rows if r["baseline"] and r["status"] == "ok"), None)
        for row in rows:
            if base and row.get("tok_s") and base.get("tok_s"):
                row["speedup"] = round(row["tok_s"] / base["tok_s"], 3)
        candidates = [r for r in rows if r["status"] == "ok" and not r["baseline"] and r.get("tok_s")]
        best = max(candidates, key=lambda r: r["tok_s"]) if candidates else None
        if best is not None:
            best["best"] = True
        summary = {
            "best": {k: best.get(k) for k in ("label", "flags", "tok_s", "speedup", "accept_length")} if best else None,
            "baseline": {k: base.get(k) for k in ("tok_s", "latency_p50")} if base else None,
            "counts": {s: sum(1 for r in rows if r["status"] == s) for s in ("ok", "skipped", "failed")},
        }
        table = markdown_table(rows)
        artifacts: list[str] = []
        if ctx.session_dir is not None:
            stem = f"{ctx.step_id}-{ctx.host}-sweep".replace("/", "_")
            title = f"sweep {ctx.step_name} on {ctx.host}"
            paths = write_artifacts(ctx.session_dir / "artifacts", stem, rows, summary, title=title)
            for kind, path in paths.items():
                rel = str(path.relative_to(ctx.session_dir))
                artifacts.append(rel)
                if ctx.emit is not None:
                    from orchestrator.events import ArtifactSaved

                    ctx.emit(ArtifactSaved(path=rel, kind=f"sweep_{kind}", step_id=ctx.step_id,
                                           description=f"sweep results ({kind})"))
        ctx.output(table + "\n")
        if best is not None:
            ctx.output(f"best: {best['label']} — {best['tok_s']} tok/s"
                       + (f" ({best.get('speedup')}x baseline)" if best.get("speedup") else "") + "\n")
        result = {**summary, "rows": rows, "table": table, "artifacts": artifacts}
        if not any(r["status"] == "ok" for r in rows):
            raise StepFailed("sweep: no configuration produced a result", result)
        return result
