"""A multi-node server's ranks (``server: {nodes: N}``): one logical server, one process per node.

Rank 0 is the server the session talks to (readiness, /server_info, bench); ranks 1..N-1 are workers started with
the same argv plus the engine's own multi-node flags (SGLang: ``--nnodes N --node-rank R --dist-init-addr
HOST:PORT``), each a detached process group on its own host, with its own pidfile (so ``orchestrator cleanup`` and
the session's shutdown find every rank). ServerManager owns the record; this module plans and stops the ranks.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import HostUnreachable
from orchestrator.transport.base import ProcessHandle, Transport


@dataclass
class RankHost:
    """Where a rank runs: its inventory host and that host's connected transport."""

    host: str
    transport: Transport
    python: str | None = None  # that host's python, when it is not rank 0's (nodes need not be alike)


@dataclass
class RankProcess:
    """One started rank (rank 0 is the record's own host/transport/handle and is listed here too)."""

    rank: int
    host: str
    transport: Transport
    argv: list[str]
    handle: ProcessHandle | None = None
    exit_code: int | None = None
    log_tail: str = ""
    gone: bool | None = None  # after a stop: whether its group is gone

    def as_dict(self) -> dict[str, Any]:
        h = self.handle
        return {"rank": self.rank, "host": self.host, "pid": h.pid if h else None, "pgid": h.pgid if h else None,
                "log_path": h.log_path if h else None, "command": self.argv, "exit_code": self.exit_code,
                "log_tail": self.log_tail,
                # on Slurm: the node and the job step the rank runs as (what `scancel JOB.STEP` would end)
                **{k: h.meta[k] for k in ("slurm_job", "slurm_node", "slurm_step_name") if h and k in h.meta}}


def process_name(server: str, rank: int) -> str:
    """The detached process's name: rank 0 keeps a single-node server's name, so tools that know one still work."""
    return f"server-{server}" if rank == 0 else f"server-{server}-rank{rank}"


async def stop_ranks(ranks: list[RankProcess], grace: float) -> list[RankProcess]:
    """TERM -> KILL every rank's group at once, workers and rank 0 alike: a worker whose rank 0 died can block in
    the engine's collective (NCCL) until its timeout, so no rank waits for another. Each transport's own last
    resort applies (Slurm: ``scancel`` of the rank's step). A rank whose host cannot be reached any more (its
    allocation ended) counts as gone when the transport says so. Returns the ranks still alive."""

    async def one(rank: RankProcess) -> None:
        if rank.handle is None:
            rank.gone = True
            return
        try:
            rank.gone = await rank.transport.kill_group(rank.handle, grace=grace)
        except HostUnreachable:
            rank.gone = not await rank.transport.is_running(rank.handle)

    await asyncio.gather(*(one(r) for r in ranks))
    return [r for r in ranks if not r.gone]


async def first_dead_worker(ranks: list[RankProcess], interval: float = 1.0) -> RankProcess:
    """Poll the workers (ranks 1..) until one is no longer running; return it. Runs beside rank 0's readiness wait:
    a real engine's rank 0 would wait for a dead worker until its rendezvous timeout (minutes)."""
    while True:
        for rank in ranks[1:]:
            if rank.handle is not None and not await rank.transport.is_running(rank.handle):
                return rank
        await asyncio.sleep(interval)


async def worker_states(ranks: list[RankProcess], lines: int) -> str:
    """For a failed start: each worker's state and last log lines (rank 0's log is the failure's own body)."""
    parts: list[str] = []
    for rank in ranks:
        if rank.rank == 0 or rank.handle is None:
            continue
        try:
            running = await rank.transport.is_running(rank.handle)
            rank.exit_code = None if running else await rank.transport.exit_status(rank.handle)
            tail = await rank.transport.read_file_tail(rank.handle.log_path, lines=lines)
        except HostUnreachable as exc:
            parts.append(f"rank {rank.rank} on {rank.host}: unreachable ({exc.message})")
            continue
        rank.log_tail = tail.rstrip()
        state = "running" if running else f"exited with code {rank.exit_code}"
        shown = "\n".join(f"    {line}" for line in rank.log_tail.splitlines()[-lines:]) or "    (empty log)"
        parts.append(f"rank {rank.rank} on {rank.host}: {state}; its last log lines:\n{shown}")
    return "\n".join(parts)
