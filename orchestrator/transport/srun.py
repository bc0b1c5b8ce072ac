"""SrunTransport: a node of a Slurm allocation, reached with ``srun --jobid=J --overlap -w NODE`` from here.

Every command is one job step (``--overlap``: it shares the allocation's CPUs with the steps already running
there, such as a server). The ``srun`` client runs as a local subprocess, so streaming, timeouts and cancel
come from ``LocalTransport``: killing the client makes Slurm end the step and every process in it.

A detached process is its own long-lived step. A process that merely double-forks out of a short step is not
safe on Slurm: with ``proctrack/cgroup`` (most sites) the step's end kills it, and with ``proctrack/linuxproc``
(measured on the test cluster) it escapes the job and survives ``scancel``. As a step of its own it lives as
long as it runs, and ``scancel JOB.STEP`` ends it whatever it did: the last resort when signals fail.
"""

from __future__ import annotations

import asyncio
import base64
import shlex
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.errors import HostUnreachable, TransportError
from orchestrator.transport.base import (
    Command,
    OutputCallback,
    ProcessHandle,
    RunResult,
    Transport,
    env_prefix,
)
from orchestrator.transport.local import LocalTransport
from orchestrator.transport.slurm_cli import job_state, slurm_command

if TYPE_CHECKING:
    from orchestrator.transport.spec import ConnectionSpec

# srun's own messages that mean the allocation (not the command) is the problem
# (lower case; any "srun: error" also makes us look at the job's state, so a new wording is still caught)
_GONE_MARKERS = ("srun: error", "invalid job id", "unable to confirm allocation", "has expired",
                 "already completing or completed", "cancelled at", "job has been revoked")
# COMPLETING: the job is over and its steps are being ended (what squeue shows right after a scancel)
FINISHED = ("CANCELLED", "COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "DEADLINE", "OUT_OF_MEMORY",
            "COMPLETING")
LOCAL_STATE = "$HOME/.orchestrator/srun-clients"  # records of srun clients running here (for cleanup)


class SrunTransport(Transport):
    """One node of a Slurm job. ``spec.slurm_job`` and ``spec.slurm_node`` say which."""

    def __init__(self, spec: ConnectionSpec, *, session_id: str) -> None:
        super().__init__(spec.name, state_dir=spec.state_dir, session_id=session_id, env=spec.env)
        if spec.slurm_job is None:
            raise TransportError(f"host {spec.name!r}: transport srun needs slurm_job (the job id)")
        self.job = int(spec.slurm_job)
        self.node = spec.slurm_node or spec.name
        # Its own client dir per node: the session's nodes close one after another, and a dir they shared would be
        # removed by the first under the others' commands still recording into it.
        self._client = LocalTransport(f"{spec.name}-srun", state_dir=LOCAL_STATE, session_id=f"{session_id}-{self.node}")

    def srun_argv(self, *, step_name: str | None = None) -> list[str]:
        argv = ["srun", f"--jobid={self.job}", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={self.node}",
                "--quiet"]
        if step_name:
            argv.append(f"--job-name={step_name}")
        return argv

    async def connect(self) -> None:
        result = await self._client.run([*self.srun_argv(), "true"], timeout=60)
        if result.exit_code != 0:
            raise HostUnreachable(f"{self.host}: srun into job {self.job} on node {self.node} failed: "
                                  f"{_srun_lines(result.stderr) or result.stderr.strip()[-500:]}")

    async def close(self) -> None:
        await self._client.remove_workdir()

    async def run(
        self,
        command: Command,
        *,
        env: Mapping[str, Any] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: str | None = None,
        on_output: OutputCallback | None = None,
    ) -> RunResult:
        body = command if isinstance(command, str) else "exec " + shlex.join([str(p) for p in command])
        script = env_prefix({**self.base_env, **(env or {})}) + (f"cd {shlex.quote(cwd)} && " if cwd else "") + body
        result = await self._client.run([*self.srun_argv(), "bash", "-c", script], timeout=timeout, stdin=stdin,
                                        on_output=on_output)
        if result.exit_code != 0 and any(m in result.stderr.lower() for m in _GONE_MARKERS):
            await self._raise_if_gone(result.stderr)
        return result

    async def _raise_if_gone(self, stderr: str) -> None:
        """A failed srun whose allocation has ended: HostUnreachable, saying so (not 'exit 1')."""
        state = await allocation_state(self.job)
        if state is None or state in FINISHED:
            said = _srun_lines(stderr)
            raise HostUnreachable(f"{self.host}: the Slurm allocation (job {self.job}) is "
                                  f"{'gone' if state is None else state}{': ' + said if said else ''}")

    async def put(self, local_path: Path, remote_path: str, *, mode: int = 0o600) -> None:
        # Through the step's stdin, base64 so any bytes survive; no shared filesystem is assumed.
        data = base64.b64encode(Path(local_path).read_bytes()).decode()
        target = shlex.quote(remote_path)
        await self.check(f"umask 077; base64 -d > {target} && chmod {mode:o} {target}", stdin=data)

    async def spawn_detached(
        self,
        command: Command,
        *,
        name: str,
        env: Mapping[str, Any] | None = None,
        cwd: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> ProcessHandle:
        """A step of its own that runs ``command`` under ``setsid -w``, its pid, log and exit file in the workdir
        like every transport's; the srun client runs here, detached, so it outlives this session's process."""
        if not name.replace("-", "").replace("_", "").isalnum():
            raise TransportError(f"invalid process name {name!r}")
        workdir = await self.workdir()
        q = shlex.quote
        pidfile, log_path = f"{workdir}/procs/{name}.json", f"{workdir}/logs/{name}.log"
        exit_file, pid_tmp = f"{workdir}/procs/{name}.exit", f"{workdir}/procs/{name}.pid"
        program = f"bash -c {q(command)}" if isinstance(command, str) else shlex.join([str(p) for p in command])
        inner = env_prefix({**self.base_env, **(env or {})}) + (f"cd {q(cwd)} && " if cwd else "") + "exec " + program
        leader = f"echo $$ > {q(pid_tmp)}; {inner}"
        in_step = f"setsid -w bash -c {q(leader)} > {q(log_path)} 2>&1 < /dev/null; echo $? > {q(exit_file)}"
        step_name = f"orch-{name}"[:60]
        await self.check(f"rm -f {q(pid_tmp)} {q(exit_file)}")
        client = shlex.join([*self.srun_argv(step_name=step_name), "bash", "-c", in_step])
        launched = await self._client.check(f"setsid nohup {client} > /dev/null 2>&1 < /dev/null & echo $!")
        client_pid = int(launched.stdout.split()[-1])
        polled = await self.run(f"for i in $(seq 1 500); do [ -s {q(pid_tmp)} ] && break; sleep 0.02; done; "
                                f"cat {q(pid_tmp)} 2>/dev/null")
        try:
            pid = int(polled.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            state = await allocation_state(self.job)
            raise TransportError(f"{self.host}: could not start {name} as a step of job {self.job} "
                                 f"(job {state or 'gone'}): no pid recorded") from None
        handle = ProcessHandle(
            host=self.host, name=name, pid=pid, pgid=pid, log_path=log_path, pidfile=pidfile, exit_file=exit_file,
            command=program, session_id=self.session_id,
            meta={**(meta or {}), "slurm_job": self.job, "slurm_node": self.node, "slurm_step_name": step_name,
                  "srun_client_pid": client_pid},
        )
        await self.check(f"umask 077; printf '%s\\n' {q(handle.to_json())} > {q(pidfile)}")
        return handle

    async def is_running(self, handle: ProcessHandle) -> bool:
        try:
            return await super().is_running(handle)
        except HostUnreachable:
            return False  # the allocation ended: nothing of it runs

    async def kill_group(self, handle: ProcessHandle, *, grace: float = 5.0, sig: int = signal.SIGTERM) -> bool:
        """Signals first (the engine's own TERM -> KILL on the node); ``scancel`` of the process's step when
        they fail or the node cannot be reached. True when it is gone."""
        try:
            if await super().kill_group(handle, grace=grace, sig=sig):
                return True
        except HostUnreachable:
            state = await allocation_state(self.job)
            if state is None or state in FINISHED:
                return True  # the allocation ended, and every step with it
        step = await step_id(self.job, str(handle.meta.get("slurm_step_name", "")))
        if step is None:
            return not await self.is_running(handle)
        await _slurm("scancel", step)
        for _ in range(int(max(grace, 5.0) / 0.1)):
            if await step_id(self.job, str(handle.meta.get("slurm_step_name", ""))) is None:
                return True
            await asyncio.sleep(0.1)
        return False


def _srun_lines(stderr: str) -> str:
    return " ".join(line.strip() for line in stderr.splitlines()
                    if line.startswith(("srun:", "slurmstepd:")))[-500:]


async def _slurm(*argv: str) -> tuple[int, str]:
    code, out, _err = await slurm_command(*argv)
    return code, out


async def allocation_state(job: int) -> str | None:
    """The job's state, or None when the controller no longer knows it."""
    found = await job_state(job)
    return found[0] if found else None


async def step_id(job: int, step_name: str) -> str | None:
    """``JOB.STEP`` of the running step with this name, or None."""
    if not step_name:
        return None
    code, out = await _slurm("squeue", "-h", "-s", "-j", str(job), "-o", "%i|%j")
    for line in out.splitlines() if code == 0 else []:
        sid, _, name = line.strip().partition("|")
        if name == step_name:
            return sid
    return None
