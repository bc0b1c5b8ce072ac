"""A session's Slurm allocations: acquired before the first step, released after the last.

The playbook runner calls ``acquire`` before it runs any step (a ``PlaybookRunner.preparers`` entry) and ``release`` as its
last finalizer, after the servers are stopped. Only the entries the playbook targets are acquired (by name, or
through ``all``): an inventory may list several clusters without every run holding nodes on each.

The allocations never hold the runner: the session composer (``orchestrator.session.compose``) hands them a
``SlurmSessionPort``, the few things of the session they read and change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.events import Event, NoteAdded
from orchestrator.inventory import GroupSpec, HostSpec, Inventory, SlurmSpec
from orchestrator.slurm.allocation import (
    Allocation,
    SlurmError,
    allocate,
    job_state,
    node_addresses,
    release,
    take_job,
)

if TYPE_CHECKING:
    from orchestrator.transport.base import Transport

# COMPLETING: the job is over and its steps are being ended (what squeue shows right after a scancel)
FINISHED = ("CANCELLED", "COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "DEADLINE", "OUT_OF_MEMORY",
            "COMPLETING")


@dataclass
class SlurmSessionPort:
    """What the allocations read and change of their session."""

    inventory: Inventory  # the session's: a granted allocation's nodes are added to it as hosts
    host_patterns: list[object]  # the playbook's ``hosts:`` (or the inventory default) and every step's
    session_id: str
    keep_remote: bool  # leave the nodes' workdirs in place
    emit: Callable[[Event], None]
    #: hand over the session's connected transport to a node (None if never connected): the allocation closes it
    take_transport: Callable[[str], Transport | None]
    #: a failure that does not stop the session: (what failed, the exception), counted and said
    problem: Callable[[str, BaseException], None]


def targeted_entries(inventory: Inventory, host_patterns: list[object]) -> list[str]:
    """The slurm entries named by the playbook's ``hosts:``, a step's ``hosts:`` or the inventory default."""
    if not inventory.slurm:
        return []
    patterns = list(host_patterns)
    words: set[str] = set()
    for pattern in patterns:
        for item in [pattern] if isinstance(pattern, str) else (pattern if isinstance(pattern, list) else []):
            # `cluster[0]` (one node of the entry's group) names the entry too
            words.update(p.strip().partition("[")[0] for p in str(item).split(","))
    return [name for name in inventory.slurm if name in words or "all" in words]


def node_host(spec: SlurmSpec, allocation: Allocation, node: str, rank: int) -> HostSpec:
    node_vars = {"slurm_job": allocation.job_id, "slurm_node": node, "slurm_node_index": rank,
                 "slurm_nodes": list(allocation.nodes), "slurm_node_addr": allocation.addresses.get(node, node)}
    # Every node gets its own state dir: on a shared home the per-session workdirs (pidfiles, logs) of two
    # nodes would otherwise be one directory, and a cleanup on one node would signal the other's PGIDs.
    state_dir = f"{spec.state_dir}/nodes/{node}"
    if spec.via == "ssh":
        return HostSpec(name=node, transport="ssh", address=allocation.addresses.get(node, node), user=spec.user,
                        port=spec.port, key=spec.key, known_hosts=spec.known_hosts, ssh_config=spec.ssh_config,
                        python=spec.python, state_dir=state_dir, env=dict(spec.env), vars=node_vars)
    return HostSpec(name=node, transport="srun", slurm_job=allocation.job_id, slurm_node=node, python=spec.python,
                    state_dir=state_dir, env=dict(spec.env), vars=node_vars)


def add_nodes(inventory: Inventory, spec: SlurmSpec, allocation: Allocation) -> None:
    """The allocation's nodes as hosts, grouped under the entry's name (in place: the session's inventory)."""
    clash = [n for n in allocation.nodes if n in inventory.hosts]
    if clash:
        raise SlurmError(f"slurm entry {spec.name!r}: node(s) {', '.join(clash)} clash with hosts already in the "
                         "inventory (another entry's, or a static host of that name)")
    for rank, node in enumerate(allocation.nodes):
        inventory.hosts[node] = node_host(spec, allocation, node, rank)
    inventory.groups[spec.name] = GroupSpec(hosts=list(allocation.nodes), vars=dict(spec.vars))


class SlurmAllocations:
    """The allocations one session holds."""

    def __init__(self, port: SlurmSessionPort) -> None:
        self.port = port
        self.granted: dict[str, Allocation] = {}

    def _note(self, text: str) -> None:
        self.port.emit(NoteAdded(text=text, author="slurm"))

    async def acquire(self) -> None:
        """Take or ask for every targeted allocation; its nodes become hosts. Raises SlurmError (the
        session fails before its first step, with the reason) and releases what it already got."""
        try:
            port = self.port
            for name in targeted_entries(port.inventory, port.host_patterns):
                spec = port.inventory.slurm[name]
                if spec.owned:
                    allocation = await allocate(spec, session_id=port.session_id)
                else:
                    allocation = await take_job(spec)
                self.granted[name] = allocation
                # NodeAddr: what via: ssh connects to, and where a multi-node server's workers reach rank 0
                allocation.addresses = await node_addresses(allocation.nodes)
                add_nodes(port.inventory, spec, allocation)
                how = (f"granted in {allocation.seconds:.2f}s, released at session end" if allocation.owned
                       else "an existing job: not released by this session")
                self._note(f"Slurm allocation {name!r}: job {allocation.job_id} ({allocation.job_name}), "
                           f"nodes {', '.join(allocation.nodes)} via {spec.via}; {how}")
        except BaseException:
            await self.release()
            raise

    async def release(self) -> None:
        """Tidy each node's workdir while the allocation still exists, then scancel the jobs we asked for.

        Runs after the servers were stopped. A job that ended meanwhile (scancel from outside, time limit)
        cannot be reached any more: that is said, and its hosts are not tried again by the shutdown."""
        port = self.port
        for name, allocation in list(self.granted.items()):
            found = await job_state(allocation.job_id)
            alive = found is not None and found[0] not in FINISHED
            for node in allocation.nodes:
                transport = port.take_transport(node)
                if transport is None:
                    continue
                try:
                    if alive and not port.keep_remote:
                        await transport.remove_workdir()
                    await transport.close()
                except Exception as exc:
                    port.problem(f"host {node}: tidying before the Slurm allocation is released", exc)
            if not alive:
                state = found[0] if found else "gone"
                self._note(f"Slurm allocation {name!r}: job {allocation.job_id} ended outside this session "
                           f"({state}); its nodes' workdirs could not be removed")
            elif allocation.owned:
                if await release(allocation.job_id):
                    self._note(f"Slurm allocation {name!r}: job {allocation.job_id} released (scancel)")
                else:
                    port.problem(f"Slurm allocation {name!r}",
                                 SlurmError(f"job {allocation.job_id} still runs after scancel"))
            del self.granted[name]
