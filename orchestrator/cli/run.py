"""`run`, `validate`, `schema`, `exec`: playbooks in, sessions out."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.common import handle_errors, inventory_var_names, parse_extra_vars, resolve_inventory

if TYPE_CHECKING:
    from orchestrator.console import ConsoleSink
    from orchestrator.runner.sinks import EventSink

InventoryOpt = Annotated[Path | None, typer.Option("-i", "--inventory", help="Inventory YAML (default: the embedded lab).")]
HostOpt = Annotated[str | None, typer.Option("--host", help="Target one host: an inventory name or [user@]address[:port].")]
ExtraOpt = Annotated[list[str] | None, typer.Option("-e", "--extra-vars", help="KEY=VALUE or @vars.yaml (repeatable).")]
SessionsOpt = Annotated[Path | None, typer.Option("--sessions-dir", help="Where sessions are saved (default ./sessions).", envvar="ORCHESTRATOR_SESSIONS_DIR")]


PLAYBOOK_HELP = "Playbook YAML, or a bundled playbook's name (eagle3, the flagship; `orchestrator playbooks` lists them)."


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("playbooks")(playbooks)
    app.command("validate")(validate)
    app.command("schema")(schema)
    app.command("exec")(exec_command)


@handle_errors
def run(
    playbook: Annotated[Path, typer.Argument(help=PLAYBOOK_HELP)],
    inventory: InventoryOpt = None,
    host: HostOpt = None,
    extra_vars: ExtraOpt = None,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="Show each step's output live.")] = False,
    json_events: Annotated[bool, typer.Option("--json", help="Print the event stream as JSON lines instead.")] = False,
    sessions_dir: SessionsOpt = None,
    keep_remote: Annotated[bool, typer.Option("--keep-remote", help="Keep the remote session workdir.")] = False,
    forks: Annotated[int, typer.Option("--forks", min=1, help="Hosts a step runs on at once.")] = 16,
    verdict_exit: Annotated[bool, typer.Option(
        "--verdict-exit", help="Exit with the verdict's code when every step ran: 0 cause verified or nothing "
        "wrong, 3 cause verified with the symptom not gone, 4 cause found with no servable fix, 5 not explained "
        "(verdict.json in the session holds the same).")] = False,
) -> None:
    """Run a playbook headless and save the session (exit 0 ok, 1 a step failed, 2 bad input, 130 cancelled)."""
    from orchestrator.cli.common import ensure_lab_for
    from orchestrator.playbook.loader import load_playbook
    from orchestrator.session.recording import open_session

    extra = parse_extra_vars(extra_vars)
    inv = resolve_inventory(inventory, host)
    pb = load_playbook(playbook, extra_names=inventory_var_names(inv, extra))
    if host:
        pb = pb.model_copy(update={"hosts": host})
    inv = ensure_lab_for(inv, pb.hosts)
    sinks, console_sink = _sinks(verbose, json_events)
    session = open_session(pb, inv, sinks=sinks, sessions_dir=sessions_dir, extra_vars=extra,
                           keep_remote=keep_remote, forks=forks, argv=sys.argv[1:])
    if console_sink is not None:
        console_sink.session_dir = str(session.directory)
    result = session.run()
    code = result.outcome.exit_code
    if verdict_exit and code == 0:
        from orchestrator.session.answer import account_of
        from orchestrator.session.reader import read_session

        answer = account_of(read_session(session.directory).events)
        code = answer.exit_code if answer is not None else code
    raise typer.Exit(code)


def _sinks(verbose: bool, json_events: bool) -> tuple[list[EventSink], ConsoleSink | None]:
    if json_events:
        from orchestrator.console import JsonLinesSink

        return [JsonLinesSink()], None
    from orchestrator.console import ConsoleSink

    sink = ConsoleSink(verbose=verbose)
    return [sink], sink


@handle_errors
def playbooks() -> None:
    """List the playbooks bundled with the tool: `orchestrator run NAME` runs one from any directory."""
    from rich.console import Console

    from orchestrator.playbook.bundled import FLAGSHIP_NAME, bundled_playbooks
    from orchestrator.playbook.yamlio import load_yaml

    console = Console(highlight=False)
    for name, path in bundled_playbooks().items():
        data, _ = load_yaml(path)
        about = " ".join(str(data.get("description") or "").split()) if isinstance(data, dict) else ""
        first = about.split(". ")[0].rstrip(".")
        mark = " (the flagship)" if name == FLAGSHIP_NAME else ""
        console.print(f"[bold]{name}[/]{mark}: {first}" if first else f"[bold]{name}[/]{mark}", soft_wrap=False)
    console.print(f"[dim]in {next(iter(bundled_playbooks().values())).parent}[/]")


@handle_errors
def validate(
    playbook: Annotated[Path, typer.Argument(help=PLAYBOOK_HELP)],
    inventory: InventoryOpt = None,
    extra_vars: ExtraOpt = None,
) -> None:
    """Check a playbook without running it: every mistake as file:line:col (exit 2)."""
    from rich.console import Console

    from orchestrator.inventory import Inventory, load_inventory
    from orchestrator.playbook.loader import load_playbook

    extra = parse_extra_vars(extra_vars)
    inv = load_inventory(inventory) if inventory else _default_inventory_quiet()
    pb = load_playbook(playbook, extra_names=inventory_var_names(inv or Inventory(), extra))
    Console(highlight=False).print(
        f"[green]✓[/] {playbook}: playbook {pb.name!r} is valid — {len(pb.steps)} steps, {len(pb.always)} always, "
        f"{len(pb.hypotheses)} hypotheses"
    )


def _default_inventory_quiet() -> object:
    from orchestrator.cli.common import default_inventory

    return default_inventory()


@handle_errors
def schema(
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write to a file instead of stdout.")] = None,
) -> None:
    """Print the playbook JSON Schema (reference it from YAML for editor completion)."""
    import json

    from orchestrator.playbook.schema import playbook_schema

    text = json.dumps(playbook_schema(), indent=2)
    if output:
        output.write_text(text + "\n", encoding="utf-8")
    else:
        sys.stdout.write(text + "\n")


@handle_errors
def exec_command(
    host: Annotated[str, typer.Argument(help="Inventory host (or [user@]address[:port]).")],
    command: Annotated[list[str], typer.Argument(help="The command, after `--`.")],
    inventory: InventoryOpt = None,
    sessions_dir: SessionsOpt = None,
    timeout: Annotated[float | None, typer.Option("--timeout", help="Seconds before the command is killed.")] = None,
    json_events: Annotated[bool, typer.Option("--json", help="Print events as JSON lines.")] = False,
) -> None:
    """Run an ad-hoc command on a host, recorded as a one-step session: `orchestrator exec gpu1 -- nvidia-smi`."""
    from orchestrator.playbook.models import Playbook, Step
    from orchestrator.session.recording import open_session

    inv = resolve_inventory(inventory, host)
    target = host if host in inv.hosts or host in ("localhost", "local") else inv.default_hosts
    # A single argument is a shell command line; several are an argv (no shell involved).
    args = {"command": command[0]} if len(command) == 1 else {"argv": list(command)}
    step = Step(action="shell", args=args, name=" ".join(command)[:80], step_id="s1", timeout=timeout)
    pb = Playbook(name=f"exec-{host}", hosts=target, steps=[step])
    sinks, _ = _sinks(True, json_events)
    result = open_session(pb, inv, sinks=sinks, sessions_dir=sessions_dir, argv=sys.argv[1:]).run()
    raise typer.Exit(result.outcome.exit_code)
