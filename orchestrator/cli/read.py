"""`read`: the seed's `ssh gpu1 'sed -n 155,200p .../eagle_worker.py'`, located, versioned and recorded."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from orchestrator.cli.common import handle_errors, resolve_inventory

if TYPE_CHECKING:
    from orchestrator.events import Event


def register(app: typer.Typer) -> None:
    app.command("read")(read)


@handle_errors
def read(
    host: Annotated[str, typer.Argument(help="Inventory host (e.g. lab, gpu1) or [user@]address[:port].")],
    package: Annotated[str, typer.Argument(help="Installed package: sglang, vllm, transformers, ...")],
    file: Annotated[str | None, typer.Argument(help="File relative to the package root.")] = None,
    address: Annotated[str | None, typer.Argument(help="sed-style range: 155,200 | 155,+45 | /re/,/re/ | $")] = None,
    symbol: Annotated[str | None, typer.Option("--symbol", "-s", help="Class/function, e.g. EAGLEWorker.__init__.")] = None,
    pattern: Annotated[str | None, typer.Option("--pattern", "-p", help="grep regex (whole package unless FILE).")] = None,
    context: Annotated[int, typer.Option("--context", "-C", help="Context lines around pattern matches.")] = 3,
    inventory: Annotated[Path | None, typer.Option("-i", "--inventory", help="Inventory YAML (default: the lab).")] = None,
    sessions_dir: Annotated[Path | None, typer.Option("--sessions-dir", envvar="ORCHESTRATOR_SESSIONS_DIR")] = None,
) -> None:
    """Print source from the package installed on HOST, with line numbers and version; recorded as a session."""
    from orchestrator.cli.common import ensure_lab_for
    from orchestrator.errors import UserInputError
    from orchestrator.playbook.models import Playbook, Step
    from orchestrator.session.recording import open_session

    modes = [m for m in (address, symbol, pattern) if m]
    if len(modes) != 1:
        raise UserInputError("give exactly one of: an ADDRESS (after FILE), --symbol, or --pattern")
    if address and not file:
        raise UserInputError("a line ADDRESS needs a FILE")
    args: dict[str, Any] = {"package": package}
    if file:
        args["file"] = file
    if address:
        args["lines"] = address
    if symbol:
        args["symbol"] = symbol
    if pattern:
        args["pattern"], args["context"] = pattern, context
    inv = resolve_inventory(inventory, host)
    inv = ensure_lab_for(inv, [host])
    step = Step(action="read_source", args=args, name=f"read {package} {file or ''} {address or symbol or pattern}".strip(),
                step_id="s1")
    pb = Playbook(name=f"read-{package}", hosts=host, steps=[step])
    from orchestrator.console import ConsoleSink

    result = open_session(pb, inv, sinks=[_SourcePrinter(), ConsoleSink(verbose=False)],
                          sessions_dir=sessions_dir, argv=sys.argv[1:]).run()
    raise typer.Exit(result.outcome.exit_code)


class _SourcePrinter:
    """Prints the read's stdout (the numbered source) as it arrives, plainly, for piping."""

    def handle(self, event: Event) -> None:
        from orchestrator.events import Output

        if isinstance(event, Output) and event.stream == "stdout":
            sys.stdout.write(event.text)
            sys.stdout.flush()

    def close(self) -> None:
        pass
