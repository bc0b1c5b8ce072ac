"""One MCP connection = one recorded session: its controller, and what each tool does.

The session's playbook (``--playbook``, default the flagship) gives the hypotheses, vars and hosts; its steps
wait at the gate until ``run_playbook`` lets them through, so an assistant that only pokes around leaves no
trace of them. Every tool call is an ad-hoc step (or note, or verdict) through ``AdhocActions`` with author
``mcp``. Nothing here imports the SDK: ``tools`` binds these methods to MCP tools.

Safety, in one place: every result goes through the session's redactor (``clean``) before the assistant sees
it; ``exec`` asks the inventory's exec policy first; every step gets a timeout; ``close`` stops the servers
the session started (the session's finalizers) whatever way the connection ended.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from orchestrator.errors import UserInputError
from orchestrator.events import Event, StepFinished
from orchestrator.inventory import Inventory
from orchestrator.mcp import models
from orchestrator.playbook.models import Playbook
from orchestrator.probes.models import ceiling_line, states_source_line
from orchestrator.session.answer import account_of
from orchestrator.session.reader import read_session
from orchestrator.session.recording import ReportsWritten, open_session, write_reports
from orchestrator.verdicts.flagship.account import SymptomAccount

AUTHOR = "mcp"
M = TypeVar("M", bound=BaseModel)

# Seconds a tool's step may take unless the call says otherwise (the runner records a step past it as
# "timeout"): reads and commands are quick; a draft test runs the target model over every prompt.
DEFAULT_TIMEOUTS: dict[str, float] = {
    "read_source": 120, "exec": 120, "probe": 600, "server_stop": 180, "server_bench": 3600, "draft_test": 3600,
}
SERVER_START_MARGIN = 120.0  # beyond the ready timeout: the pre-flight check, the launch, the effective-flags read
DEFAULT_READY_TIMEOUT = 600.0
CLOSE_TIMEOUT = 120.0  # stopping the servers and closing the log when the connection ends


@dataclass
class McpSettings:
    inventory: Inventory
    playbook: Playbook
    sessions_dir: Path | None = None
    extra_vars: dict[str, Any] = field(default_factory=dict)
    allow_exec: bool = False  # commands beyond the policy's allow list (never its deny list)
    argv: list[str] = field(default_factory=list)


class ProgressSink:
    """An event sink that hands step_finished events to whoever listens (``run_playbook``'s progress)."""

    def __init__(self) -> None:
        self.listener: Callable[[StepFinished], None] | None = None

    def handle(self, event: Event) -> None:
        if isinstance(event, StepFinished) and self.listener is not None:
            self.listener(event)

    def close(self) -> None:
        self.listener = None


def _validation_message(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())


class McpConnection:
    """The live session behind one MCP connection. ``start()`` once, tools, then ``close()`` once."""

    def __init__(self, settings: McpSettings) -> None:
        self.settings = settings
        self.progress = ProgressSink()
        session = open_session(settings.playbook, settings.inventory, sinks=[self.progress],
                               sessions_dir=settings.sessions_dir, extra_vars=settings.extra_vars, argv=settings.argv)
        self.directory = session.directory
        self.controller = session.controller(start_mode="paused", author=AUTHOR)
        self.view = self.controller.view  # what the tools read: hosts, vars, the board, the redactor
        self.actions = self.controller.adhoc
        self._task: asyncio.Task[Any] | None = None
        self._playbook_started = False
        self._playbook_running = False
        self.reports: ReportsWritten | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Open the session: session_started is logged; the playbook's steps wait at the gate."""
        changed = asyncio.Event()
        self.controller.set_listener(changed.set)  # called when the gate holds a step or the session holds
        self._task = asyncio.ensure_future(self.controller.start())
        self._task.add_done_callback(lambda _: changed.set())
        while not (self.controller.gate.waiting or self.controller.hold.holding or self._task.done()):
            changed.clear()
            await changed.wait()
        if self._task.done():
            self._task.result()  # a session that could not even start: say why

    async def close(self) -> ReportsWritten:
        """End the session: servers stopped, log closed, reports written. Safe to call twice."""
        if self.reports is not None:
            return self.reports
        if self._task is not None:
            if self._playbook_running:
                self.controller.finish()  # the playbook is mid-step: cancel it (``always:`` still runs)
            else:
                self.controller.close()
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout=CLOSE_TIMEOUT)
            except asyncio.TimeoutError:
                self.controller.cancel()
                self.controller.cancel()  # twice: skip ``always:``, finalizers stop the servers bounded
                await asyncio.wait_for(asyncio.shield(self._task), timeout=CLOSE_TIMEOUT)
        self.reports = write_reports(self.directory, say=self.view.problems.say)
        return self.reports

    # -- helpers --------------------------------------------------------------------------------
    def clean(self, model: M) -> M:
        """The model with every known secret masked: what the assistant may see."""
        return type(model).model_validate(self.view.redactor.deep(model.model_dump(mode="json")))

    def redact(self, text: str) -> str:
        return self.view.redactor.text(text)

    def hosts(self, host: str | None) -> list[str]:
        """The hosts a tool call targets (the session's by default). Raises UserInputError if unknown."""
        return self.view.inventory.resolve(host or self.view.playbook.hosts)

    def _host_var(self, host: str | None, name: str) -> Any:
        return self.view.host_vars(self.hosts(host)[0]).get(name)

    @staticmethod
    def _timeout(given: float | None, tool: str) -> float:
        return float(given) if given is not None else DEFAULT_TIMEOUTS[tool]

    @staticmethod
    def outcome(finished: StepFinished) -> dict[str, Any]:
        first = finished.results[0] if finished.results else None
        return {"step_id": finished.step_id, "status": finished.status, "duration": finished.duration,
                "error": finished.error, "host": first.host if first else None,
                "result": dict(first.result) if first else {}}

    async def _guard(self, work: Awaitable[M]) -> M:
        """Run a tool's work; a mistake in its arguments becomes a UserInputError naming the field."""
        try:
            return self.clean(await work)
        except ValidationError as exc:
            raise UserInputError(_validation_message(exc)) from None

    # -- tools ----------------------------------------------------------------------------------
    async def read_source(self, *, package: str, file: str | None, address: str | None, symbol: str | None,
                          pattern: str | None, context: int | None, host: str | None,
                          timeout: float | None) -> models.ReadSourceResult:
        async def work() -> models.ReadSourceResult:
            finished = await self.actions.read_source(package=package, file=file, address=address, symbol=symbol,
                                                      pattern=pattern, context=context, host=host,
                                                      timeout=self._timeout(timeout, "read_source"))
            out = self.outcome(finished)
            if out["status"] != "ok":  # recorded as the step it was; the assistant gets a tool error, not a quiet result
                raise UserInputError(f"read_source failed on {out['host']}: "
                                     f"{out['error'] or out['result'].get('error') or out['status']}")
            return models.ReadSourceResult(**out, package=package, version=out["result"].get("version"),
                                           text=str(out["result"].get("text") or ""))
        return await self._guard(work())

    async def exec(self, *, command: str | None, argv: list[str] | None, host: str | None,
                   timeout: float | None) -> models.ExecResult:
        if (command is None) == (argv is None):
            raise UserInputError("exec: give `command` (run by bash -c) or `argv` (no shell), not both")
        words = [command] if command is not None else list(argv or [])
        if any("{{" in w or "{%" in w for w in words):
            # the runner would expand them; the policy must judge the command that runs, so none are taken
            raise UserInputError("exec runs commands as given: template syntax ({{ }} / {% %}) is not expanded here")
        for name in self.hosts(host):
            refusal = self.view.inventory.exec_policy_for(name).refusal(
                command=command, argv=argv, allow_exec=self.settings.allow_exec)
            if refusal:
                # recorded too: whoever reads the session sees what the assistant tried and was not allowed
                self.actions.note(f"exec refused on {name}: {refusal}")
                raise UserInputError(f"exec refused on {name}: {refusal}")

        async def work() -> models.ExecResult:
            finished = await self.actions.run_command(command, argv=argv, host=host,
                                                      timeout=self._timeout(timeout, "exec"))
            out = self.outcome(finished)
            r = out["result"]
            return models.ExecResult(**out, rc=r.get("rc"), stdout=str(r.get("stdout") or ""),
                                     stderr=str(r.get("stderr") or ""))
        return await self._guard(work())

    async def probe(self, *, name: str, path: str | None, target_path: str | None, host: str | None,
                    timeout: float | None) -> models.StepOutcome:
        args: dict[str, Any] = {}
        if name == "draft_inspect":
            # the draft the host's inventory names (the lab's, a GPU host's `draft` var) unless told otherwise
            path = path or self._host_var(host, "draft")
            target_path = target_path or self._host_var(host, "target")
            if not path:
                raise UserInputError("probe draft_inspect: give `path` (the draft checkpoint directory on the host)")
            args = {"path": str(path), **({"target_path": str(target_path)} if target_path else {})}
        elif name == "target_capture":
            if path:
                raise UserInputError("probe target_capture takes target_path, not path")
            target_path = target_path or self._host_var(host, "target")
            if not target_path:
                raise UserInputError("probe target_capture: give `target_path` (the target model directory on the host)")
            # the session playbook's vllm_engines (the flagship's: vllm, lab-vllm) say which host engines speak vLLM
            vllm_engines = self._host_var(host, "vllm_engines") or ("vllm", "lab-vllm")
            engine = "vllm" if self._host_var(host, "engine") in vllm_engines else "sglang"
            args = {"target_path": str(target_path), "engine": engine}
        elif path or target_path:
            raise UserInputError(f"probe {name} takes no path")

        async def work() -> models.StepOutcome:
            finished = await self.actions.step("probe", {"name": name, "args": args}, name=f"probe {name}",
                                               host=host, timeout=self._timeout(timeout, "probe"))
            return models.StepOutcome(**self.outcome(finished))
        return await self._guard(work())

    async def server_start(self, *, name: str, flags: dict[str, Any], engine: str | None, model: str | None,
                           port: int | None, ready_timeout: float | None, preflight: bool,
                           host: str | None, capture: list[int] | None = None) -> models.ServerResult:
        args: dict[str, Any] = {"action": "start", "name": name, "flags": dict(flags), "preflight": preflight}
        for key, value in (("engine", engine), ("model", model), ("port", port), ("ready_timeout", ready_timeout),
                           ("capture", capture)):
            if value is not None:
                args[key] = value
        # `keep` is not offered: every server an assistant starts is stopped when its connection ends
        timeout = (ready_timeout or DEFAULT_READY_TIMEOUT) + SERVER_START_MARGIN

        async def work() -> models.ServerResult:
            finished = await self.actions.step("server", args, name=f"start server {name}", host=host, timeout=timeout)
            out = self.outcome(finished)
            r = out["result"]
            return models.ServerResult(**out, name=name, url=r.get("url"), flags=dict(flags),
                                       effective=dict(r.get("effective") or {}), overrides=list(r.get("overrides") or []),
                                       states_from=r.get("states_from"))
        return await self._guard(work())

    async def server_stop(self, *, name: str, host: str | None, timeout: float | None) -> models.StepOutcome:
        async def work() -> models.StepOutcome:
            finished = await self.actions.step("server", {"action": "stop", "name": name}, name=f"stop server {name}",
                                               host=host, timeout=self._timeout(timeout, "server_stop"))
            return models.StepOutcome(**self.outcome(finished))
        return await self._guard(work())

    async def server_bench(self, *, server: str, n: int, max_new_tokens: int, concurrency: int, host: str | None,
                           timeout: float | None, traffic: str | None = None,
                           traffic_sample: int | None = None) -> models.StepOutcome:
        args: dict[str, Any] = {"server": server, "n": n, "max_new_tokens": max_new_tokens,
                                "concurrency": concurrency}
        if traffic is not None:  # the user's requests replayed: acceptance per category in the result's `traffic`
            args.update(traffic=traffic, traffic_sample=traffic_sample)

        async def work() -> models.StepOutcome:
            finished = await self.actions.step("bench", args, name=f"benchmark {server}", host=host,
                                               timeout=self._timeout(timeout, "server_bench"))
            return models.StepOutcome(**self.outcome(finished))
        return await self._guard(work())

    async def draft_test(self, *, target: str | None, draft: str | None, wirings: Any, engine: str, steps: int,
                         num_prompts: int | None, max_new_tokens: int | None, margin: float, host: str | None,
                         timeout: float | None, states_from: dict[str, Any] | None = None) -> models.DraftTestResult:
        target = target or self._host_var(host, "target")
        draft = draft or self._host_var(host, "draft")
        if not target or not draft:
            raise UserInputError("draft_test: give `target` and `draft` (model directories on the host)")
        args: dict[str, Any] = {"target": str(target), "draft": str(draft), "wirings": wirings, "engine": engine,
                                "steps": steps, "margin": margin}
        if num_prompts is not None:
            args["num_prompts"] = num_prompts
        if max_new_tokens is not None:
            args["max_new_tokens"] = max_new_tokens
        if states_from:
            args["states_from"] = states_from

        async def work() -> models.DraftTestResult:
            finished = await self.actions.step("draft_test", args, name="standalone draft test", host=host,
                                               timeout=self._timeout(timeout, "draft_test"))
            out = self.outcome(finished)
            return models.DraftTestResult(**out, decision=out["result"].get("decision"),
                                          verdict=out["result"].get("verdict"),
                                          hidden_states=states_source_line(out["result"].get("states")),
                                          ceiling=ceiling_line(out["result"].get("ceiling"),
                                                               (out["result"].get("server") or {}).get("tau_serving")))
        return await self._guard(work())

    def hypotheses(self) -> models.Hypotheses:
        entries = []
        for hid, entry in self.view.services.board.entries.items():
            h = entry.hypothesis
            last = entry.history[-1].evidence if entry.history else None
            entries.append(models.Hypothesis(id=hid, title=h.title, state=entry.state, manual=bool(h.manual),
                                             why=h.why, test=h.test, last_evidence=last,
                                             evidence_count=entry.evidence_count))
        answer = self.answer()
        return self.clean(models.Hypotheses(hypotheses=entries, answer=answer.headline if answer else None))

    def verdict(self, hypothesis_id: str, state: str, because: str) -> models.Verdict:
        event = self.actions.verdict(hypothesis_id, state, because)
        return self.clean(models.Verdict(hypothesis_id=event.hypothesis_id, state=event.state,
                                         previous=event.previous, conflicts_with=event.conflicts_with))

    def note(self, text: str, hypothesis_id: str | None, step_id: str | None) -> models.Note:
        event = self.actions.note(text, hypothesis_id=hypothesis_id, step_id=step_id)
        return self.clean(models.Note(text=event.text, hypothesis_id=event.hypothesis_id,
                                      step_id=event.step_id))

    async def run_playbook(self, on_step: Callable[[int, int, str], Awaitable[None]],
                           timeout: float | None) -> models.PlaybookRun:
        """Let the session playbook's steps through the gate (then ``always:``), reporting each finished
        step through ``on_step(done, total, message)``. Once per session: the step ids are the playbook's."""
        playbook = self.view.playbook
        if not playbook.steps:
            raise UserInputError(f"the session's playbook {playbook.name!r} has no steps to run "
                                 "(start orchestrator mcp with --playbook FILE)")
        if self._playbook_started:
            raise UserInputError("the playbook's steps already ran in this session; start a new connection to "
                                 "run them again, or use the tools to rerun parts")
        self._playbook_started = self._playbook_running = True
        ids = {s.step_id for s in playbook.all_steps()}
        total = len(ids)
        queue: asyncio.Queue[StepFinished] = asyncio.Queue()
        self.progress.listener = lambda e: queue.put_nowait(e) if e.step_id in ids else None
        finished: list[StepFinished] = []
        deadline = time.monotonic() + timeout if timeout else None
        self.controller.run_all()
        try:
            while not (self.controller.hold.holding or self.controller.finished) or not queue.empty():
                if deadline is not None and time.monotonic() > deadline and not self.controller.cancelled:
                    self.controller.cancel()  # the running step is cancelled and recorded; ``always:`` still runs
                try:
                    event = await asyncio.wait_for(queue.get(), timeout=0.2)
                except asyncio.TimeoutError:
                    continue
                finished.append(event)
                await on_step(len(finished), total, self.redact(f"{event.step_id} {event.name}: {event.status}"))
        finally:
            self.progress.listener = None
            self._playbook_running = False
        bad = [e for e in finished if e.status in ("failed", "timeout", "unreachable") and not e.ignored]
        status = "cancelled" if any(e.status == "cancelled" for e in finished) else ("failed" if bad else "ok")
        steps = [models.PlaybookStep(step_id=e.step_id, name=e.name, status=e.status, error=e.error) for e in finished]
        answer = self.answer()
        return self.clean(models.PlaybookRun(status=status, steps=steps, hypotheses=self.hypotheses().hypotheses,
                                             answer=answer.headline if answer else None,
                                             verdict_status=answer.status if answer else None))

    def answer(self) -> SymptomAccount | None:
        """The investigation's answer so far (the console's last line, the report's first), from the session log."""
        return account_of(read_session(self.directory).events)

    def report(self) -> models.Report:
        """Write report.md and report.html now (the log so far) and return the Markdown."""
        written = write_reports(self.directory, say=self.view.problems.say)
        md = self.directory / "report.md"
        text = md.read_text(encoding="utf-8") if md.is_file() else ""
        return self.clean(models.Report(session_dir=str(self.directory), written=[str(p) for p in written.written],
                                        markdown=text, failures=written.failures))

    def events_text(self) -> str:
        path = self.directory / "events.jsonl"
        return path.read_text(encoding="utf-8") if path.is_file() else ""
