"""The Textual app: a subscriber of session events (``TuiSink``) and a sender of commands (``Controller``).

The runner's work runs as async workers in the app's loop (the runner is asyncio): the session in one
exclusive worker, each ad-hoc poke in its own. Every failure, from a worker or a command, goes to the
one error dialog.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rich.markup import escape
from textual.app import App
from textual.binding import Binding
from textual.worker import Worker, WorkerState

from orchestrator.errors import OrchestratorError
from orchestrator.session.reader import LoadedSession
from orchestrator.session.terminal import Terminal
from orchestrator.tui.commands import OrchestratorCommands
from orchestrator.tui.control import Controller, ControllerMode
from orchestrator.tui.messages import EventsArrived, TuiSink
from orchestrator.tui.model import DEFAULT_LINE_CAP, SessionModel
from orchestrator.tui.screens.dialogs import ErrorDialog, NoteDialog, QuitDialog, VerdictDialog
from orchestrator.tui.screens.forms import CommandForm, FlagEditor, ReadSourceForm
from orchestrator.tui.screens.main import MainScreen
from orchestrator.tui.screens.replay import ReplayScreen
from orchestrator.tui.widgets.panes import SessionPanes

LIVE_ONLY = {"run_all", "next_step", "pause", "skip", "rerun", "edit_flags", "cancel", "read_source",
             "run_command", "note", "verdict"}


class _Discard:
    """What Textual's driver writes to once the terminal is gone: nothing (its WriterThread's interface)."""

    def write(self, text: str) -> None:
        del text

    def stop(self) -> None:
        return


class OrchestratorApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "orchestrator"
    COMMANDS = App.COMMANDS | {OrchestratorCommands}
    BINDINGS = [
        Binding("r", "run_all", "Run", id="session.run_all"),
        Binding("n", "next_step", "Next", id="session.next_step"),
        Binding("p", "pause", "Pause", id="session.pause"),
        Binding("s", "skip", "Skip", id="session.skip"),
        Binding("e", "rerun", "Rerun", id="session.rerun"),
        Binding("f", "edit_flags", "Flags", id="session.edit_flags"),
        Binding("c", "cancel", "Cancel", id="session.cancel", show=False),
        Binding("R", "read_source", "Read", id="adhoc.read_source"),
        Binding("x", "run_command", "Cmd", id="adhoc.run_command"),
        Binding("a", "note", "Note", id="adhoc.note", show=False),
        Binding("v", "verdict", "Verdict", id="adhoc.verdict"),
        Binding("1", "tab('output')", "Output", id="view.output", show=False),
        Binding("2", "tab('source')", "Source", id="view.source", show=False),
        Binding("3", "tab('history')", "History", id="view.history", show=False),
        Binding("q", "quit_session", "Quit", id="app.quit"),
    ]

    def __init__(self, *, controller: Controller | None = None, sink: TuiSink | None = None,
                 session_dir: Path | None = None, replay: LoadedSession | None = None,
                 line_cap: int = DEFAULT_LINE_CAP) -> None:
        super().__init__()
        if (controller is None) == (replay is None):
            raise ValueError("give a controller (live session) or a loaded session (replay)")
        self.controller, self.sink, self.session_dir, self.replay = controller, sink, session_dir, replay
        self.model = SessionModel(line_cap=line_cap)
        self._session_worker: Worker[Any] | None = None
        self.exit_code = 0
        self.terminal = Terminal()  # the descriptors that are a terminal, noted before Textual takes them over
        self._sighup_before: Any = None  # the SIGHUP handler before the app's (restored when it unmounts)
        self.report_failures: list[str] = []  # reports that could not be written (said, and repeated on exit)

    # -- start ------------------------------------------------------------------------------------
    def on_mount(self) -> None:
        if self.replay is not None:
            self.push_screen(ReplayScreen(self.replay))
            return
        assert self.controller is not None and self.sink is not None
        self.sub_title = self.controller.view.playbook.name
        self.push_screen(MainScreen(self.model))
        self.controller.set_listener(self.update_status)
        self.controller.view.problems.say = self.say_problem
        self.sink.post = self.post_message
        if self.sink.queue:
            self.post_message(EventsArrived())
        self._session_worker = self.run_worker(self._run_session(), name="session", group="session",
                                               exclusive=True, exit_on_error=False)
        self._hangup_loop = asyncio.get_running_loop()
        with contextlib.suppress(ValueError):  # not the main thread (Pilot in a test): no terminal to lose
            # signal.signal, not the loop's add_signal_handler: this must run before Textual's own SIGCONT handler,
            # which the kernel sends with SIGHUP and which would restart its terminal threads on the dead terminal
            # (Python runs pending handlers in signal-number order: SIGHUP is 1, SIGCONT 18)
            self._sighup_before = signal.signal(signal.SIGHUP, self._on_sighup)

    def on_unmount(self) -> None:
        """The app is gone: SIGHUP is its process's again (a Pilot test runs the app in pytest's main thread)."""
        if self._sighup_before is not None:
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGHUP, self._sighup_before)
            self._sighup_before = None

    def _on_sighup(self, _signum: int, _frame: object) -> None:
        """SIGHUP: the terminal closed (its window, the SSH connection). Never the end of the investigation: the
        terminal's descriptors are pointed away from it (session/terminal.py) and Textual stops drawing (its writer
        thread may have died on the dead terminal's EIO already: a write to it would then block the app for ever);
        then ``terminal_lost`` runs in the loop."""
        self.terminal.detach()
        # Textual's LinuxDriver; private attributes, held by tests/lab/test_terminal_hangup.py
        driver = getattr(self, "_driver", None)
        if driver is not None:
            driver._auto_restart = False  # SIGCONT would restart application mode on the terminal that is gone
            if getattr(driver, "_writer_thread", None) is not None:
                driver._writer_thread = _Discard()
        self._hangup_loop.call_soon_threadsafe(self.terminal_lost)

    def terminal_lost(self) -> None:
        """A running session goes on to its end unseen; one waiting for a key (paused, one step, holding at the end)
        ends as quitting ends it (always:, the servers stopped, the report); then the app exits with the session's
        code."""
        assert self.controller is not None
        if self.controller.mode != "running":
            self.controller.finish()
        self.run_worker(self._exit_when_done(), name="hangup", group="quit", exit_on_error=False)

    async def _exit_when_done(self) -> None:
        if self._session_worker is not None:
            with contextlib.suppress(Exception):  # its failure was recorded in the session already
                await self._session_worker.wait()
        self.terminal.release_input()  # Textual joins its input thread on the way out
        self.exit(self.exit_code)

    async def _run_session(self) -> Any:
        assert self.controller is not None
        outcome = await self.controller.start()
        if self.session_dir is not None:
            from orchestrator.session.recording import write_reports

            reports = await asyncio.to_thread(write_reports, self.session_dir, self._say_problem_from_thread)
            self.report_failures = reports.failures
        self.exit_code = outcome.exit_code
        self.update_status()
        return outcome

    def say_problem(self, message: str) -> None:
        """A failure the session survived (a sink, a cleanup, a report): shown for half a minute; the CLI
        repeats the session's list on stderr after the app exits."""
        self.notify(message, title="problem", severity="error", timeout=30)

    def _say_problem_from_thread(self, message: str) -> None:
        self.call_from_thread(self.say_problem, message)

    # -- events in --------------------------------------------------------------------------------
    def on_events_arrived(self, _: EventsArrived) -> None:
        main = self._main()
        if self.sink is None or main is None:
            return
        changed = main.apply_events(self.sink.drain())
        if changed - {"output"}:  # the status line only says what steps and servers do
            self.update_status()

    def update_status(self) -> None:
        main = self._main()
        if main is None or self.controller is None:
            return
        mode = self.controller.mode
        if mode == "holding" and self.terminal.lost:  # the playbook ran to its end unseen: nobody will press q
            self.controller.finish()
        waiting = self.controller.gate.waiting
        parts: dict[ControllerMode, str] = {
            "paused": f"[b yellow]paused[/] before {waiting.step_id} {waiting.name or waiting.action}" if waiting
            else "[b yellow]paused[/]",
            "running": "[b cyan]running[/]",
            "step": "[b cyan]stepping[/]",
            "holding": "[b green]playbook done[/] · poke around · q ends it",
            "finished": f"[b]session {self.model.status}[/]",
        }
        done = sum(1 for s in self.model.steps.values() if s.status not in ("pending", "running"))
        servers = len(self.model.running_servers())
        text = f"{parts[mode]} · {done}/{len(self.model.steps)} steps"
        if servers:
            text += f" · {servers} server(s) up"
        answer = self.model.answer if mode in ("holding", "finished") else None
        if answer is not None:  # the answer where a person looks once the playbook is done
            text += f"\n[b]verdict[/] {escape(answer.headline)}"
        main.set_status(text)

    def _main(self) -> MainScreen | None:
        for screen in self.screen_stack:
            if isinstance(screen, MainScreen):
                return screen
        return None

    # -- errors -----------------------------------------------------------------------------------
    def show_error(self, title: str, message: str) -> None:
        self.push_screen(ErrorDialog(title, message))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state != WorkerState.ERROR:
            return
        error = event.worker.error
        if isinstance(error, OrchestratorError):
            self.show_error(getattr(error, "title", "Error"), error.message)
        else:
            self.show_error(f"{event.worker.name or 'task'} failed", f"{type(error).__name__}: {error}")

    def _guard(self, command: Callable[[], Any]) -> Any:
        try:
            return command()
        except OrchestratorError as exc:
            self.show_error(getattr(exc, "title", "Error"), exc.message)
        return None

    def _poke(self, name: str, coro: Awaitable[Any]) -> None:
        """Run an ad-hoc step in its own worker; when done, select it (and its source, if any)."""

        async def run() -> Any:
            finished = await coro
            self.on_events_arrived(EventsArrived())  # its events first, so the panes know its result
            main = self._main()
            if main is not None and finished is not None:
                main.panes.select_step(finished.step_id)
            return finished

        self.run_worker(run(), name=name, group="adhoc", exit_on_error=False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in LIVE_ONLY and self.controller is None:
            return False
        return True

    # -- controls ---------------------------------------------------------------------------------
    @property
    def live(self) -> Controller:
        """The live session's controller: the live-only actions run only with one (``check_action``)."""
        assert self.controller is not None, "a live-only action ran without a live session"
        return self.controller

    def action_run_all(self) -> None:
        self.live.run_all()

    def action_next_step(self) -> None:
        self.live.next_step()

    def action_pause(self) -> None:
        self.live.pause()

    def action_skip(self) -> None:
        self.live.skip()

    def action_cancel(self) -> None:
        self.live.cancel()

    def _selected_step(self) -> str | None:
        main = self._main()
        return main.panes.selected_step if main else None

    def action_rerun(self) -> None:
        step_id = self._selected_step()
        if step_id is None:
            self.show_error("Nothing selected", "select a step in the step list first")
            return
        controller = self.live
        if self._guard(lambda: controller.find_step(step_id)) is not None:
            self._poke("rerun", controller.rerun(step_id))

    def action_edit_flags(self) -> None:
        step_id = self._selected_step()
        assert self.controller is not None
        controller = self.controller
        if step_id is None:
            self.show_error("Nothing selected", "select a server step in the step list first")
            return
        flags = self._guard(lambda: controller.server_flags(step_id))
        if flags is None:
            return
        step = controller.find_step(step_id)

        def done(answer: dict[str, Any] | None) -> None:
            if answer:
                self._poke("rerun", controller.rerun(answer["step_id"], flags=answer["flags"]))

        self.push_screen(FlagEditor(step_id, step.display_name, flags), done)

    def _hosts(self) -> list[str]:
        return list(self.model.hosts) or ["localhost"]

    def action_read_source(self) -> None:
        controller = self.controller
        assert controller is not None

        def done(answer: dict[str, Any] | None) -> None:
            if answer:
                self._poke("read_source", controller.read_source(
                    package=answer["package"], file=answer["file"], address=answer["address"],
                    symbol=answer["symbol"], host=answer["host"]))

        self.push_screen(ReadSourceForm(self._hosts()), done)

    def action_run_command(self) -> None:
        controller = self.controller
        assert controller is not None

        def done(answer: dict[str, Any] | None) -> None:
            if answer:
                self._poke("run_command", controller.run_command(answer["command"], host=answer["host"]))

        self.push_screen(CommandForm(self._hosts()), done)

    def action_note(self) -> None:
        controller = self.controller
        assert controller is not None

        def done(answer: dict[str, Any] | None) -> None:
            if answer:
                self._guard(lambda: controller.note(answer["text"], hypothesis_id=answer["hypothesis_id"],
                                                    step_id=answer["step_id"]))

        self.push_screen(NoteDialog(list(self.model.board.entries), self._selected_step()), done)

    def action_verdict(self) -> None:
        controller = self.controller
        assert controller is not None
        main = self._main()
        selected = main.panes.selected_hypothesis if main else None

        def done(answer: dict[str, Any] | None) -> None:
            if answer:
                self._guard(lambda: controller.verdict(answer["hypothesis_id"], answer["state"], answer["because"]))

        self.push_screen(VerdictDialog(list(self.model.board.entries), selected), done)

    def action_tab(self, tab: str) -> None:
        screen = self.screen
        panes = screen.query("#panes")
        if panes:
            panes.first(SessionPanes).show_tab(tab)

    # -- quitting ---------------------------------------------------------------------------------
    async def action_quit(self) -> None:
        self.action_quit_session()

    def action_quit_session(self) -> None:
        if self.controller is None:
            self.exit(0)
            return
        running = self.model.running_servers()
        if running:
            names = [f"{s.engine}@{s.host}:{s.port or '?'}" for s in running]
            self.push_screen(QuitDialog(names), lambda ok: self._end_session() if ok else None)
        else:
            self._end_session()

    def _end_session(self) -> None:
        main = self._main()
        if main is not None:
            main.set_status("[b]ending the session[/] (always:, stopping servers, writing the report)…")
        self.run_worker(self._finish(), name="quit", group="quit", exit_on_error=False)

    async def _finish(self) -> None:
        assert self.controller is not None
        self.controller.finish()
        if self._session_worker is not None:
            try:
                await self._session_worker.wait()
            except Exception:  # its failure was shown already; leave anyway
                self.exit_code = self.exit_code or 1
        self.exit(self.exit_code)
