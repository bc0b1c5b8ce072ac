"""Running a playbook as a recorded session: session dir, sinks, signals, report. Shared by the CLI
commands (run, exec, read), the TUI and MCP (``open_session``), and usable from tests in-process (``build_runner``).

The front ends never hold the runner: ``open_session`` gives them a ``PreparedSession``, which runs headless
(``run``) or hands out the command API (``controller``: ``orchestrator.runner.control.Controller``, whose
``view`` is what a front end reads of the live session)."""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.inventory import Inventory
from orchestrator.playbook.models import Playbook
from orchestrator.runner import PlaybookRunner, RunnerOptions, SessionOutcome
from orchestrator.runner.control import Controller, Mode
from orchestrator.runner.problems import describe_error, say_on_stderr
from orchestrator.runner.sinks import EventSink
from orchestrator.session.answer import VERDICT_SCHEMA_VERSION, account_of
from orchestrator.session.compose import compose_runner
from orchestrator.session.log import SessionLog, new_session_dir
from orchestrator.session.reader import LoadedSession, read_session, sessions_root
from orchestrator.session.report import write_report

REPORT_FORMATS = ("md", "html")


@dataclass
class ReportsWritten:
    written: list[Path] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # a report not written, or a section of one that failed


@dataclass
class SessionRun:
    outcome: SessionOutcome
    directory: Path
    reports: ReportsWritten = field(default_factory=ReportsWritten)


@dataclass
class PreparedSession:
    """A composed session, not yet started: where it records, and the two ways a front end drives it."""

    directory: Path
    _runner: PlaybookRunner = field(repr=False)

    def run(self) -> SessionRun:
        """Headless to its end (the CLI's run, exec and read): signals cancel, the reports are written."""
        return run_session(self._runner, self.directory)

    def controller(self, *, start_mode: Mode = "paused", author: str | None = None) -> Controller:
        """The command API over the session (the TUI's, MCP's): ``start()`` runs it, the rest steers it."""
        return Controller(self._runner, start_mode=start_mode, author=author)


def prepare_session(playbook: Playbook, root: str | Path | None) -> tuple[Path, str]:
    """The session's directory and its id. The id also names the session's workdir on every host
    (``<state_dir>/sessions/<id>``), a place every controller reaching that host shares, where the session's end
    removes it: the directory's name is unique only in this sessions dir (two test workers, two machines starting
    the same playbook in the same second would share it), so a random tail keeps their workdirs apart."""
    directory = new_session_dir(sessions_root(root), playbook.name)
    return directory, f"{directory.name}-{secrets.token_hex(3)}"


def build_runner(
    playbook: Playbook,
    inventory: Inventory,
    *,
    sinks: list[EventSink],
    sessions_dir: str | Path | None = None,
    extra_vars: dict[str, Any] | None = None,
    keep_remote: bool = False,
    forks: int = 16,
    argv: list[str] | None = None,
) -> tuple[PlaybookRunner, Path]:
    directory, session_id = prepare_session(playbook, sessions_dir)
    log = SessionLog(directory)
    options = RunnerOptions(
        extra_vars=extra_vars or {}, forks=forks, keep_remote=keep_remote, session_id=session_id,
        session_dir=directory, argv=list(argv or []),
    )
    runner = compose_runner(playbook, inventory=inventory, sinks=[log, *sinks], options=options)
    return runner, directory


def open_session(
    playbook: Playbook,
    inventory: Inventory,
    *,
    sinks: list[EventSink],
    sessions_dir: str | Path | None = None,
    extra_vars: dict[str, Any] | None = None,
    keep_remote: bool = False,
    forks: int = 16,
    argv: list[str] | None = None,
) -> PreparedSession:
    """The session a front end runs: composed (``build_runner``), its directory made, nothing started."""
    runner, directory = build_runner(playbook, inventory, sinks=sinks, sessions_dir=sessions_dir,
                                     extra_vars=extra_vars, keep_remote=keep_remote, forks=forks, argv=argv)
    return PreparedSession(directory, runner)


async def run_with_signals(runner: PlaybookRunner) -> SessionOutcome:
    """Run the runner; SIGINT/SIGTERM cancel the running step (``always:`` still runs), twice aborts. SIGHUP (the
    terminal closed) ends the showing only: the run goes on to its end, unseen (session/terminal.py)."""
    from orchestrator.session.terminal import Terminal

    loop = asyncio.get_running_loop()
    installed = []
    terminal = Terminal()
    handlers: list[tuple[signal.Signals, Callable[[], None]]] = [
        (signal.SIGINT, runner.cancel), (signal.SIGTERM, runner.cancel), (signal.SIGHUP, terminal.detach)]
    for sig, handler in handlers:
        try:
            loop.add_signal_handler(sig, handler)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # not the main thread (TUI worker, tests)
            pass
    try:
        return await runner.run()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def write_reports(directory: Path, say: Callable[[str], None] = say_on_stderr) -> ReportsWritten:
    """Write report.md and report.html for a session. A failure does not fail the run (the log is the
    record; the exit code is the playbook's) but it is said, naming the report, and returned."""
    reports = ReportsWritten()
    try:
        session: LoadedSession | None = read_session(directory)  # once for every format
    except Exception:  # each report then tries on its own and says why it failed
        session = None
    for fmt in REPORT_FORMATS:
        broken_sections: list[str] = []
        try:
            reports.written.append(write_report(directory, fmt=fmt, failures=broken_sections, session=session))
        except Exception as exc:
            stale = " (an older one is left there, out of date)" if (directory / f"report.{fmt}").exists() else ""
            reports.failures.append(f"report.{fmt} was not written{stale}: {describe_error(exc)}")
            continue
        reports.failures.extend(f"report.{fmt}: {failure}" for failure in broken_sections)
    try:
        write_verdict(directory, session)
    except Exception as exc:
        reports.failures.append(f"verdict.json was not written: {describe_error(exc)}")
    for failure in reports.failures:
        say(f"{failure} — the session log is intact; `orchestrator report {directory}` tries again")
    return reports


def write_verdict(directory: Path, session: LoadedSession | None) -> Path | None:
    """``verdict.json``: the answer for scripts (docs/verdict-json.md), when the session is an investigation of a
    speculative server; the same account the console's last line and the report's first line tell."""
    if session is None:
        return None
    answer = account_of(session.events)
    if answer is None:
        return None
    path = directory / "verdict.json"
    doc = {"schema_version": VERDICT_SCHEMA_VERSION, "session": directory.name, "exit_code": answer.exit_code,
           **answer.model_dump(mode="json")}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def run_session(runner: PlaybookRunner, directory: Path) -> SessionRun:
    outcome = asyncio.run(run_with_signals(runner))
    reports = write_reports(directory, say=runner.problems.say)
    return SessionRun(outcome=outcome, directory=directory, reports=reports)
