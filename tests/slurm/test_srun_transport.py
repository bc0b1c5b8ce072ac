"""SrunTransport on a real allocation: a detached process is a step of its own that kill_group ends, pushes
go through srun's stdin, and an allocation cancelled from outside is a clear HostUnreachable."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster

from orchestrator.errors import HostUnreachable
from orchestrator.inventory import HostSpec
from orchestrator.transport.srun import FINISHED, SrunTransport, allocation_state, step_id
from tests.waiting import wait_until, wait_until_async


def test_detached_step_push_and_a_cancelled_allocation(cluster: SlurmCluster, tmp_path: Path) -> None:
    granted = cluster.run("salloc", "--no-shell", "-N2", "-t", "10", "-J", "srun-test")
    job = int(granted.stderr.split("Granted job allocation")[1].split()[0])
    spec = HostSpec(name="n2", transport="srun", slurm_job=job, slurm_node="n2", state_dir=str(tmp_path / "state"))

    pids: list[int] = []

    async def scenario() -> None:
        transport = SrunTransport(spec, session_id="t1")
        await transport.connect()
        local = tmp_path / "blob.bin"
        local.write_bytes(bytes(range(256)) * 4)
        remote = await transport.put_cached(local)
        assert Path(remote).read_bytes() == local.read_bytes()  # one machine: the node's file is visible here
        handle = await transport.spawn_detached("echo on $SLURMD_NODENAME; exec sleep 300", name="sleeper")
        assert await transport.is_running(handle)
        assert await step_id(job, "orch-sleeper") is not None  # its own step of the job
        assert "on n2" in await transport.read_file_tail(handle.log_path)
        assert await transport.kill_group(handle, grace=2)
        # the step ended with it: slurmctld records a step's end a moment after its processes are gone
        async def step_gone() -> bool:
            return await step_id(job, "orch-sleeper") is None

        assert await wait_until_async(step_gone, 30), "the killed step is still listed"
        orphan = await transport.spawn_detached("exec sleep 300", name="orphan")
        pids.append(orphan.pid)
        cluster.run("scancel", str(job))  # from outside, mid-session

        async def ended() -> bool:
            state = await allocation_state(job)
            return state is None or state in FINISHED

        assert await wait_until_async(ended, 30), "the cancelled allocation never ended"
        with pytest.raises(HostUnreachable, match=f"the Slurm allocation \\(job {job}\\) is"):
            await transport.run("true")
        await transport.close()

    try:
        asyncio.run(scenario())
    finally:
        cluster.run("scancel", str(job))
    assert cluster.wait_idle(15), cluster.jobs()
    # the scancel ended the detached step's process and its srun client (started from here)
    # scancel signals the step's processes; they are reaped a moment later
    assert pids and wait_until(lambda: not Path(f"/proc/{pids[0]}").exists(), 10), \
        "the cancelled allocation's process survived"
    left = cluster.run("pgrep", "-f", "exec sleep 300").stdout.split()
    assert not left, f"srun clients or wrappers of the cancelled allocation survived: {left}"
