"""`orchestrator cleanup [HOST]`: stop servers (and other detached processes) that crashed sessions left.

Register with ``cleanup.register(app)`` (adds the ``cleanup`` command).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.cli.common import handle_errors, resolve_inventory


def register(app: typer.Typer) -> None:
    app.command("cleanup")(cleanup)


@handle_errors
def cleanup(
    host: Annotated[str | None, typer.Argument(help="Inventory host or group (default: the inventory's default).")] = None,
    inventory: Annotated[Path | None, typer.Option("-i", "--inventory", help="Inventory YAML (default: the lab).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be stopped; change nothing.")] = False,
    everything: Annotated[bool, typer.Option("--all", help="Also stop kept servers and those of live sessions.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
) -> None:
    """Find servers left by crashed sessions (pidfiles under the state dir) and stop them (exit 1 if any survives)."""
    inv = resolve_inventory(inventory, host)
    names = inv.resolve(host)
    rows = asyncio.run(_cleanup_all(inv, names, dry_run=dry_run, everything=everything))
    _print(rows, json_out=json_out, dry_run=dry_run)
    if any(r["action"].startswith("FAILED") or r.get("port_free") is False for r in rows):
        raise typer.Exit(1)


async def _cleanup_all(inv: Any, names: list[str], *, dry_run: bool, everything: bool) -> list[dict[str, Any]]:
    from orchestrator.servers.cleanup import cleanup_host
    from orchestrator.transport.factory import make_transport

    rows: list[dict[str, Any]] = []
    for name in names:
        spec = inv.host(name)
        transport = make_transport(spec, "cleanup")
        await transport.connect()
        try:
            found = await cleanup_host(transport, python=spec.python, dry_run=dry_run, everything=everything)
            rows.extend(r.as_dict() for r in found)
        finally:
            await transport.remove_workdir()  # the helper script's session dir (no process of ours runs there)
            await transport.close()
    return rows


def _print(rows: list[dict[str, Any]], *, json_out: bool, dry_run: bool) -> None:
    import json
    import sys

    if json_out:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    if not rows:
        console.print("nothing to clean up: no pidfiles left by orchestrator sessions")
        return
    table = Table(title="orchestrator cleanup" + (" (dry run)" if dry_run else ""))
    for col in ("host", "session", "name", "pgid", "port", "running", "owner", "action", "port free"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["host"], r["session"], r["name"], str(r["pgid"]), str(r["port"] or "-"),
                      "yes" if r["running"] else "no", r["owner"], r["action"],
                      "-" if r["port_free"] is None else ("yes" if r["port_free"] else "NO"))
    console.print(table)
