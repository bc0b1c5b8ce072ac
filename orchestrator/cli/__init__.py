"""The `orchestrator` command. Sub-commands live in sibling modules; heavy imports stay inside them
so `orchestrator --help` starts fast."""

from __future__ import annotations

import sys

import typer

from orchestrator.cli import cleanup as _cleanup
from orchestrator.cli import hosts as _hosts
from orchestrator.cli import lab as _lab
from orchestrator.cli import mcp as _mcp
from orchestrator.cli import notes as _notes
from orchestrator.cli import read as _read
from orchestrator.cli import rules as _rules
from orchestrator.cli import run as _run
from orchestrator.cli import sessions as _sessions
from orchestrator.cli import tui as _tui
from orchestrator.cli.common import report_error

app = typer.Typer(
    name="orchestrator",
    help="Recorded, repeatable investigations of speculative-decoding problems (EAGLE-3 on SGLang) on GPU servers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


@app.callback()
def _global_options(
    ctx: typer.Context,
    debug: bool = typer.Option(False, "--debug", help="Log the SSH, agent and server-client traffic (redacted) to "
                               "stderr; under `tui`, to debug.log in the cache dir. Also ORCHESTRATOR_DEBUG=1."),
    version: bool = typer.Option(False, "--version", is_eager=True, callback=lambda v: _print_version(v),
                                 help="Print the installed version and exit."),
) -> None:
    from orchestrator import debuglog

    if debuglog.requested(debug):
        path = None
        if ctx.invoked_subcommand == "tui":  # the screen is the TUI's: the lines go to a file
            import os
            from pathlib import Path

            root = Path(os.environ.get("ORCHESTRATOR_CACHE_DIR") or Path.home() / ".cache" / "orchestrator")
            root.mkdir(parents=True, exist_ok=True)
            path = root / "debug.log"
        debuglog.enable(path=path)


def _print_version(wanted: bool) -> None:
    if wanted:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"orchestrator {version('orchestrator')}")
        except PackageNotFoundError:  # run from a source tree that was never installed
            typer.echo("orchestrator (not installed: run from a source tree)")
        raise typer.Exit()


_run.register(app)
_sessions.register(app)
_notes.register(app)
_read.register(app)
_rules.register(app)
app.add_typer(_hosts.hosts_app, name="hosts")
_cleanup.register(app)
app.add_typer(_lab.lab_app, name="lab")
app.command("tui")(_tui.tui)
app.command("mcp")(_mcp.mcp)


def main() -> None:
    from orchestrator.errors import OrchestratorError

    try:
        app(standalone_mode=True)
    except OrchestratorError as exc:  # raised outside a command body (rare)
        report_error(exc)
        sys.exit(exc.exit_code)
