"""Running a playbook as a recorded session: session dir, sinks, signals, report. Shared by the CLI
commands (run, exec, read) and usable from tests in-process."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.engine import Engine, EngineOptions, SessionOutcome
from orchestrator.engine.sinks import EventSink
from orchestrator.inventory import Inventory
from orchestrator.playbook.models import Playbook
from orchestrator.session.log import SessionLog, new_session_dir
from orchestrator.session.reader import sessions_root


@dataclass
class SessionRun:
    outcome: SessionOutcome
    directory: Path
    engine: Engine


def prepare_session(playbook: Playbook, root: str | Path | None) -> tuple[Path, str]:
    directory = new_session_dir(sessions_root(root), playbook.name)
    return directory, directory.name


def build_engine(
    playbook: Playbook,
    inventory: Inventory,
    *,
    sinks: list[EventSink],
    sessions_dir: str | Path | None = None,
    extra_vars: dict[str, Any] | None = None,
    keep_remote: bool = False,
    forks: int = 16,
    argv: list[str] | None = None,
) -> tuple[Engine, Path]:
    directory, session_id = prepare_session(playbook, sessions_dir)
    log = SessionLog(directory)
    options = EngineOptions(
        extra_vars=extra_vars or {}, forks=forks, keep_remote=keep_remote, session_id=session_id,
        session_dir=directory, argv=list(argv or []),
    )
    engine = Engine(playbook, inventory=inventory, sinks=[log, *sinks], options=options)
    install_extensions(engine)
    return engine, directory


def install_extensions(engine: Engine) -> None:
    """Per-session services other areas plug in (hypothesis board, servers). Imported lazily."""
    with contextlib.suppress(ImportError):
        from orchestrator.hypotheses.board import attach_board

        attach_board(engine)
    with contextlib.suppress(ImportError):
        from orchestrator.engines.registry import attach_servers

        attach_servers(engine)


async def run_with_signals(engine: Engine) -> SessionOutcome:
    """Run the engine; SIGINT/SIGTERM cancel the running step (``always:`` still runs), twice aborts."""
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, engine.cancel)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # not the main thread (TUI worker, tests)
            pass
    try:
        return await engine.run()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def write_reports(directory: Path) -> list[Path]:
    """Write report.md (and report.html) for a finished session; never fails the run."""
    written = []
    try:
        from orchestrator.session.report import write_report

        written.append(write_report(directory, fmt="md"))
        with contextlib.suppress(Exception):
            written.append(write_report(directory, fmt="html"))
    except Exception:  # the log is the record; a report bug must not lose the session's exit code
        pass
    return written


def run_session(engine: Engine, directory: Path) -> SessionRun:
    outcome = asyncio.run(run_with_signals(engine))
    write_reports(directory)
    return SessionRun(outcome=outcome, directory=directory, engine=engine)
