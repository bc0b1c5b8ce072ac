"""The MCP server: ``McpConnection``'s methods as tools (typed inputs; pydantic outputs give the output
schemas), the session's report, events and the playbook schema as resources, served over stdio with the
official SDK. ``serve`` owns the connection's life: the session opens before the first request and is closed
(servers stopped, report written) however the connection ends: EOF on stdin, SIGTERM, SIGINT or SIGHUP.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, TypeVar

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from orchestrator import __version__
from orchestrator.errors import OrchestratorError
from orchestrator.events import HYPOTHESIS_STATES
from orchestrator.mcp import models
from orchestrator.mcp.connection import McpConnection, McpSettings

T = TypeVar("T")

Host = Annotated[str | None, Field(description="inventory host or group (default: the session's host)")]
Timeout = Annotated[float | None, Field(default=None, gt=0, le=86400,
                                        description="seconds before the step is stopped and recorded as timeout")]
State = Literal["open", "supported", "confirmed", "refuted", "inconclusive"]
assert set(State.__args__) <= set(HYPOTHESIS_STATES)  # type: ignore[attr-defined]  # the board's own states

INSTRUCTIONS = """\
Tools for debugging EAGLE-3 speculative decoding on SGLang servers. Every call is recorded in a session
(author: mcp) that a person can replay (`orchestrator tui --replay`) and read as a report. Typical order:
read the server's source (read_source), start servers with candidate flags and compare requested vs effective
flags (server_start), inspect the draft (probe draft_inspect), run the standalone draft test (draft_test), then
record verdicts on the hypotheses (hypotheses_list, hypothesis_verdict) and notes. exec runs read-only commands
unless the user allowed more. Servers you start are stopped when the connection ends."""


async def _tool(session: McpConnection, work: Awaitable[T]) -> T:
    """A user's (or assistant's) mistake becomes a tool error with the message, never a traceback."""
    try:
        return await work
    except OrchestratorError as exc:
        raise ToolError(session.redact(exc.message)) from None


def _call(session: McpConnection, work: Callable[[], T]) -> T:
    """The same for the tools that do not wait (board, notes, report): called inside the guard."""
    try:
        return work()
    except OrchestratorError as exc:
        raise ToolError(session.redact(exc.message)) from None


def build_server(session: McpConnection) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("orchestrator", version=__version__, instructions=INSTRUCTIONS)

    @server.tool(description="Read installed source on the host (e.g. SGLang's eagle_worker.py): by sed address "
                 "('155,200', '/regex/'), symbol ('EAGLEWorker.__init__') or pattern; shows the installed version.")
    async def read_source(
        package: Annotated[str, Field(description="installed package, e.g. sglang")] = "sglang",
        file: Annotated[str | None, Field(description="file relative to the package, e.g. srt/speculative/eagle_worker.py")] = None,
        address: Annotated[str | None, Field(description="sed-style: '155,200', '155,+45' or '/regex/'")] = None,
        symbol: Annotated[str | None, Field(description="class or function, e.g. EagleDraftWorker.init_lm_head")] = None,
        pattern: Annotated[str | None, Field(description="regex, grep-style")] = None,
        context: Annotated[int | None, Field(ge=0, le=200, description="lines around each pattern match")] = None,
        host: Host = None, timeout: Timeout = None,
    ) -> models.ReadSourceResult:
        return await _tool(session, session.read_source(package=package, file=file, address=address, symbol=symbol,
                                                        pattern=pattern, context=context, host=host, timeout=timeout))

    @server.tool(name="exec", description="Run a command on the host: `command` through bash -c, or `argv` with no "
                 "shell. Only what the inventory's exec policy allows (read-only commands by default).")
    async def exec_(
        command: Annotated[str | None, Field(description="shell command line")] = None,
        argv: Annotated[list[str] | None, Field(description="program and arguments, no shell")] = None,
        host: Host = None, timeout: Timeout = None,
    ) -> models.ExecResult:
        return await _tool(session, session.exec(command=command, argv=argv, host=host, timeout=timeout))

    @server.tool(description="Run a probe on the host: env_info (python, torch, GPUs, sglang), draft_inspect "
                 "(static checks of an EAGLE-3 draft checkpoint: d2t, lm_head, layer ids, architecture, rope) or "
                 "target_capture (which class of the installed engine runs the target, through registry, bases and "
                 "language_model delegation, and the capture method and default layer ids of that class).")
    async def probe(
        name: Literal["env_info", "draft_inspect", "target_capture"],
        path: Annotated[str | None, Field(description="draft_inspect: the draft directory (default: host var draft)")] = None,
        target_path: Annotated[str | None, Field(description="draft_inspect, target_capture: the target model "
                                                        "directory (default for target_capture: host var target)")] = None,
        host: Host = None, timeout: Timeout = None,
    ) -> models.StepOutcome:
        return await _tool(session, session.probe(name=name, path=path, target_path=target_path, host=host,
                                                  timeout=timeout))

    @server.tool(description="Start an inference server with these flags (names without dashes, e.g. "
                 "speculative-num-steps: 1); returns the effective flags and the ones the server overrode.")
    async def server_start(
        name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")] = "server",
        flags: Annotated[dict[str, Any] | None, Field(description="server flags")] = None,
        engine: Annotated[str | None, Field(description="sglang | lab (default: the host's)")] = None,
        model: Annotated[str | None, Field(description="--model-path (default: host var target)")] = None,
        port: Annotated[int | None, Field(ge=1, le=65535, description="default: a free port")] = None,
        ready_timeout: Annotated[float | None, Field(gt=0, le=86400)] = None,
        preflight: Annotated[bool, Field(description="check the flags with SGLang's own parser first")] = True,
        capture: Annotated[list[Annotated[int, Field(ge=0)]] | None, Field(
            description="vLLM, SGLang: also return these layers' hidden states (a capture server for "
                        "draft_test's states_from: targets too large for the test's process)")] = None,
        host: Host = None,
    ) -> models.ServerResult:
        return await _tool(session, session.server_start(name=name, flags=flags or {}, engine=engine, model=model,
                                                         port=port, ready_timeout=ready_timeout, preflight=preflight,
                                                         capture=capture, host=host))

    @server.tool(description="Stop a server this session started.")
    async def server_stop(name: str = "server", host: Host = None, timeout: Timeout = None) -> models.StepOutcome:
        return await _tool(session, session.server_stop(name=name, host=host, timeout=timeout))

    @server.tool(description="Benchmark a server this session started: tok/s and accept length with 95% intervals. "
                 "With traffic (a JSONL of the user's own chat/completion requests, each with an optional category): "
                 "each request replayed as written, and acceptance per category and per sampling setting in the "
                 "result's `traffic` (no prompt text).")
    async def server_bench(
        server: Annotated[str, Field(description="the server's name")] = "server",
        n: Annotated[int, Field(ge=1, le=100000, description="prompts")] = 8,
        max_new_tokens: Annotated[int, Field(ge=1, le=100000)] = 64,
        concurrency: Annotated[int, Field(ge=1, le=1024)] = 1,
        traffic: Annotated[str | None, Field(description="a traffic file (JSONL) on the orchestrator's machine")] = None,
        traffic_sample: Annotated[int | None, Field(ge=1, description="replay this many of its requests")] = None,
        host: Host = None, timeout: Timeout = None,
    ) -> models.StepOutcome:
        return await _tool(session, session.server_bench(server=server, n=n, max_new_tokens=max_new_tokens,
                                                         concurrency=concurrency, host=host, timeout=timeout,
                                                         traffic=traffic, traffic_sample=traffic_sample))

    @server.tool(description="Standalone draft test: scores the draft offline on candidate hidden-state wirings "
                 "against the one the server feeds; decision mismatch | fine | inconclusive.")
    async def draft_test(
        target: Annotated[str | None, Field(description="target model directory (default: host var target)")] = None,
        draft: Annotated[str | None, Field(description="draft directory (default: host var draft)")] = None,
        wirings: Annotated[Literal["auto"] | list[list[int]], Field(description="auto, or layer-id lists")] = "auto",
        engine: Literal["sglang", "vllm"] = "sglang",
        steps: Annotated[int, Field(ge=1, le=32, description="draft steps per cycle")] = 5,
        num_prompts: Annotated[int | None, Field(ge=1, le=10000)] = None,
        max_new_tokens: Annotated[int | None, Field(ge=2, le=100000)] = None,
        margin: Annotated[float, Field(gt=0, lt=10, description="smallest gain called a fault")] = 0.2,
        states_from: Annotated[dict[str, Any] | None, Field(
            description="a capture server's states_from (server_start with capture): the target's hidden states "
                        "from the engine instead of loading the target")] = None,
        host: Host = None, timeout: Timeout = None,
    ) -> models.DraftTestResult:
        return await _tool(session, session.draft_test(target=target, draft=draft, wirings=wirings, engine=engine,
                                                       steps=steps, num_prompts=num_prompts,
                                                       max_new_tokens=max_new_tokens, margin=margin,
                                                       states_from=states_from, host=host, timeout=timeout))

    @server.tool(description="The hypothesis board: every hypothesis, its state and its latest evidence.")
    async def hypotheses_list() -> models.Hypotheses:
        return _call(session, session.hypotheses)

    @server.tool(description="Record a verdict on a hypothesis, with the observation that decides it.")
    async def hypothesis_verdict(
        hypothesis_id: str, state: State,
        because: Annotated[str, Field(min_length=1, description="the observation that decides it")],
    ) -> models.Verdict:
        return _call(session, lambda: session.verdict(hypothesis_id, state, because))

    @server.tool(description="Add a note to the session (optionally about a hypothesis or a step).")
    async def note(text: Annotated[str, Field(min_length=1)], hypothesis_id: str | None = None,
                   step_id: str | None = None) -> models.Note:
        return _call(session, lambda: session.note(text, hypothesis_id, step_id))

    @server.tool(description="Run the session playbook's steps (once), with progress notifications per step.")
    async def run_playbook(ctx: Context, timeout: Timeout = None) -> models.PlaybookRun:
        async def on_step(done: int, total: int, message: str) -> None:
            await ctx.report_progress(done, total, message)

        return await _tool(session, session.run_playbook(on_step, timeout))

    @server.tool(description="Write the session's report (Markdown and HTML) now and return the Markdown.")
    async def report() -> models.Report:
        return _call(session, session.report)

    @server.resource("orchestrator://session/report", name="report", mime_type="text/markdown",
                     description="The session's postmortem report, rendered from the log so far.")
    def report_resource() -> str:
        from orchestrator.session.report import render_report

        return session.redact(render_report(session.directory))

    @server.resource("orchestrator://session/events", name="events", mime_type="application/x-ndjson",
                     description="The session's event log (JSON lines, secrets already masked).")
    def events_resource() -> str:
        return session.events_text()

    @server.resource("orchestrator://playbook/schema", name="playbook-schema", mime_type="application/schema+json",
                     description="The JSON Schema of playbooks.")
    def schema_resource() -> str:
        from orchestrator.playbook.schema import playbook_schema

        return json.dumps(playbook_schema(), indent=1)

    return server


async def serve(settings: McpSettings) -> McpConnection:
    """Serve one MCP connection over stdio; returns the closed session (its directory, its reports)."""
    session = McpConnection(settings)
    await session.start()
    server = build_server(session)
    scope = anyio.CancelScope()
    loop = asyncio.get_running_loop()
    stop_signals = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    for sig in stop_signals:
        # A client that gives up on us sends SIGTERM (the SDK's client: 2 s after closing stdin): stop serving,
        # but still stop the servers and close the log below, instead of dying with them running.
        loop.add_signal_handler(sig, scope.cancel)
    try:
        with scope:
            await server.run_stdio_async()
    finally:
        for sig in stop_signals:
            loop.add_signal_handler(sig, lambda: None)  # the close below must not be interrupted half-way
        with anyio.CancelScope(shield=True):
            await session.close()
        for sig in stop_signals:
            loop.remove_signal_handler(sig)
    return session
