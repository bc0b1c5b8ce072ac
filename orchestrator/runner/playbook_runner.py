"""PlaybookRunner: runs a playbook's steps in order on their hosts, applies when/until/retries/timeout, runs
``always:`` even after failure or cancel, and emits typed events. Nothing here prints or knows sinks.

The runner runs steps and nothing else: the session's services (servers, the hypothesis board, Slurm
allocations) are composed around it (``orchestrator.session.compose``) and handed in as ``services`` plus
hooks (preparers, step hooks, finalizers) that were given ``emit`` and narrow ports, never the runner.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator import __version__, debuglog
from orchestrator.actions import Action, StepServices, get_action
from orchestrator.errors import OrchestratorError, TemplateError
from orchestrator.events import (
    Event,
    HostOutcome,
    Output,
    OutputStream,
    SessionFinished,
    SessionStarted,
    SessionStatus,
    StepFinished,
    StepStarted,
    StepStatus,
)
from orchestrator.inventory import Inventory
from orchestrator.playbook.models import Playbook, Step
from orchestrator.redact import Redactor
from orchestrator.runner.attempt import CONTROLLER, run_on_host
from orchestrator.runner.problems import Problems, say_on_stderr
from orchestrator.runner.shutdown import shut_down
from orchestrator.runner.sinks import EventSink
from orchestrator.runner.variables import VariableState
from orchestrator.templating import evaluate
from orchestrator.transport.base import Transport
from orchestrator.transport.factory import TransportFactory, make_transport

__all__ = ["CONTROLLER", "PlaybookRunner", "RunnerOptions", "SessionOutcome", "StepGate"]

#: run after each step with (the step, its step_finished, the variables its rules see); made with ``emit`` bound
StepHook = Callable[[Step, StepFinished, dict[str, Any]], Awaitable[None]]


class StepGate:
    """Decides, before each playbook step, whether it runs. The default runs everything; the TUI
    installs a gate that pauses, single-steps and skips (see ``orchestrator.runner.control``)."""

    async def before_step(self, step: Step) -> str:
        """Return "run", "skip", or "stop" (end the section here: the steps left are not run, and not
        recorded; unlike ``cancel()`` the session is not marked cancelled: an MCP session whose assistant
        never asked for the playbook's steps ended normally)."""
        return "run"


class NoServices:
    """The services of a runner built bare (no session composed around it): a step that needs one says so."""

    def _missing(self, what: str) -> OrchestratorError:
        return OrchestratorError(f"this runner has no {what}: build the session with "
                                 "orchestrator.session.compose.compose_runner", title="No session services")

    @property
    def servers(self) -> Any:
        raise self._missing("server manager")

    @property
    def board(self) -> Any:
        raise self._missing("hypothesis board")


def step_secrets(action: str, args: Any) -> list[str]:
    """The secret values a step's kind finds in its arguments (a server's API key), whatever they are named."""
    action_cls = get_action(action)
    return action_cls.secret_values(args) if action_cls is not None else []


@dataclass
class RunnerOptions:
    extra_vars: dict[str, Any] = field(default_factory=dict)
    forks: int = 16
    keep_remote: bool = False
    #: names the session's workdir on each host, shared by every controller reaching it: unique, never a constant
    session_id: str = field(default_factory=lambda: f"session-{secrets.token_hex(4)}")
    session_dir: Path | None = None
    argv: list[str] = field(default_factory=list)
    say: Callable[[str], None] = say_on_stderr  # where a swallowed failure is told (the TUI: a notification)


@dataclass
class SessionOutcome:
    status: SessionStatus
    counts: dict[str, int]
    duration: float
    problems: list[str] = field(default_factory=list)  # failures that did not stop the session (Problems)
    incomplete: bool = False  # a sink missed events: the record is not the whole session

    @property
    def exit_code(self) -> int:
        return {"ok": 0, "failed": 1, "cancelled": 130}.get(self.status, 1)


class PlaybookRunner:
    """One session. ``run()`` once; ``cancel()`` from a signal handler or the TUI."""

    def __init__(
        self,
        playbook: Playbook,
        *,
        inventory: Inventory | None = None,
        sinks: Iterable[EventSink] = (),
        options: RunnerOptions | None = None,
        services: StepServices | None = None,
        make_transport: TransportFactory = make_transport,
    ) -> None:
        self.playbook = playbook
        self.inventory = inventory or Inventory()
        self.sinks: list[EventSink] = list(sinks)
        self.options = options or RunnerOptions()
        self.redactor = Redactor()
        debuglog.watch(self.redactor)  # --debug lines mask this session's secrets too
        self.problems = Problems(self.options.say)
        self.vars = VariableState(
            playbook=playbook, inventory=self.inventory, extra=dict(self.options.extra_vars),
            session={"id": self.options.session_id, "dir": str(self.options.session_dir or "")},
        )
        self._collect_secrets()
        self.transports: dict[str, Transport] = {}
        self._transport_locks: dict[str, asyncio.Lock] = {}
        self.unreachable: dict[str, str] = {}
        self.step_hooks: list[StepHook] = []  # e.g. the hypothesis board's rule evaluation
        self.finalizers: list[Callable[[], Awaitable[None]]] = []  # run before transports close
        self.preparers: list[Callable[[], Awaitable[None]]] = []  # run before the first step (Slurm allocations)
        #: what steps use (servers, board): composed outside the runner, passed through to each step untouched
        self.services: StepServices = services if services is not None else NoServices()
        self.make_transport = make_transport  # how a host is reached (tests may swap it)
        self.counts: dict[str, int] = {}
        self._seq = 0
        self._current: asyncio.Task[SessionStatus] | None = None
        self._cancelled = False
        self._force = False
        self.step_results: dict[str, StepFinished] = {}
        self._held_output: dict[tuple[str, str, OutputStream], str] = {}  # see _output
        self.gate: StepGate = StepGate()
        self._adhoc_count = 0

    # -- events -------------------------------------------------------------------------------
    def _collect_secrets(self) -> None:
        import os

        for name, secret in self.playbook.secret_vars.items():
            value = os.environ.get(secret.from_env, "") if secret.from_env else secret.value
            self.vars.secrets[name] = value
            self.redactor.add(value)
        self.redactor.add_env(dict(os.environ))
        # `-e api_key=...` lands in the recorded argv and vars: a secret-named extra var is a secret.
        self.redactor.add_env(dict(self.options.extra_vars))
        for step in self.playbook.all_steps():
            if isinstance(step.args, dict) and isinstance(step.args.get("env"), dict):
                self.redactor.add_env({k: v for k, v in step.args["env"].items() if "{{" not in str(v)})
            self.redactor.add(*(v for v in step_secrets(step.action, step.args) if "{{" not in v))

    def emit(self, event: Event) -> None:
        """Number, redact and deliver an event to every sink."""
        self._seq += 1
        data = self.redactor.deep(event.model_dump(mode="json"))
        data["seq"] = self._seq
        delivered = type(event).model_validate(data)
        for sink in self.sinks:
            try:
                sink.handle(delivered)
            except Exception as exc:  # a broken sink must not take the session down, nor go unseen
                self.problems.add(f"event sink {type(sink).__name__}", exc, loses_events=True,
                                  context=f"on {delivered.type} #{delivered.seq}")
                if getattr(exc, "stops_session", False) and not self._cancelled:
                    # The record itself is gone (a full disk): stop, with `always:` still run so no server is
                    # left behind; carrying on would run experiments nobody can read about afterwards.
                    self.problems.safe_say("stopping the run: the session log cannot be written")
                    self.cancel()

    # -- transports ---------------------------------------------------------------------------
    async def transport(self, host: str) -> Transport:
        """The connected transport for a host (one per host per session). Raises HostUnreachable."""
        lock = self._transport_locks.setdefault(host, asyncio.Lock())
        async with lock:
            if host in self.transports:
                return self.transports[host]
            spec = self.inventory.host(host)
            transport = self.make_transport(spec, self.options.session_id)
            await transport.connect()
            self.transports[host] = transport
            return transport

    # -- running ------------------------------------------------------------------------------
    def cancel(self) -> None:
        """First call: cancel the running step (``always:`` still runs). Second: cancel ``always:`` too."""
        if self._cancelled:
            self._force = True
        self._cancelled = True
        if self._current is not None and not self._current.done():
            self._current.cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def force_cancelled(self) -> bool:
        """Cancelled twice (or from outside): ``always:`` is skipped and nothing should wait for a person."""
        return self._force

    async def run(self) -> SessionOutcome:
        started = time.monotonic()
        hosts = self._safe_hosts(self.playbook.hosts)
        self.emit(
            SessionStarted(
                session_id=self.options.session_id, playbook=self.playbook.name, playbook_path=self.playbook.path,
                description=self.playbook.description, hosts=hosts,
                vars={**self.playbook.vars, **self.options.extra_vars, **{k: "***" for k in self.playbook.secret_vars}},
                hypotheses=[h.model_dump() for h in self.playbook.hypotheses],
                steps=[{"step_id": s.step_id, "name": s.display_name, "action": s.action, "section": s.section,
                        "location": str(s.location) if s.location else None} for s in self.playbook.all_steps()],
                orchestrator_version=__version__, argv=self.options.argv,
            )
        )
        status: SessionStatus = "ok"
        error: str | None = None
        outer_cancel = False
        try:
            status = await self._run_guarded(self._prepare())
            if status == "ok":
                status = await self._run_guarded(self._run_section(self.playbook.steps))
            if self._cancelled:
                status = "cancelled"
            if not self._force:
                always_status = await self._run_guarded(self._run_section(self.playbook.always, always=True))
                if status == "ok" and always_status != "ok":
                    status = always_status
        except asyncio.CancelledError:
            # Cancelled from outside (the loop is closing, the TUI exited): still stop our servers and close
            # the log, but bounded, then let the cancellation through.
            outer_cancel = True
            self._cancelled = self._force = True
        except OrchestratorError as exc:  # a preparer's (no allocation granted): said, no traceback
            status, error = "failed", exc.message
        except Exception as exc:  # a runner bug must still leave a finished, readable session
            status, error = "error", f"{type(exc).__name__}: {exc}"
        finally:
            await self._shutdown(bounded=outer_cancel)
        if self._cancelled:
            status = "cancelled"
        for step_id, host, _stream in list(self._held_output):  # background output (server logs) held back
            self.flush_output(step_id, host)
        duration = time.monotonic() - started
        self.emit(SessionFinished(status=status, duration=round(duration, 3), counts=dict(self.counts), error=error,
                                  problems=self.problems.summary(), incomplete=self.problems.incomplete))
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:  # after session_finished: only said, the log cannot carry it any more
                self.problems.add(f"event sink {type(sink).__name__}", exc, loses_events=True, context="on close")
        if outer_cancel:
            raise asyncio.CancelledError
        return SessionOutcome(status=status, counts=dict(self.counts), duration=duration,
                              problems=self.problems.summary(), incomplete=self.problems.incomplete)

    async def _prepare(self) -> SessionStatus:
        """Preparers run under the same cancel as steps: Ctrl-C while a Slurm allocation is pending stops it."""
        for prepare in self.preparers:
            await prepare()
        return "ok"

    async def _run_guarded(self, coro: Awaitable[SessionStatus]) -> SessionStatus:
        self._current = asyncio.ensure_future(coro)
        try:
            return await self._current
        except asyncio.CancelledError:
            if not self._cancelled:
                raise  # cancelled from outside (the event loop is closing): propagate
            return "cancelled"
        finally:
            self._current = None

    async def _shutdown(self, *, bounded: bool = False) -> None:
        """Finalizers (stop servers...), then workdirs and connections; see ``runner.shutdown``."""
        await shut_down(self.finalizers, self.transports, self.problems,
                        keep_remote=self.options.keep_remote, bounded=bounded)

    def _safe_hosts(self, pattern: Any) -> list[str]:
        try:
            return self.inventory.resolve(pattern)
        except OrchestratorError:
            return []

    async def _run_section(self, steps: list[Step], *, always: bool = False) -> SessionStatus:
        status: SessionStatus = "ok"
        for step in steps:
            if self._cancelled and not always:
                break
            if self._force:
                break
            decision = "run" if always else await self.gate.before_step(step)
            if decision == "stop":
                break
            if decision == "skip":
                self._skip(step, "skipped by the user")
                continue
            finished = await self.run_step(step)
            if finished.status in ("failed", "timeout", "unreachable") and not finished.ignored:
                status = "failed"
                if not always:
                    break
            if finished.status == "cancelled":
                return "cancelled"
        return status

    async def run_step(self, step: Step, *, author: str | None = None) -> StepFinished:
        """Run one step on its hosts (also used for ad-hoc steps from the TUI, the CLI and MCP; ``author``
        says who asked for one and is recorded on its step_started)."""
        action_cls = get_action(step.action)
        started = time.monotonic()
        assert action_cls is not None, step.action
        try:
            hosts = [CONTROLLER] if not action_cls.per_host else self.inventory.resolve(step.hosts or self.playbook.hosts)
        except OrchestratorError as exc:
            return self._finish_early(step, "failed", exc.message, started, author)
        hosts = [h for h in hosts if h not in self.unreachable]
        if not hosts:
            return self._finish_early(step, "unreachable", "no reachable host left for this step", started, author)

        # `when` is decided per host, before anything starts.
        run_hosts: list[str] = []
        for host in hosts:
            try:
                if step.when is None or bool(evaluate(str(step.when), self.vars.for_host(host))):
                    run_hosts.append(host)
            except TemplateError as exc:
                return self._finish_early(step, "failed", f"{step.location}: when: {exc.message}", started, author)
        step_hosts = list(run_hosts)
        if len(run_hosts) > 1 and action_cls.runs_once(step.args):
            # one run over several hosts (a multi-node server): on the first, which uses the rest itself
            hosts = run_hosts = run_hosts[:1]
        self.emit(StepStarted(step_id=step.step_id, name=step.display_name, action=step.action, section=step.section,
                              hosts=hosts, args=self._safe_args(step, action_cls, hosts[0]),
                              location=str(step.location) if step.location else None, author=author))
        if not run_hosts:
            return self._record(step, "skipped", [HostOutcome(host=h, status="skipped") for h in hosts], started, None, 1)

        semaphore = asyncio.Semaphore(max(1, self.options.forks))

        async def one(host: str) -> tuple[HostOutcome, int]:
            async with semaphore:
                return await run_on_host(self, step, action_cls, host, step_hosts)

        tasks = [asyncio.ensure_future(one(h)) for h in run_hosts]
        try:
            pairs = await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            if not self._cancelled:
                raise
            # cancel() reached us through gather, which raises even though each host recorded its
            # "cancelled" outcome: collect those so the step still gets its step_finished.
            done = await asyncio.gather(*tasks, return_exceptions=True)
            pairs = [d if not isinstance(d, BaseException) else (HostOutcome(host=h, status="cancelled", error="cancelled"), 1)
                     for h, d in zip(run_hosts, done, strict=True)]
        outcomes = [p[0] for p in pairs]
        attempts = max(p[1] for p in pairs)
        outcomes += [HostOutcome(host=h, status="skipped") for h in hosts if h not in run_hosts]
        statuses = {o.status for o in outcomes}
        status: StepStatus
        for bad in ("cancelled", "timeout", "failed"):
            if bad in statuses:
                status = bad
                break
        else:
            ok_like = statuses <= {"ok", "skipped"}
            status = "ok" if ok_like and "ok" in statuses else ("skipped" if ok_like else "unreachable")
            if "unreachable" in statuses and "ok" in statuses:
                status = "ok"  # the reachable hosts went on; the others are recorded as unreachable
        error = "; ".join(f"{o.host}: {o.error}" for o in outcomes if o.error) or None
        finished = self._record(step, status, outcomes, started, error, attempts)
        for hook in self.step_hooks:
            try:
                await hook(step, finished, self.vars.for_host(run_hosts[0] if run_hosts[0] != CONTROLLER else None))
            except OrchestratorError as exc:
                self.emit_output(step.step_id, run_hosts[0], "info", f"{exc.message}\n")
        return finished

    def _skip(self, step: Step, reason: str) -> StepFinished:
        started = time.monotonic()
        self.emit(StepStarted(step_id=step.step_id, name=step.display_name, action=step.action, section=step.section,
                              location=str(step.location) if step.location else None))
        return self._record(step, "skipped", [], started, reason, 0)

    def adhoc_step(self, action: str, args: Any, *, name: str | None = None, hosts: Any = None,
                   register: str | None = None, timeout: float | None = None) -> Step:
        """A step made outside the playbook (TUI pokes, reruns with edited flags); ids x1, x2, ..."""
        self._adhoc_count += 1
        return Step.model_validate({
            "action": action, "args": args, "name": name, "hosts": hosts, "register": register, "timeout": timeout,
            "step_id": f"x{self._adhoc_count}", "section": "adhoc",
        })

    def _safe_args(self, step: Step, action_cls: type[Action[Any]], host: str) -> dict[str, Any]:
        """The arguments as ``host`` will run them (the same rendering as the attempt's), or as written when they do
        not render (the attempt then fails with the template's error)."""
        try:
            rendered = action_cls.render_step_args(
                step.args, self.vars.for_host(host if host != CONTROLLER else None))
        except OrchestratorError:
            rendered = step.args
        self.learn_secret_env(rendered, step.action)
        return rendered if isinstance(rendered, dict) else {"value": rendered}

    def learn_secret_env(self, rendered: Any, action: str) -> None:
        """A templated value put into a secret-named env var (``HF_TOKEN: "{{ tok }}"``) is a secret too, and so is
        what the step's kind calls secret (a server's API key, ``flags: {api-key: ...}``), however it was written."""
        if isinstance(rendered, dict) and isinstance(rendered.get("env"), dict):
            self.redactor.add_env(rendered["env"])
        self.redactor.add(*step_secrets(action, rendered))

    def _finish_early(self, step: Step, status: StepStatus, error: str, started: float,
                      author: str | None = None) -> StepFinished:
        self.emit(StepStarted(step_id=step.step_id, name=step.display_name, action=step.action, section=step.section,
                              location=str(step.location) if step.location else None, author=author))
        return self._record(step, status, [], started, error, 1)

    def _record(self, step: Step, status: StepStatus, outcomes: list[HostOutcome], started: float,
                error: str | None, attempts: int) -> StepFinished:
        ignored = status in ("failed", "timeout") and step.ignore_errors
        if step.register_as and outcomes:
            self.vars.register(step.register_as, {
                o.host: {**o.result, "status": o.status, "failed": o.status not in ("ok", "skipped"),
                         "skipped": o.status == "skipped", "host": o.host, "error": o.error}
                for o in outcomes
            })
        finished = StepFinished(
            step_id=step.step_id, name=step.display_name, action=step.action, status=status,
            duration=round(time.monotonic() - started, 4), attempts=attempts, ignored=ignored, error=error,
            results=outcomes, registered_as=step.register_as,
        )
        self.counts[status] = self.counts.get(status, 0) + 1
        self.step_results[step.step_id] = finished
        self.emit(finished)
        return finished

    def emit_output(self, step_id: str, host: str, stream: OutputStream, text: str) -> None:
        # A secret may straddle two chunks; hold back a tail that could start one until more arrives.
        key = (step_id, host, stream)
        text = self._held_output.pop(key, "") + text
        hold = self.redactor.hold_back(text)
        if hold:
            self._held_output[key], text = text[-hold:], text[:-hold]
        if text:
            self.emit(Output(step_id=step_id, host=host, stream=stream, text=text))

    def flush_output(self, step_id: str, host: str) -> None:
        for key in [k for k in self._held_output if k[:2] == (step_id, host)]:
            self.emit(Output(step_id=step_id, host=host, stream=key[2], text=self._held_output.pop(key)))
