"""`orchestrator tui [PLAYBOOK]` and `orchestrator tui --replay SESSION`. Textual is imported inside the
command, so the rest of the CLI (and the core) never loads it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.common import handle_errors, inventory_var_names, parse_extra_vars, resolve_inventory

InventoryOpt = Annotated[Path | None, typer.Option("-i", "--inventory", help="Inventory YAML (default: the embedded lab).")]
HostOpt = Annotated[str | None, typer.Option("--host", help="Target one host: an inventory name or [user@]address[:port].")]
ExtraOpt = Annotated[list[str] | None, typer.Option("-e", "--extra-vars", help="KEY=VALUE or @vars.yaml (repeatable).")]
SessionsOpt = Annotated[Path | None, typer.Option("--sessions-dir", help="Where sessions are saved (default ./sessions).",
                                                  envvar="ORCHESTRATOR_SESSIONS_DIR")]


@handle_errors
def tui(
    playbook: Annotated[Path | None, typer.Argument(help="Playbook YAML or a bundled playbook's name (omit with --replay).")] = None,
    inventory: InventoryOpt = None,
    host: HostOpt = None,
    extra_vars: ExtraOpt = None,
    replay: Annotated[str | None, typer.Option("--replay", help="Replay a saved session (path, name, prefix or `last`).")] = None,
    sessions_dir: SessionsOpt = None,
    run_all: Annotated[bool, typer.Option("--run", help="Start running at once instead of paused before step 1.")] = False,
) -> None:
    """Run a playbook interactively (pause, step, rerun, poke around; all recorded) or replay a session."""
    from orchestrator.errors import UserInputError

    if replay is not None:
        if playbook is not None:
            raise UserInputError("give a playbook or --replay SESSION, not both")
        from orchestrator.session.reader import find_session, read_session
        from orchestrator.tui.app import OrchestratorApp

        loaded = read_session(find_session(replay, sessions_dir))
        OrchestratorApp(replay=loaded).run()
        return
    if playbook is None:
        raise UserInputError("give a playbook to run (or --replay SESSION to replay one)")

    from orchestrator.playbook.loader import load_playbook
    from orchestrator.session.recording import open_session
    from orchestrator.tui.app import OrchestratorApp
    from orchestrator.tui.messages import TuiSink

    extra = parse_extra_vars(extra_vars)
    inv = resolve_inventory(inventory, host)
    pb = load_playbook(playbook, extra_names=inventory_var_names(inv, extra))
    if host:
        pb = pb.model_copy(update={"hosts": host})
    sink = TuiSink()
    session = open_session(pb, inv, sinks=[sink], sessions_dir=sessions_dir, extra_vars=extra, argv=sys.argv[1:])
    directory = session.directory
    controller = session.controller(start_mode="running" if run_all else "paused")
    app = OrchestratorApp(controller=controller, sink=sink, session_dir=directory)
    code = app.run()
    for problem in [*controller.view.problems.summary(), *app.report_failures]:  # said in the app too, but it is gone now
        typer.echo(f"orchestrator: {problem}", err=True)
    typer.echo(f"session saved: {directory}", err=True)
    raise typer.Exit(code or 0)


if __name__ == "__main__":  # `python -m orchestrator.cli.tui` works before the command is registered
    typer.run(tui)
