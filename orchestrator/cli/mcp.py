"""`orchestrator mcp`: serve the investigation to an AI assistant over MCP (stdio). The SDK is imported inside
the command so the rest of the CLI starts without it (and works where it is not installed)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.common import handle_errors, inventory_var_names, parse_extra_vars, resolve_inventory


@handle_errors
def mcp(
    inventory: Annotated[Path | None, typer.Option("-i", "--inventory", help="Inventory YAML (default: the embedded lab).")] = None,
    host: Annotated[str | None, typer.Option("--host", help="Target one host: an inventory name or [user@]address[:port].")] = None,
    playbook: Annotated[Path | None, typer.Option(
        "--playbook", help="The session's playbook: its hypotheses, vars and the steps run_playbook runs "
        "(default: the bundled flagship, eagle3).")] = None,
    extra_vars: Annotated[list[str] | None, typer.Option("-e", "--extra-vars", help="KEY=VALUE or @vars.yaml (repeatable).")] = None,
    sessions_dir: Annotated[Path | None, typer.Option("--sessions-dir", help="Where sessions are saved (default ./sessions).",
                                                      envvar="ORCHESTRATOR_SESSIONS_DIR")] = None,
    allow_exec: Annotated[bool, typer.Option("--allow-exec", help="Let the exec tool run commands beyond the "
                                             "read-only allow list (the inventory's deny list still applies).")] = False,
) -> None:
    """Serve the investigation as MCP tools over stdio (for an AI assistant); the connection is one recorded session."""
    try:
        import mcp as _sdk  # noqa: F401  (only to say clearly when it is missing)
    except ImportError:
        from orchestrator.errors import UserInputError

        raise UserInputError("orchestrator mcp needs the MCP SDK: pip install 'orchestrator[mcp]'") from None
    import anyio

    from orchestrator.cli.common import ensure_lab_for
    from orchestrator.mcp.connection import McpSettings
    from orchestrator.mcp.tools import serve
    from orchestrator.playbook.bundled import flagship_path
    from orchestrator.playbook.loader import load_playbook

    extra = parse_extra_vars(extra_vars)
    inv = resolve_inventory(inventory, host)
    names = inventory_var_names(inv, extra)
    if playbook is not None:
        pb = load_playbook(playbook, extra_names=names)
    else:  # the bundled flagship: its hypotheses are what an EAGLE-3 investigation decides
        pb = load_playbook(flagship_path(), extra_names=names)
    if host:
        pb = pb.model_copy(update={"hosts": host})
    inv = ensure_lab_for(inv, pb.hosts)
    settings = McpSettings(inventory=inv, playbook=pb, sessions_dir=sessions_dir, extra_vars=extra,
                           allow_exec=allow_exec, argv=["mcp", *sys.argv[2:]] if len(sys.argv) > 1 else ["mcp"])
    session = anyio.run(serve, settings)
    for problem in session.controller.view.problems.summary():
        typer.echo(f"orchestrator: {problem}", err=True)
    typer.echo(f"session saved: {session.directory}", err=True)
