"""The Slurm client commands run on this machine (squeue, scontrol, ...), for the srun transport and the session's
allocations (orchestrator.slurm) alike. Here, in the transport layer, because the srun transport asks a job's state
and must not import the allocations above it (the import-linter contracts in pyproject.toml)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil

from orchestrator.errors import OrchestratorError


class SlurmError(OrchestratorError):
    title = "Slurm error"


async def slurm_command(*argv: str, timeout: float = 30.0) -> tuple[int, str, str]:
    """Run a Slurm client command here; (exit code, stdout, stderr). Raises SlurmError when it is missing
    or does not answer in ``timeout`` seconds (a controller that is down makes clients retry for minutes)."""
    if shutil.which(argv[0]) is None:
        raise SlurmError(f"`{argv[0]}` is not installed here: Slurm inventory entries need this machine to be "
                         "a Slurm login node (salloc, srun, squeue, scancel on PATH)")
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise SlurmError(f"`{' '.join(argv)}` did not answer in {timeout:g}s (is slurmctld up?)") from None
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


async def job_state(job_id: int) -> tuple[str, str, str] | None:
    """(state, nodelist, name) of a job the controller knows, or None when it is gone."""
    code, out, _err = await slurm_command("squeue", "-h", "-j", str(job_id), "-o", "%T|%N|%j")
    line = out.strip().splitlines()[0] if code == 0 and out.strip() else ""
    if not line:
        return None
    state, nodelist, name = (line.split("|", 2) + ["", ""])[:3]
    return state, nodelist, name
