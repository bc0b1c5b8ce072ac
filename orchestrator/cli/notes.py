"""`note` and `verdict`: a person's observations and conclusions, recorded into a saved session."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.common import handle_errors

SessionsOpt = Annotated[Path | None, typer.Option("--sessions-dir", help="Sessions root (default ./sessions).", envvar="ORCHESTRATOR_SESSIONS_DIR")]


def register(app: typer.Typer) -> None:
    app.command("note")(note)
    app.command("verdict")(verdict)


@handle_errors
def note(
    session: Annotated[str, typer.Argument(help="Session directory, name, unique prefix, or 'last'.")],
    text: Annotated[str, typer.Argument(help="The note.")],
    hypothesis: Annotated[str | None, typer.Option("--hypothesis", "-H", help="Attach to a hypothesis id.")] = None,
    sessions_dir: SessionsOpt = None,
) -> None:
    """Add a note to a session (shown in the timeline and the report)."""
    from orchestrator.session.amend import add_note
    from orchestrator.session.reader import find_session
    from orchestrator.session.recording import write_reports

    directory = find_session(session, sessions_dir)
    add_note(directory, text, hypothesis_id=hypothesis)
    write_reports(directory)
    typer.echo(f"note added to {directory.name}")


@handle_errors
def verdict(
    session: Annotated[str, typer.Argument(help="Session directory, name, unique prefix, or 'last'.")],
    hypothesis: Annotated[str, typer.Argument(help="Hypothesis id.")],
    state: Annotated[str, typer.Argument(help="confirmed | supported | refuted | inconclusive | open")],
    because: Annotated[str, typer.Option("--because", help="The observation that decides it.")] = "",
    sessions_dir: SessionsOpt = None,
) -> None:
    """Set a hypothesis's state by hand, with the reason; recorded like a rule's verdict."""
    from orchestrator.session.amend import add_verdict
    from orchestrator.session.reader import find_session
    from orchestrator.session.recording import write_reports

    directory = find_session(session, sessions_dir)
    event = add_verdict(directory, hypothesis, state, because)
    write_reports(directory)
    conflict = f" (contradicts earlier {event.conflicts_with})" if event.conflicts_with else ""
    typer.echo(f"{hypothesis}: {event.previous} → {event.state}{conflict}")
