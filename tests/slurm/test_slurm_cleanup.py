"""`orchestrator cleanup` on Slurm entries: a crashed session's allocation (its controller killed with SIGKILL, a
2-node lab server running in it) is cancelled and nothing of it survives; a live session's is kept unless --all;
servers a session left in someone else's job (`job:`, `keep: true`) are stopped on each node while the job lives."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster

from tests.core.conftest import subprocess_env
from tests.servers.conftest import listening, processes_with
from tests.slurm.lab_nodes import lab_slurm_inventory
from tests.waiting import wait_until

pytestmark = [pytest.mark.lab, pytest.mark.torch]

SERVER_THEN_WAIT = """\
name: crashes
steps:
  - server: {name: big, nodes: 2, model: "{{ target }}", ready_timeout: 300}
  - shell: sleep 300
"""


def cli(tmp_path: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=tmp_path, env=subprocess_env(),
                          capture_output=True, text=True, timeout=timeout)


def cleanup_rows(tmp_path: Path, *args: str) -> list[dict]:
    result = cli(tmp_path, "cleanup", "cluster", "-i", "inv.yaml", "--json", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def wait_gone(marker: str, timeout: float = 15) -> list[int]:
    wait_until(lambda: not processes_with(marker), timeout, interval=0.2)
    return processes_with(marker)


def test_a_crashed_sessions_allocation_is_cancelled(cluster: SlurmCluster, lab_root: Path, tmp_path: Path,
                                                    marker: str) -> None:
    lab_slurm_inventory(tmp_path, cluster, lab_root, marker)
    (tmp_path / "pb.yaml").write_text(SERVER_THEN_WAIT)
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "pb.yaml", "-i", "inv.yaml"],
                            cwd=tmp_path, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    live: str | None = None
    try:
        def ready_port() -> int | None:
            for log in (tmp_path / "sessions").glob("*/events.jsonl"):
                ready = [json.loads(x) for x in log.read_text().splitlines() if '"server_ready"' in x]
                if ready:
                    return int(ready[0]["port"])
            return None

        wait_until(lambda: proc.poll() is not None or ready_port() is not None, 300, interval=0.3)
        port = ready_port()
        assert port is not None and proc.poll() is None, "the server never became ready"
        proc.send_signal(signal.SIGKILL)  # the controller dies: nothing of it releases the allocation
        proc.wait()
        [job] = {line.split()[0] for line in cluster.jobs()}
        assert len(processes_with(marker)) >= 2 and listening(port)  # both ranks still run: left behind

        # another session's allocation, whose controller (this test's process) lives: kept unless --all
        granted = cluster.run("salloc", "--no-shell", "-N1", "-t", "10", "-J", "orch-cluster",
                              f"--comment=orchestrator session live-one controller {socket.gethostname()}:{os.getpid()}")
        live = granted.stderr.split("Granted job allocation")[1].split()[0]

        rows = {r["name"].split()[2]: r for r in cleanup_rows(tmp_path, "--dry-run")}
        assert rows[job]["action"] == "would cancel (scancel)" and rows[job]["owner"] == "gone", rows
        assert rows[live]["action"].startswith("kept (owner alive"), rows
        assert len(processes_with(marker)) >= 2  # a dry run changes nothing

        rows = {r["name"].split()[2]: r for r in cleanup_rows(tmp_path)}
        assert rows[job]["action"] == "cancelled (scancel)" and "-crashes-" in rows[job]["session"], rows  # the id: the session dir and a random tail
        assert rows[live]["action"].startswith("kept"), rows
        assert not wait_gone(marker), "a rank of the cancelled allocation survived"
        assert not listening(port)
        assert [line.split()[0] for line in cluster.jobs() if "RUNNING" in line] == [live]
        # srun clients carry the marker in their command line (the entry's env is exported in their step's
        # script): a job id alone is not unique while another xdist worker runs its own cluster
        left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
        assert not left, f"srun clients of the cancelled job survived: {left}"

        rows = {r["name"].split()[2]: r for r in cleanup_rows(tmp_path, "--all")}
        assert rows == {live: rows[live]} and rows[live]["action"] == "cancelled (scancel)", rows
        live = None
    finally:
        if proc.poll() is None:
            proc.kill()
        if live is not None:
            cluster.run("scancel", live)
    assert cluster.wait_idle(15), cluster.jobs()


KEPT_SERVER = """\
name: kept
steps:
  - server: {name: big, nodes: 2, model: "{{ target }}", ready_timeout: 300, keep: true}
    register: srv
"""


def test_kept_servers_in_an_existing_job_are_stopped_and_the_job_is_not(
        cluster: SlurmCluster, lab_root: Path, tmp_path: Path, marker: str) -> None:
    granted = cluster.run("salloc", "--no-shell", "-N2", "-t", "10", "-J", "someones")
    job = granted.stderr.split("Granted job allocation")[1].split()[0]
    try:
        lab_slurm_inventory(tmp_path, cluster, lab_root, marker, job=int(job))
        (tmp_path / "pb.yaml").write_text(KEPT_SERVER)
        result = cli(tmp_path, "run", "pb.yaml", "-i", "inv.yaml", timeout=300)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert len(processes_with(marker)) >= 2  # keep: true, both ranks outlive the session

        rows = cleanup_rows(tmp_path)
        assert sorted((r["host"], r["name"], r["action"]) for r in rows) == [
            ("n1", "server-big", "kept (keep: true)"), ("n2", "server-big-rank1", "kept (keep: true)")], rows
        rows = cleanup_rows(tmp_path, "--all")
        found = {(r["host"], r["name"]): r["action"] for r in rows}
        assert found[("n1", "server-big")] == "stopped", rows
        # nodes are cleaned in order: rank 0 stopped on n1 takes its worker down (as a broken NCCL group would),
        # so on n2 the worker is stopped or already gone (then only its pidfile is left to remove)
        assert found[("n2", "server-big-rank1")] in ("stopped", "removed stale pidfile"), rows
        assert len(found) == 2, rows
        assert next(r for r in rows if r["host"] == "n1")["port_free"] is True
        assert not wait_gone(marker), "a rank survived the cleanup"
        steps = cluster.run("squeue", "-h", "-s", "-j", job, "-o", "%j").stdout.split()
        assert not [s for s in steps if s.startswith("orch-")], steps  # their job steps ended with them
        assert any(line.startswith(f"{job} RUNNING") for line in cluster.jobs())  # not ours: still held
    finally:
        cluster.run("scancel", job)
    assert cluster.wait_idle(15), cluster.jobs()
