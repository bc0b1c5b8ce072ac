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
    """Find servers left by crashed sessions (pidfiles under the state dir) and stop them (exit 1 if any survives).

    A Slurm entry: its allocations whose session is gone are cancelled; in an existing job (``job:``), the
    orphaned processes on each node are stopped."""
    inv = resolve_inventory(inventory, host)
    entries, patterns = _split_slurm(inv, host)
    names = inv.resolve(host) if not entries else inv.resolve(patterns) if patterns else []
    rows = asyncio.run(_cleanup_all(inv, names, dry_run=dry_run, everything=everything))
    rows += asyncio.run(_cleanup_slurm(inv, entries, dry_run=dry_run, everything=everything))
    _print(rows, json_out=json_out, dry_run=dry_run)
    if any(r["action"].startswith("FAILED") or r.get("port_free") is False for r in rows):
        raise typer.Exit(1)


def _split_slurm(inv: Any, host: str | None) -> tuple[list[str], list[str]]:
    """(slurm entries named, the other patterns): an entry's nodes are not hosts until a session holds them, so
    its leftovers are found through Slurm itself (orchestrator/slurm/cleanup.py)."""
    pattern = host or inv.default_hosts or ""
    parts = [p.strip() for p in (pattern if isinstance(pattern, list) else str(pattern).split(",")) if p.strip()]
    slurm = getattr(inv, "slurm", {})
    entries = [p.partition("[")[0] for p in parts if p.partition("[")[0] in slurm]
    if "all" in parts:
        entries = list(slurm)
    rest = [p for p in parts if p.partition("[")[0] not in slurm]
    return list(dict.fromkeys(entries)), rest


async def _cleanup_slurm(inv: Any, entries: list[str], *, dry_run: bool, everything: bool) -> list[dict[str, Any]]:
    from orchestrator.slurm.cleanup import cleanup_entry

    rows: list[dict[str, Any]] = []
    for name in entries:
        rows.extend(r.as_dict() for r in await cleanup_entry(inv, name, dry_run=dry_run, everything=everything))
    return rows


async def _cleanup_all(inv: Any, names: list[str], *, dry_run: bool, everything: bool) -> list[dict[str, Any]]:
    from orchestrator.servers.cleanup import cleanup_host, cleanup_session_id
    from orchestrator.transport.factory import make_transport

    rows: list[dict[str, Any]] = []
    for name in names:
        spec = inv.host(name)
        transport = make_transport(spec, cleanup_session_id())
        await transport.connect()
        try:
            found = await cleanup_host(transport, python=spec.python, dry_run=dry_run, everything=everything)
            rows.extend(r.as_dict() for r in found)
        finally:
            try:
                await transport.remove_workdir()  # the helper script's session dir (no process of ours runs there)
            finally:  # a workdir that could not be removed is said (raised); the connection still closes
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
        table.add_row(r["host"], r["session"], r["name"], str(r["pgid"] or "-"), str(r["port"] or "-"),
                      "yes" if r["running"] else "no", r["owner"], r["action"],
                      "-" if r["port_free"] is None else ("yes" if r["port_free"] else "NO"))
    console.print(table)
