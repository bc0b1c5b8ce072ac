"""Find and stop what crashed sessions left behind on a host: detached process groups recorded in pidfiles
under ``<state_dir>/sessions/*/procs/`` (servers above all). Used by ``orchestrator cleanup``.

A process is an orphan when the orchestrator process that started it (``meta.controller_pid`` on
``meta.controller_host``) is gone. Groups owned by a live session, started on another controller machine
(we cannot tell whether it lives), or marked ``keep: true`` are listed but left alone unless ``everything``.
Pidfiles whose group is already dead are removed. A server gets at least the grace its engine's stop gives it
(the adapter's ``stop_grace``, as ``ServerManager.stop``): a real SGLang 0.5.15.post1's launcher takes ~6 s to exit
on SIGTERM, and a SIGKILL before that leaves its children's zombies to PID 1, which may reap them only after the
check that the group is gone (measured here: ~1.5 s later), so the cleanup said "FAILED: group still alive".
"""

from __future__ import annotations

import os
import secrets
import shlex
import socket
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.transport.base import ProcessHandle, Transport


@dataclass
class CleanupRow:
    host: str
    session: str
    name: str
    pgid: int
    port: int | None
    running: bool
    owner: str  # "gone" | "alive (pid N)" | "other controller HOST" | "unknown"
    action: str  # stopped | would stop | kept (...) | removed stale pidfile | would remove stale pidfile | FAILED
    port_free: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def cleanup_session_id() -> str:
    """The session id of one cleanup run: its own workdir on the host (for the helper probe it pushes), which it
    removes when done. Two cleanups at once (two terminals, two test workers) must not share it: the first to
    finish would remove it under the other."""
    return f"cleanup-{secrets.token_hex(4)}"


def _owner(handle: ProcessHandle) -> tuple[str, bool]:
    """(description, owner_is_gone)."""
    meta = handle.meta or {}
    return controller_state(meta.get("controller_host"), meta.get("controller_pid"))


def controller_state(host: object, pid: object) -> tuple[str, bool]:
    """(description, gone) of the orchestrator process that owns something (a server, a Slurm allocation): gone only
    when it ran on this machine and no longer exists; unknown owners count as gone."""
    if not isinstance(pid, int) or not host:
        return "unknown", True
    if host != socket.gethostname():
        return f"other controller {host}", False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "gone", True
    except PermissionError:
        pass
    return f"alive (pid {pid})", False


def engine_grace(meta: dict[str, Any]) -> float:
    """A server's engine's stop grace (its adapter's ``stop_grace``); 0 for anything else or an unknown engine."""
    from orchestrator.errors import UserInputError
    from orchestrator.servers.registry import get_adapter

    engine = meta.get("engine")
    if meta.get("kind") != "server" or not isinstance(engine, str):
        return 0.0
    try:
        return float(get_adapter(engine).stop_grace)
    except UserInputError:
        return 0.0


async def cleanup_host(transport: Transport, *, python: str = "python3", dry_run: bool = False,
                       everything: bool = False, grace: float = 5.0) -> list[CleanupRow]:
    """Stop orphaned process groups on one host; returns what was found and done."""
    from orchestrator.servers.client import ServerClient

    client = ServerClient(transport, python)
    rows: list[CleanupRow] = []
    for handle in await transport.list_processes(all_sessions=True):
        meta = handle.meta or {}
        port = meta.get("port") if isinstance(meta.get("port"), int) else None
        running = await transport.is_running(handle)
        owner, orphan = _owner(handle)
        if not running and not orphan and handle.name.startswith("run-"):
            continue  # a live session's command that just ended: its own run removes the record, nothing is left
        row = CleanupRow(host=transport.host, session=handle.session_id, name=handle.name, pgid=handle.pgid,
                         port=port, running=running, owner=owner, action="")
        rows.append(row)
        if not running:
            row.action = "would remove stale pidfile" if dry_run else "removed stale pidfile"
            if not dry_run:
                await transport.run(f"rm -f {shlex.quote(handle.pidfile)}")
            continue
        if not everything and (not orphan or meta.get("keep")):
            row.action = "kept (keep: true)" if meta.get("keep") else f"kept (owner {owner}; --all stops it)"
            continue
        if dry_run:
            row.action = "would stop"
            continue
        gone = await transport.kill_group(handle, grace=max(grace, engine_grace(meta)))
        row.action = "stopped" if gone else "FAILED: group still alive"
        if port is not None:
            answer = await client.call("port", {"host": meta.get("bind") or "127.0.0.1", "port": port, "wait": 5})
            row.port_free = bool(answer["free"])
    return rows
