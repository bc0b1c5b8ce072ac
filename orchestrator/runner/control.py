"""The command API over one live engine: run all / next / pause / skip / rerun / cancel, and the
ad-hoc pokes (read source, run a command, note, verdict). Pure asyncio, no Textual: unit-testable, and
every poke goes through ``AdhocActions`` (the runner) so the SessionLog records it exactly like a playbook
step. The TUI and the MCP server are its front ends.

The session stays open after the playbook ends so the engineer can keep poking: ``SessionHold`` is an
runner finalizer that waits until ``release()`` (quit). Finalizers run in reverse order of adding and
the servers service adds its own when the runner is built, so the hold runs first and servers keep
running while it holds; the later finalizers then stop them, before transports close.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.actions import StepServices, get_action
from orchestrator.errors import UserInputError
from orchestrator.events import HypothesisUpdated, NoteAdded, StepFinished
from orchestrator.inventory import Inventory
from orchestrator.playbook.models import Playbook, Step
from orchestrator.redact import Redactor
from orchestrator.runner.adhoc import AdhocActions
from orchestrator.runner.playbook_runner import PlaybookRunner, SessionOutcome, StepGate
from orchestrator.runner.problems import Problems

Mode = Literal["paused", "running", "step"]  # what the gate lets through
ControllerMode = Literal[Mode, "holding", "finished"]  # what the status line says: the gate's, or the session's end


class ControlGate(StepGate):
    """Holds each playbook step until the mode lets it through.

    ``running``: every step passes. ``paused``: the next step waits. ``step``: one step passes, then
    paused again. A pending skip makes the next step (waiting or not) return "skip".
    """

    def __init__(self, mode: Mode = "paused", on_change: Callable[[], None] | None = None) -> None:
        self.mode: Mode = mode
        self.waiting: Step | None = None  # the step held at the gate, if any
        self._skip_next = False
        self._stopped = False
        self._wake = asyncio.Event()
        self.on_change = on_change or (lambda: None)  # the TUI repaints its status line

    async def before_step(self, step: Step) -> str:
        while True:
            if self._stopped:
                self._leave()
                return "stop"
            if self._skip_next:
                self._skip_next = False
                self._leave()
                return "skip"
            if self.mode == "running":
                self._leave()
                return "run"
            if self.mode == "step":
                self.mode = "paused"
                self._leave()
                return "run"
            self.waiting = step
            self.on_change()
            self._wake.clear()
            await self._wake.wait()

    def _leave(self) -> None:
        self.waiting = None
        self.on_change()

    def set_mode(self, mode: Mode) -> None:
        self.mode = mode
        self._wake.set()
        self.on_change()

    def stop(self) -> None:
        """End the section at the gate: the steps not yet let through are not run (see StepGate)."""
        self._stopped = True
        self._wake.set()

    def skip_next(self) -> None:
        """Skip the step at the gate now, or the next one to reach it."""
        self._skip_next = True
        self._wake.set()


class SessionHold:
    """A runner finalizer that keeps the session (transports, log, servers) open until released."""

    def __init__(self, on_change: Callable[[], None] | None = None,
                 should_hold: Callable[[], bool] | None = None) -> None:
        self._released = asyncio.Event()
        self.holding = False
        self.on_change = on_change or (lambda: None)
        self.should_hold = should_hold or (lambda: True)

    async def __call__(self) -> None:
        if not self.should_hold():  # the session was torn down from outside: nobody is there to poke
            return
        self.holding = True
        self.on_change()
        try:
            await self._released.wait()
        finally:
            self.holding = False

    def release(self) -> None:
        self._released.set()


@dataclass(frozen=True)
class SessionView:
    """What a front end reads of the live session (``Controller.view``): the runner itself stays the controller's,
    so no front end reaches into it (tests/core/test_runner_ownership.py checks that none names it)."""

    playbook: Playbook
    inventory: Inventory
    redactor: Redactor  # what the front end shows goes through it (MCP's results)
    problems: Problems  # the session's failures that did not stop it; ``say`` is where they are said
    services: StepServices  # the composed session's services (its hypothesis board)
    host_vars: Callable[[str | None], dict[str, Any]]  # every variable a template on that host sees


def _takes_server_flags(step: Step) -> bool:
    """The step's kind starts a server from flags a person may edit (its ``takes_server_flags``)."""
    action_cls = get_action(step.action)
    return action_cls is not None and action_cls.takes_server_flags


class Controller:
    """Commands the TUI sends to the runner. ``start()`` runs the session; everything else steers it."""

    def __init__(self, runner: PlaybookRunner, *, start_mode: Mode = "paused", on_change: Callable[[], None] | None = None,
                 hold_open: bool = True, author: str | None = None) -> None:
        self._runner = runner
        self.adhoc = AdhocActions(runner, author=author)  # who pokes: the user's name, or "mcp"
        self.gate = ControlGate(start_mode, on_change)
        runner.gate = self.gate
        self.hold = SessionHold(on_change, should_hold=lambda: not runner.force_cancelled)
        if hold_open:
            runner.finalizers.append(self.hold)
        self.outcome: SessionOutcome | None = None
        self.edited_flags: dict[str, dict[str, Any]] = {}  # step id -> the flags of its last edited rerun

    # -- the session ----------------------------------------------------------------------------
    async def start(self) -> SessionOutcome:
        """Run the session to its end (which, with the hold, is when ``finish()`` is called)."""
        try:
            self.outcome = await self._runner.run()
        finally:
            self.adhoc.closed = True
        return self.outcome

    @property
    def finished(self) -> bool:
        return self.outcome is not None

    @property
    def cancelled(self) -> bool:
        """A cancel was asked for (by ``cancel``, a signal, or the session's own end)."""
        return self._runner.cancelled

    @property
    def view(self) -> SessionView:
        runner = self._runner
        return SessionView(playbook=runner.playbook, inventory=runner.inventory, redactor=runner.redactor,
                           problems=runner.problems, services=runner.services, host_vars=runner.vars.for_host)

    def finish(self) -> None:
        """End the session: release the steps and the hold, so always:, finalizers and the log close run."""
        if not self.hold.holding and not self.finished:
            self._runner.cancel()  # steps still to go are not run; `always:` still is
        self.gate.set_mode("running")
        self.hold.release()

    def close(self) -> None:
        """End the session without cancelling anything: playbook steps still held at the gate are not run
        (nor recorded), ``always:`` and the finalizers (stop servers) run, the log closes."""
        self.gate.stop()
        self.hold.release()

    def set_listener(self, on_change: Callable[[], None]) -> None:
        """Called (in the loop) whenever the mode changes: the TUI repaints its status line."""
        self.gate.on_change = on_change
        self.hold.on_change = on_change

    # -- stepping -------------------------------------------------------------------------------
    def run_all(self) -> None:
        self.gate.set_mode("running")

    def next_step(self) -> None:
        self.gate.set_mode("step")

    def pause(self) -> None:
        self.gate.set_mode("paused")

    def skip(self) -> None:
        self.gate.skip_next()

    def cancel(self) -> None:
        """Cancel the running step (``always:`` still runs); pressed twice, ``always:`` too."""
        self._runner.cancel()
        self.gate.set_mode("running")  # a step held at the gate must not wait forever

    @property
    def mode(self) -> ControllerMode:
        if self.finished:
            return "finished"
        if self.hold.holding:
            return "holding"
        return self.gate.mode

    # -- steps by id ----------------------------------------------------------------------------
    def find_step(self, step_id: str) -> Step:
        for step in self._runner.playbook.all_steps():
            if step.step_id == step_id:
                return step
        raise UserInputError(f"no playbook step with id {step_id!r}")

    def server_flags(self, step_id: str) -> dict[str, Any]:
        step = self.find_step(step_id)
        if not _takes_server_flags(step) or not isinstance(step.args, dict):
            raise UserInputError(f"step {step_id} is a {step.action} step, not a server step: it has no flags")
        if step_id in self.edited_flags:
            return dict(self.edited_flags[step_id])
        flags = step.args.get("flags") or {}
        if not isinstance(flags, dict) or any(isinstance(v, str) and "{{" in v for v in flags.values()):
            # templated (`flags: "{{ candidate_flags }}"`): show the values this session resolves them to
            from orchestrator.templating import render

            hosts = self._runner.inventory.resolve(step.hosts or self._runner.playbook.hosts)
            flags = render(flags, self._runner.vars.for_host(hosts[0] if hosts else None))
        if not isinstance(flags, dict):
            raise UserInputError(f"step {step_id}: its flags are not a mapping ({flags!r})")
        return dict(flags)

    # -- reruns and pokes: each one a recorded ad-hoc step --------------------------------------
    async def run_adhoc(self, step: Step) -> StepFinished:
        return await self.adhoc.run(step)

    async def rerun(self, step_id: str, *, flags: dict[str, Any] | None = None) -> StepFinished:
        """Run a playbook step again as ad-hoc step xN (same args; a server step may get new flags)."""
        original = self.find_step(step_id)
        args = original.args
        if flags is not None:
            if not _takes_server_flags(original):
                raise UserInputError(f"only server steps take flags; {step_id} is a {original.action} step")
            args = {**(args or {}), "flags": dict(flags)}
            self.edited_flags[step_id] = dict(flags)
        label = "with edited flags" if flags is not None else "rerun"
        step = self._runner.adhoc_step(original.action, args, name=f"{original.display_name} ({label})",
                                      hosts=original.hosts, register=original.register_as, timeout=original.timeout)
        # Evidence rules travel with the rerun: the board judges the new observation like the first.
        step = step.model_copy(update={"evidence": original.evidence, "until": original.until,
                                       "retries": original.retries, "delay": original.delay})
        return await self.run_adhoc(step)

    async def read_source(self, *, package: str, file: str | None = None, address: str | None = None,
                          symbol: str | None = None, host: str | None = None, context: int | None = None) -> StepFinished:
        """Read installed source on a host: ``address`` is sed-style ("155,200" or "/pattern/")."""
        return await self.adhoc.read_source(package=package, file=file, address=address, symbol=symbol, host=host,
                                            context=context)

    async def run_command(self, command: str, *, host: str | None = None, timeout: float | None = None) -> StepFinished:
        return await self.adhoc.run_command(command, host=host, timeout=timeout)

    def note(self, text: str, *, hypothesis_id: str | None = None, step_id: str | None = None) -> NoteAdded:
        return self.adhoc.note(text, hypothesis_id=hypothesis_id, step_id=step_id)

    def verdict(self, hypothesis_id: str, state: str, because: str) -> HypothesisUpdated:
        return self.adhoc.verdict(hypothesis_id, state, because)
