"""``orchestrator cleanup`` for Slurm inventory entries: what crashed sessions left on a cluster.

Two kinds of leftovers:

- an allocation a session asked for (``salloc``) and never released, because the session died. Its comment
  (``allocation.session_comment``) names the session and the controller process; when that process is gone the
  job is cancelled (``scancel``), which ends every step in it: servers, workers, srun clients. A live session's
  allocation is listed and kept unless ``everything``.
- processes a session started as steps of an existing job (``job:`` entries, never cancelled by us): each node's
  pidfiles are read over srun and the orphaned groups stopped by ``servers.cleanup.cleanup_host``; the srun
  transport's last resort is ``scancel JOB.STEP`` of the process's own step.
"""

from __future__ import annotations

import getpass

from orchestrator.inventory import Inventory, SlurmSpec
from orchestrator.servers.cleanup import CleanupRow, controller_state
from orchestrator.slurm.allocation import (
    Allocation,
    SlurmError,
    expand_nodes,
    job_state,
    node_addresses,
    parse_session_comment,
    release,
    slurm_command,
)
from orchestrator.slurm.session_allocations import node_host


async def leftover_allocations(spec: SlurmSpec) -> list[tuple[int, str, str, str]]:
    """(job id, state, job name, comment) of this user's jobs that an orchestrator session asked for under this
    entry (its job name, our comment)."""
    job_name = spec.job_name or f"orch-{spec.name}"
    code, out, err = await slurm_command("squeue", "-h", "-u", getpass.getuser(), "-n", job_name,
                                         "-o", "%i|%T|%j|%k")
    if code != 0:
        raise SlurmError(f"squeue failed while looking for {spec.name!r}'s allocations: {err.strip()}")
    found = []
    for line in out.splitlines():
        parts = line.strip().split("|", 3)
        if len(parts) == 4 and parts[3].startswith("orchestrator session "):
            found.append((int(parts[0]), parts[1], parts[2], parts[3]))
    return found


async def cleanup_entry(inventory: Inventory, name: str, *, dry_run: bool, everything: bool) -> list[CleanupRow]:
    """Clean up what sessions left under one ``slurm:`` entry; rows say what was found and done."""
    spec = inventory.slurm[name]
    if spec.owned:
        return await _cleanup_allocations(spec, dry_run=dry_run, everything=everything)
    return await _cleanup_job_steps(spec, dry_run=dry_run, everything=everything)


async def _cleanup_allocations(spec: SlurmSpec, *, dry_run: bool, everything: bool) -> list[CleanupRow]:
    rows = []
    for job, state, job_name, comment in await leftover_allocations(spec):
        session, host, pid = parse_session_comment(comment) or ("?", None, None)
        owner, orphan = controller_state(host, pid)
        row = CleanupRow(host=spec.name, session=session, name=f"slurm job {job} ({job_name}, {state})", pgid=0,
                         port=None, running=True, owner=owner, action="")
        rows.append(row)
        if not everything and not orphan:
            row.action = f"kept (owner {owner}; --all cancels it)"
        elif dry_run:
            row.action = "would cancel (scancel)"
        else:
            row.action = "cancelled (scancel)" if await release(job) else "FAILED: job still runs after scancel"
    return rows


async def _cleanup_job_steps(spec: SlurmSpec, *, dry_run: bool, everything: bool) -> list[CleanupRow]:
    from orchestrator.servers.cleanup import cleanup_host, cleanup_session_id
    from orchestrator.transport.factory import make_transport

    assert spec.job is not None
    found = await job_state(spec.job)
    if found is None or found[0] != "RUNNING":
        return []  # the job is gone (or ending), and every step of it
    # every node of the job, not only the entry's first `nodes`: a session may have used others through `job:`
    allocation = Allocation(name=spec.name, job_id=spec.job, nodes=await expand_nodes(found[1]), owned=False)
    allocation.addresses = await node_addresses(allocation.nodes)
    rows: list[CleanupRow] = []
    for rank, node in enumerate(allocation.nodes):
        host = node_host(spec, allocation, node, rank)
        transport = make_transport(host, cleanup_session_id())
        await transport.connect()
        try:
            rows += await cleanup_host(transport, python=host.python, dry_run=dry_run, everything=everything)
        finally:
            try:
                await transport.remove_workdir()
            finally:  # a workdir that could not be removed is said (raised); the connection still closes
                await transport.close()
    return rows
