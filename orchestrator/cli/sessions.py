"""`sessions list|show|export|import`, `report`: reading and sharing saved sessions."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.common import handle_errors

sessions_app = typer.Typer(help="List and inspect saved sessions.", no_args_is_help=True)
SessionsOpt = Annotated[Path | None, typer.Option("--sessions-dir", help="Sessions root (default ./sessions).", envvar="ORCHESTRATOR_SESSIONS_DIR")]


def register(app: typer.Typer) -> None:
    app.add_typer(sessions_app, name="sessions")
    app.command("report")(report)


@sessions_app.command("list")
@handle_errors
def list_cmd(sessions_dir: SessionsOpt = None) -> None:
    """Saved sessions, oldest first."""
    from rich.console import Console
    from rich.table import Table

    from orchestrator.events import StepFinished
    from orchestrator.session.reader import list_sessions, read_session, sessions_root

    table = Table("session", "playbook", "status", "steps", "duration", box=None)
    for path in list_sessions(sessions_dir):
        loaded = read_session(path)
        started, finished = loaded.started, loaded.finished
        steps = len(loaded.of_type(StepFinished))
        status: str = finished.status if finished else "[yellow]incomplete[/]"
        if finished and loaded.incomplete:
            status += " [yellow](incomplete)[/]"
        table.add_row(path.name, started.playbook if started else "?", status, str(steps),
                      f"{finished.duration:.1f}s" if finished else "-")
    console = Console(highlight=False)
    if not table.rows:
        console.print(f"no sessions under {sessions_root(sessions_dir)}")
        return
    console.print(table)


@sessions_app.command("show")
@handle_errors
def show_cmd(
    session: Annotated[str, typer.Argument(help="Session directory, name, unique prefix, or 'last'.")],
    sessions_dir: SessionsOpt = None,
    output: Annotated[bool, typer.Option("--output", help="Include each step's output.")] = False,
) -> None:
    """One session's timeline."""
    from rich.console import Console
    from rich.markup import escape

    from orchestrator.console import STATUS_STYLE
    from orchestrator.events import HypothesisUpdated, NoteAdded, Output, StepFinished
    from orchestrator.session.reader import find_session, read_session

    loaded = read_session(find_session(session, sessions_dir))
    console = Console(highlight=False)
    start = loaded.started
    t0 = start.ts if start else 0.0
    if start:
        when = datetime.fromtimestamp(start.ts).isoformat(timespec="seconds")
        console.print(f"[bold]{escape(start.playbook)}[/] {when} on {', '.join(start.hosts) or '-'}  [dim]{loaded.directory}[/]")
    outputs: dict[str, list[str]] = {}
    for event in loaded.events:
        match event:
            case Output():
                outputs.setdefault(event.step_id, []).append(event.text)
            case StepFinished():
                icon, style = STATUS_STYLE.get(event.status, ("?", ""))
                console.print(f"+{event.ts - t0:7.2f}s [{style}]{icon} {event.status:<11}[/] {escape(event.name)} "
                              f"[dim]{event.duration:.2f}s[/]")
                if event.error and event.status != "ok":
                    console.print(f"           [{style}]{escape(event.error[:500])}[/]")
                if output and outputs.get(event.step_id):
                    for line in "".join(outputs[event.step_id]).splitlines()[-40:]:
                        console.print(f"           │ {escape(line)}", soft_wrap=True)
            case HypothesisUpdated():
                console.print(f"+{event.ts - t0:7.2f}s ⚑ {event.hypothesis_id} → {event.state}"
                              f"{' — ' + escape(event.evidence) if event.evidence else ''}")
            case NoteAdded():
                console.print(f"+{event.ts - t0:7.2f}s ✎ {escape(event.text)}")
            case _:  # the rest is in the report
                pass
    fin = loaded.finished
    if fin:
        console.print(f"[bold]■ {fin.status}[/] in {fin.duration:.1f}s")
    else:
        console.print("[yellow]■ incomplete[/] (no session_finished event: the run was killed)")
    problems = loaded.problems
    if problems:
        label = "incomplete record" if loaded.incomplete else "problems"
        console.print(f"[yellow]{label}:[/]")
        for problem in problems:
            console.print(f"  [yellow]{escape(problem)}[/]", soft_wrap=True)


@handle_errors
def report(
    session: Annotated[str, typer.Argument(help="Session directory, name, unique prefix, or 'last'.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="md or html.")] = "md",
    sessions_dir: SessionsOpt = None,
    stdout: Annotated[bool, typer.Option("--stdout", help="Print instead of writing into the session.")] = False,
    with_prompts: Annotated[bool, typer.Option(
        "--with-prompts", help="Add a replayed traffic file's requests one by one, each with the start of its prompt, "
                               "read from the file now; printed only (implies --stdout), never kept in the session."
    )] = False,
) -> None:
    """Write the postmortem report (report.md / report.html) into the session directory."""
    from orchestrator.errors import UserInputError
    from orchestrator.session.reader import find_session
    from orchestrator.session.report import render_report, write_report

    if fmt not in ("md", "html"):
        raise UserInputError(f"--format must be md or html (got {fmt!r})")
    directory = find_session(session, sessions_dir)
    failures: list[str] = []
    if stdout or with_prompts:
        typer.echo(render_report(directory, fmt=fmt, failures=failures, with_prompts=with_prompts))
    else:
        typer.echo(str(write_report(directory, fmt=fmt, failures=failures)))
    for failure in failures:  # the report says it too, in the section's place
        typer.echo(f"orchestrator: report.{fmt}: {failure}", err=True)


@sessions_app.command("export")
@handle_errors
def export_cmd(
    session: Annotated[str, typer.Argument(help="Session directory, name, unique prefix, or 'last'.")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Archive to write (default ./SESSION.tar.gz).")] = None,
    anonymise_paths: Annotated[bool, typer.Option(
        "--anonymise-paths", help="Replace this machine's paths (session, sessions dir, cwd, home) by <session>, "
                                  "<sessions>, <cwd>, ~.")] = False,
    anonymise: Annotated[list[Path] | None, typer.Option(
        "--anonymise", help="Another local path to replace (<path1>, ...); implies --anonymise-paths.")] = None,
    secret_env: Annotated[list[str] | None, typer.Option(
        "--secret-env", help="Also mask the value of this environment variable (repeatable). Secret-named "
                             "ones (HF_TOKEN, API_KEY...) are masked without asking.")] = None,
    sessions_dir: SessionsOpt = None,
) -> None:
    """Pack one session into a .tar.gz a colleague can import, replay and report: secrets masked again,
    reports rendered from the masked log, local paths optionally anonymised."""
    from orchestrator.errors import UserInputError
    from orchestrator.session.reader import find_session
    from orchestrator.session.share import export_session

    directory = find_session(session, sessions_dir)
    archive = output or Path(f"{directory.name}.tar.gz")
    if not archive.name.endswith((".tar.gz", ".tgz")):
        raise UserInputError(f"-o {archive}: the archive is a gzip'd tar; name it .tar.gz or .tgz")
    if not archive.parent.is_dir():
        raise UserInputError(f"-o {archive}: folder {archive.parent} does not exist")
    try:
        summary = export_session(directory, archive, anonymise_paths=anonymise_paths or bool(anonymise),
                                 extra_paths=anonymise or [], secret_env=secret_env or [])
    except OSError as exc:
        raise UserInputError(f"cannot write {archive}: {exc.strerror or exc}") from None
    typer.echo(str(summary.archive))
    notes = [f"{summary.files} files"]
    if summary.masked:
        notes.append(f"{summary.masked} more value(s) that looked like secrets masked by the export scan")
    if summary.anonymised:
        notes.append(f"{summary.anonymised} local path(s) anonymised")
    typer.echo("orchestrator: exported " + "; ".join(notes), err=True)
    if summary.binary:
        typer.echo(f"orchestrator: copied without a secrets scan (binary): {', '.join(summary.binary)}", err=True)
    for failure in summary.report_failures:
        typer.echo(f"orchestrator: {failure}", err=True)


@sessions_app.command("import")
@handle_errors
def import_cmd(
    archive: Annotated[Path, typer.Argument(help="An archive made by `orchestrator sessions export`.")],
    name: Annotated[str | None, typer.Option("--name", help="Import under this name (default: the exported one).")] = None,
    sessions_dir: SessionsOpt = None,
) -> None:
    """Unpack an exported session into the sessions dir, ready for `report`, `sessions show` and `tui --replay`."""
    from orchestrator.session.reader import sessions_root
    from orchestrator.session.share import import_session

    summary = import_session(archive, sessions_root(sessions_dir), name=name)
    typer.echo(str(summary.directory))
    manifest = summary.manifest
    extra = " (paths anonymised)" if manifest.get("anonymised_paths") else ""
    typer.echo(f"orchestrator: imported {manifest['session']} from orchestrator {manifest.get('orchestrator_version', '?')}"
               f"{extra}; replay: orchestrator tui --replay {summary.directory.name}", err=True)
    if summary.problems:
        typer.echo(f"orchestrator: the session's record is incomplete: {'; '.join(summary.problems)}", err=True)
