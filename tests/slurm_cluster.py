"""A real single-machine Slurm cluster (Debian's slurm-wlm + munge), for tests and benchmarks.

Follows the measured recipe in ../shared/research/slurm-recipe.md: one munged, one slurmctld and N slurmd
processes (``slurmd -N nX``: Debian builds slurmd with MULTIPLE_SLURMD) in a fresh directory, on free loopback
ports. Up in well under a second. Clients find it through ``SLURM_CONF`` (``cluster.env``).

Use from tests: the ``slurm_cluster`` fixture (tests/slurm/conftest.py); from a benchmark: ``start_cluster``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

SLURM_BINARIES = ("slurmctld", "slurmd", "srun", "sbatch", "squeue", "scancel", "sinfo", "scontrol")
MUNGE_BINARIES = ("munged", "mungekey")


def slurm_missing_reason() -> str | None:
    """Why a Slurm cluster cannot run here, or None."""
    found = {name: shutil.which(name) or (f"/usr/sbin/{name}" if os.path.exists(f"/usr/sbin/{name}") else None)
             for name in (*SLURM_BINARIES, *MUNGE_BINARIES)}
    absent = [name for name, path in found.items() if path is None]
    if absent:
        return f"Slurm/munge not installed ({', '.join(absent)} missing: apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        # slurmd must run as root to start jobs, and munged must run as the munge user.
        return "a test Slurm cluster needs root (slurmd runs as root, munged as the munge user)"
    return None


def _free_port_block(count: int) -> int:
    """The first of ``count`` consecutive free TCP ports (slurm.conf gives the nodes a port range)."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = int(probe.getsockname()[1])
        if base + count >= 65000:
            continue
        try:
            socks = []
            for port in range(base, base + count):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError("no block of free ports found")


SLURM_CONF = """\
ClusterName=orchtest
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge/munge.sock
SlurmctldPort={ctld_port}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=10
{node_lines}PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


@dataclass
class SlurmCluster:
    directory: Path
    nodes: list[str]
    partition: str = "debug"
    env: dict[str, str] = field(default_factory=dict)  # SLURM_CONF for clients

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.env}, check=False)

    def jobs(self) -> list[str]:
        """Lines ``JOBID STATE NAME`` of every job the controller still shows (running, pending, completing)."""
        out = self.run("squeue", "-h", "-o", "%i %T %j").stdout
        return [line.strip() for line in out.splitlines() if line.strip()]

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """True once no job is left and every node is idle again (a cancelled job completes in a moment)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            idle = self.run("sinfo", "-h", "-N", "-t", "idle", "-o", "%N").stdout.split()
            if not self.jobs() and len(set(idle)) >= len(self.nodes):
                return True
            time.sleep(0.1)
        return False

    def stop(self) -> None:
        """Stop every daemon by its pid file (only the processes this cluster started), then remove the dir."""
        d = self.directory
        pids = []
        for pidfile in [*sorted(d.glob("slurmd-*.pid")), d / "slurmctld.pid", d / "munge" / "munged.pid"]:
            try:
                pids.append(int(pidfile.read_text().strip()))
            except (OSError, ValueError):
                continue
        for pid in pids:  # all at once: one by one, each slurmd's own shutdown wait adds up
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while pids and time.monotonic() < deadline:
            pids = [pid for pid in pids if _alive(pid)]
            time.sleep(0.05)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(d, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def start_cluster(nodes: int = 4, *, cpus: int = 2, timeout: float = 20.0) -> SlurmCluster:
    """Start munged, slurmctld and ``nodes`` slurmd daemons; return once every node is idle.

    Raises RuntimeError with the daemons' log tails when the cluster does not come up."""
    d = Path(tempfile.mkdtemp(prefix="orch-slurm."))
    d.chmod(0o755)  # munged (user munge) must reach its files below; mkdtemp makes 0700
    for sub in ("munge", "state", "spool"):
        (d / sub).mkdir()
    shutil.chown(d / "munge", "munge", "munge")
    (d / "munge").chmod(0o711)
    ctld_port = _free_port_block(1)
    node_port = _free_port_block(nodes)
    conf = d / "slurm.conf"
    # Each node its own loopback address (n1 = 127.0.0.2 ...), as real nodes have theirs: what `via: ssh` connects
    # to (the test sshd listens on 127.0.0.2-5) and where a multi-node server's workers reach rank 0.
    node_lines = "".join(f"NodeName=n{i} NodeHostname={socket.gethostname()} NodeAddr=127.0.0.{1 + i} "
                         f"Port={node_port + i - 1} CPUs={cpus} State=UNKNOWN\n" for i in range(1, nodes + 1))
    conf.write_text(SLURM_CONF.format(d=d, ctld_port=ctld_port, node_lines=node_lines))
    cluster = SlurmCluster(directory=d, nodes=[f"n{i}" for i in range(1, nodes + 1)],
                           env={"SLURM_CONF": str(conf)})
    env = {**os.environ, **cluster.env}

    def sh(*argv: str) -> None:
        subprocess.run(list(argv), check=True, capture_output=True, env=env, timeout=30)

    try:
        key = d / "munge" / "munge.key"
        sh("mungekey", "-c", "-k", str(key))
        shutil.chown(key, "munge", "munge")
        sh("runuser", "-u", "munge", "--", "/usr/sbin/munged", f"--socket={d}/munge/munge.sock",
           f"--key-file={key}", f"--log-file={d}/munge/munged.log", f"--pid-file={d}/munge/munged.pid",
           f"--seed-file={d}/munge/munged.seed")
        sh("slurmctld", "-i")
        for name in cluster.nodes:
            (d / "spool" / name).mkdir()
            sh("slurmd", "-N", name)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(set(cluster.run("sinfo", "-h", "-N", "-t", "idle", "-o", "%N").stdout.split())) == nodes:
                return cluster
            time.sleep(0.05)
        raise RuntimeError(f"only some of {nodes} nodes became idle in {timeout:g}s")
    except (subprocess.SubprocessError, RuntimeError, OSError) as exc:
        logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in sorted(d.glob("*.log")))
        stderr = getattr(exc, "stderr", b"") or b""
        cluster.stop()
        raise RuntimeError(f"the test Slurm cluster did not start: {exc} {stderr.decode(errors='replace')}\n{logs}") from None
