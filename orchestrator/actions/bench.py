"""`bench`: benchmark a running server with a prompt set (measured on the server's host, next to it).

```yaml
- bench: {server: spec, n: 8, concurrency: 1, max_new_tokens: 64, stream: false}
  register: b   # b.tok_s, b.latency_p50, b.latency_p99, b.ttft_p50 (stream), b.accept_length,
                # b.server_accept_length, b.verify_ct, b.completed, b.errors, b.per_request
- bench: {url: "http://127.0.0.1:30000", prompts: my_prompts.json}   # a server started elsewhere
- bench: {url: "http://127.0.0.1:30000", api_key: "{{ api_key }}"}   # ... with --api-key (a secret var)
- bench: {server: spec, n: 12, ladder: 3, ladder_tokens: 32}   # then 3 prompts growing to the serving context:
  register: b                   # b.ladder (context, context_from, per_request, ...), apart from the figures above
```
A server this session started with ``api-key`` among its flags gets its key sent without ``api_key:``.
A server that wants a key and got none (or a wrong one) fails the step with
"401: the server wants an API key (api-key) ...".
Spread: ``accept_length_ci`` / ``tok_s_ci`` are 95% intervals with the request as the unit (t interval of the
per-request accept lengths; the wall-clock tok/s with the relative spread of per-request throughput), and
``accept_length_sd`` / ``tok_s_sd`` the per-request standard deviations; ``completed`` is n. With fewer than two
requests the intervals are None. Temperature 0 by default; ``/flush_cache`` first (it also resets SGLang's spec counters). ``accept_length`` is
the mean of per-request ``meta_info.spec_accept_length``; ``server_accept_length`` the ``/server_info`` average.
vLLM (``/v1/completions``, no per-request stats): ``spec_decode`` holds the change of its ``/metrics`` counters across
the run (drafts, draft_tokens, accepted_tokens, accept_length = 1 + accepted/drafts, acceptance_rate, per_position),
``server_accept_length`` its accept_length, and at concurrency 1 each request's accept length is the counters' change
around it (servers/vllm.py).
``prompts``: the bundled set (orchestrator/data/bench_prompts.json) or a JSON file on this machine holding a list
of strings or ``{prompts: [{text: ...}]}``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from orchestrator.actions.base import Action, ActionArgs, ActionContext, StepFailed
from orchestrator.actions.bench_ladder import ladder_line, run_ladder
from orchestrator.errors import OrchestratorError
from orchestrator.probes.invoke import settle_warm_ups
from orchestrator.servers.prompts import (
    BUNDLED_PROMPTS as BUNDLED_PROMPTS,  # re-exported: tests and bench/ use it
)
from orchestrator.servers.prompts import load_prompts as load_prompts
from orchestrator.traffic.acceptance import acceptance_line, traffic_acceptance
from orchestrator.traffic.requests import TrafficRequest, load_traffic


class BenchSettings(ActionArgs):
    """The knobs `bench` and `sweep` share."""

    n: int = Field(default=8, ge=1, le=100000)
    concurrency: int = Field(default=1, ge=1, le=1024)
    max_new_tokens: int = Field(default=64, ge=1)
    temperature: float = Field(default=0.0, ge=0)
    stream: bool = Field(default=False, description="stream responses to measure TTFT")
    ignore_eos: bool = False
    flush: bool = Field(default=True, description="POST /flush_cache before the run")
    prompts: str | None = Field(default=None, description="JSON prompt file (default: the bundled set)")
    traffic: str | None = Field(default=None, description="a JSONL of the user's own requests (OpenAI chat or "
                                "completion bodies, batch-API lines or log records, each with an optional category), "
                                "replayed once each as written instead of prompts: acceptance per category and per "
                                "sampling setting (orchestrator/traffic/)")
    traffic_sample: int | None = Field(default=None, ge=1, description="replay this many requests of the file, "
                                       "drawn once with a fixed seed (the same sample every run)")
    request_timeout: float = Field(default=600.0, gt=0)


class BenchArgs(BenchSettings):
    server: str | None = Field(default=None, description="name of a server started in this session")
    url: str | None = Field(default=None, description="or the URL of a server reachable from the host")
    api_key: str | None = Field(default=None, description="the server's --api-key (use a secret var); a server "
                                "started in this session with api-key in its flags needs none")
    ladder: int = Field(default=0, ge=0, le=16, description="then this many prompts growing towards the serving "
                        "context, reported apart as b.ladder (acceptance by prompt length: bench_ladder.py); a server "
                        "started in this session only")
    ladder_tokens: int | None = Field(default=None, ge=1, description="new tokens per ladder prompt (default: "
                                      "max_new_tokens)")

    @classmethod
    def secret_values(cls, args: Any) -> list[str]:
        from orchestrator.actions.server import server_keys

        return server_keys(args)

    @model_validator(mode="after")
    def _one_target(self) -> BenchArgs:
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError("url must start with http:// or https://")
        if self.traffic and self.ladder:
            raise ValueError("a traffic replay has no context ladder: give ladder: 0 with traffic")
        if self.traffic and self.prompts:
            raise ValueError("give prompts or traffic, not both")
        return self


def with_intervals(result: dict[str, Any], distinct: int | None = None, confidence: float = 0.95) -> dict[str, Any]:
    """Add per-request spread and intervals (see the module doc) to a bench result."""
    import statistics

    from remote_probes.evaluation.interval_stats import mean_interval, ratio_interval

    rows = result.get("per_request") or []
    accepts = [float(r["accept_length"]) for r in rows if r.get("accept_length") is not None]
    # The unit is the prompt: with more requests than prompts, greedy repeats of one prompt are not new evidence,
    # so repeats are averaged per prompt (request i used prompt i % distinct) before the interval.
    units = accepts
    if distinct and len(accepts) == len(rows) == result.get("n") and len(accepts) > distinct:
        units = [statistics.mean(accepts[i::distinct]) for i in range(distinct)]
    acc = mean_interval(units, confidence, low=1.0) if units else None  # an accept length is at least 1
    timed = [r for r in rows if r.get("latency")]
    rate = ratio_interval([r["completion_tokens"] for r in timed], [r["latency"] for r in timed], confidence)
    tok_s = result.get("tok_s")
    tok_ci = None
    if rate is not None and rate.decided and rate.estimate > 0 and tok_s:
        tok_ci = [round(tok_s * rate.lo / rate.estimate, 2), round(tok_s * rate.hi / rate.estimate, 2)]
    rates = [r["completion_tokens"] / r["latency"] for r in timed]
    return {**result, "confidence": confidence,
            "accept_length_ci": acc.as_list() if acc is not None else None,
            "accept_length_sd": round(statistics.stdev(accepts), 4) if len(accepts) > 1 else None,
            "accept_length_n": len(units),
            "tok_s_ci": tok_ci, "tok_s_sd": round(statistics.stdev(rates), 2) if len(rates) > 1 else None}


async def run_bench(client: Any, url: str, settings: BenchSettings) -> dict[str, Any]:
    """One benchmark through a ServerClient; :raises StepFailed: when no request succeeded."""
    traffic = load_traffic(settings.traffic, sample=settings.traffic_sample) if settings.traffic else None
    prompts = [] if traffic else load_prompts(settings.prompts)
    unsettled = await settle_warm_ups(client.transport)  # the session's warm-up imports end before it measures
    n = len(traffic) if traffic else settings.n
    payload = {
        "url": url.rstrip("/"), "prompts": prompts, "n": n,
        "concurrency": settings.concurrency, "max_new_tokens": settings.max_new_tokens,
        "temperature": settings.temperature, "stream": settings.stream, "ignore_eos": settings.ignore_eos,
        "flush": settings.flush, "timeout": settings.request_timeout,
    }
    if traffic:
        payload["traffic"] = [{"path": r.path, "body": r.sent(None, settings.max_new_tokens)} for r in traffic]
    result = await client.call("bench", payload, timeout=settings.request_timeout * n + 120)
    if not result["completed"]:
        errors = "; ".join(result["errors"][:3]) or "no answer"
        raise StepFailed(f"bench: no request succeeded against {url}: {errors}", result)
    if unsettled:
        result = {**result, "measured_during_warm_up": unsettled}
    if traffic:
        return with_traffic(with_intervals(result), traffic, settings)
    return with_intervals(result, len(prompts))


def with_traffic(result: dict[str, Any], traffic: list[TrafficRequest], settings: BenchSettings) -> dict[str, Any]:
    """Each request's row named by its category and sampling setting (never its text), and acceptance per
    category and per setting with intervals (orchestrator/traffic/acceptance.py)."""
    rows = []
    for row in result.get("per_request") or []:
        index = row.get("index")
        request = traffic[index] if isinstance(index, int) and 0 <= index < len(traffic) else None
        rows.append({**row, **(request.public() if request is not None else {})})
    failed = []
    for miss in result.get("failed") or []:
        index = miss.get("index")
        if isinstance(index, int) and 0 <= index < len(traffic):
            failed.append({**traffic[index].public(), "error": str(miss.get("error"))})
    table: dict[str, Any] = dict(traffic_acceptance(rows, failed))
    if not any(r.get("accept_length") is not None for r in rows):
        table["unmeasured"] = ("the server gave no per-request accept length" +
                               (" (vLLM's are read at concurrency 1 only)" if settings.concurrency > 1 else ""))
    return {**result, "per_request": rows, "traffic": {"file": str(settings.traffic), "requests": len(traffic),
                                                        "sample": settings.traffic_sample, **table}}


async def _log_size(record: Any) -> int | None:
    """How long the server's log is before the benchmark: its own error is what it writes after."""
    if record.handle is None:
        return None
    run = await record.transport.run(["wc", "-c", record.handle.log_path], timeout=30)
    words = run.stdout.split()
    return int(words[0]) if run.exit_code == 0 and words and words[0].isdigit() else None


async def server_error(record: Any, offset: int | None) -> dict[str, Any] | None:
    """The error the server logged during the benchmark (servers/startlog.py ``analyse_runtime_error``): the server
    keeps its log while it serves, and a request that got HTTP 500 left its traceback there."""
    from orchestrator.servers.startlog import analyse_runtime_error

    if record is None or record.handle is None:
        return None
    if offset is not None:
        run = await record.transport.run(["tail", "-c", f"+{offset + 1}", record.handle.log_path], timeout=60)
        text = run.stdout if run.exit_code == 0 else ""
    else:
        text = await record.transport.read_file_tail(record.handle.log_path, lines=400)
    found = analyse_runtime_error(text[-400_000:])
    return {**found.as_dict(), "log_path": record.handle.log_path} if found else None


def _ci(ci: list[float] | None) -> str:
    return f"[95% CI {ci[0]:g}-{ci[1]:g}]" if ci else "[no interval: n < 2]"


class BenchAction(Action[BenchArgs]):
    kind = "bench"
    Args = BenchArgs
    summary = "Benchmark a server: tok/s, latency p50/p99, TTFT, accept length (per request and server-side)."

    async def run(self, args: BenchArgs, ctx: ActionContext) -> dict[str, Any]:
        from orchestrator.servers.client import ServerClient
        record = None
        offset: int | None = None
        try:
            if args.url:
                python = ctx.host_spec.python if ctx.host_spec is not None else "python3"
                client = ServerClient(ctx.require_transport(), python, api_key=args.api_key)
                url, label = args.url, args.url
            else:
                manager = ctx.services.servers
                name = args.server or ("server" if "server" in manager.servers else next(iter(manager.servers), ""))
                record = manager.get(name)
                if record.status != "ready":
                    raise StepFailed(f"bench: server {name!r} is {record.status}, not ready")
                client, url, label = record.client, record.url, name
                if args.api_key is not None:  # an explicit key (even "") wins over the launch flags' one
                    client = ServerClient(client.transport, client.python, client.adapter, api_key=args.api_key,
                                          admin_api_key=client.admin_api_key)
            offset = await _log_size(record) if record is not None else None
            try:
                result = await run_bench(client, url, args)
            except StepFailed as exc:
                said = await server_error(record, offset)
                if said is None:
                    raise
                failed = {**(exc.result or {}), "server_error": said}
                raise StepFailed(f"{exc.message}\nthe server's own error: {said['summary']}\n"
                                 + "\n".join(f"  {line}" for line in said["error_lines"]), failed) from None
        except OrchestratorError as exc:
            raise StepFailed(exc.message) from None
        if result.get("errors") and record is not None:  # some requests failed: the server says why
            said = await server_error(record, offset)
            if said is not None:
                # The server itself errored during the run (a dead EngineCore, a killed Worker): the figures of
                # the requests before it are no measurement of the configuration, so the step fails with the
                # server's own error; its partial result stays in the failure for a rule to read.
                result = {**result, "server_error": said, "server": label, "url": url}
                raise StepFailed(f"bench {label}: {len(result['errors'])} of {result['n']} request(s) failed "
                                 f"({result['errors'][0]}); the server's own error: {said['summary']}\n"
                                 + "\n".join(f"  {line}" for line in said["error_lines"]), result)
        if args.ladder and record is not None:
            result["ladder"] = await run_ladder(client, url, record, args, load_prompts(args.prompts), result,
                                                args.ladder)
        ctx.output(f"bench {label}: n={result['completed']} {result['tok_s']} tok/s {_ci(result['tok_s_ci'])}, "
                   f"accept length {result['accept_length']} {_ci(result['accept_length_ci'])} "
                   f"(server {result['server_accept_length']}), p50 {result['latency_p50']}s\n")
        if result.get("measured_during_warm_up"):
            ctx.output(f"bench {label}: measured while a warm-up may still import: "
                       f"{result['measured_during_warm_up']}\n")
        if result.get("ladder"):
            ctx.output(ladder_line(label, result["ladder"]))
        if result.get("traffic"):
            table = result["traffic"]
            if table.get("unmeasured"):
                ctx.output(f"bench {label}: traffic of {table['requests']} request(s): no acceptance by category: "
                           f"{table['unmeasured']}\n")
            else:
                ctx.output(acceptance_line(label, table, "category"))
                if len(table["by_sampling"]) > 1:
                    ctx.output(acceptance_line(label, table, "sampling"))
        stats = result.get("spec_decode") or {}
        if stats.get("per_position_request"):
            ctx.output("per-position acceptance: " + ", ".join(
                f"k={k} {rate} {_ci(ci)}" for k, (rate, ci) in
                enumerate(zip(stats["per_position_request"], stats["per_position_ci"], strict=False))) + "\n")
        return {**result, "server": label, "url": url}
