"""A multi-node server on a real Slurm allocation: the flagship playbook (playbooks/eagle3.yaml) on a 2-node lab
server (rank 0 on the allocation's first node, the worker on the second, each its own job step), and an allocation
cancelled from outside mid-readiness and mid-step: a clear error, and no process, port or job left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster

from tests.core.conftest import subprocess_env
from tests.servers.conftest import listening, processes_with
from tests.slurm.lab_nodes import lab_slurm_inventory
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.lab, pytest.mark.torch]


def events(tmp_path: Path) -> list[dict]:
    [log] = sorted((tmp_path / "sessions").glob("*/events.jsonl"))
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def test_flagship_on_a_two_node_lab_server(cluster: SlurmCluster, lab_root: Path, tmp_path: Path,
                                           marker: str) -> None:
    inventory = lab_slurm_inventory(tmp_path, cluster, lab_root, marker)
    result = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(REPO / "playbooks" / "eagle3.yaml"),
                             "-i", str(inventory), "--json"], cwd=tmp_path, env=subprocess_env(),
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    log = events(tmp_path)
    ready = [e for e in log if e["type"] == "server_ready"]
    # baseline, spec and the fix check: each ONE server, rank 0 on n1 and its worker on n2
    assert [e["server_id"] for e in ready] == ["baseline", "spec", "fixed"], ready
    assert all(e["host"] == "n1" and e["ranks"] == ["n1", "n2"] for e in ready), ready
    spec_start = next(e for e in log if e["type"] == "step_finished" and e["results"]
                      and e["results"][0]["result"].get("name") == "spec")
    assert [r["host"] for r in spec_start["results"]] == ["n1"]
    ranks = spec_start["results"][0]["result"]["ranks"]
    assert [(r["rank"], r["slurm_node"]) for r in ranks] == [(0, "n1"), (1, "n2")]
    assert len({r["slurm_job"] for r in ranks}) == 1 and all(r["slurm_step_name"] for r in ranks)
    # the investigation itself: the healthy lab, no fault confirmed, the benchmarks ran against rank 0
    report = next((tmp_path / "sessions").glob("*/report.md")).read_text()
    assert "**Nothing wrong" in report, report[:3000]  # the account: speculation pays, the draft serves as offline
    assert "n1:" in report and "2 nodes: n1, n2" in report  # the report shows each as one server
    assert "accept 95% CI" in report
    # every rank stopped, the allocation released, nothing left
    assert not processes_with(marker)
    assert cluster.wait_idle(15), cluster.jobs()
    stopped = [e for e in log if e["type"] == "server_stopped"]
    assert {e["server_id"] for e in stopped} == {"baseline", "spec", "fixed"}
    assert all(e["detail"] is None for e in stopped), stopped


CANCELLED_MID_STEP = """\
name: cancelled
steps:
  - server: {name: big, nodes: 2, model: "{{ target }}", ready_timeout: 300}
    register: srv
  - name: a long step on the allocation
    shell: sleep 300
"""


def marked(marker: str) -> list[str]:
    """Command lines of the processes that carry the marker."""
    found = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout
    return [line for line in found.splitlines() if "pgrep" not in line]


def _seen(tmp_path: Path, kind: str, step_id: str | None = None) -> dict | None:
    for log in (tmp_path / "sessions").glob("*/events.jsonl"):
        for line in log.read_text().splitlines():
            event = json.loads(line) if line.strip() else {}
            if event.get("type") == kind and (step_id is None or event.get("step_id") == step_id):
                return event
    return None


@pytest.mark.parametrize("moment", ["mid-readiness", "mid-step"])
def test_allocation_cancelled_is_a_clear_error_and_leaves_nothing(
        cluster: SlurmCluster, lab_root: Path, tmp_path: Path, marker: str, moment: str) -> None:
    """scancel while the 2-node server waits for readiness (its ranks spawned, not ready), or while a later step
    runs on the allocation: the running step fails saying so, and every rank, port and srun client is gone."""
    inventory = lab_slurm_inventory(tmp_path, cluster, lab_root, marker)
    (tmp_path / "pb.yaml").write_text(CANCELLED_MID_STEP)
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "pb.yaml", "-i", str(inventory)],
                            cwd=tmp_path, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    kind, step_id = ("server_started", None) if moment == "mid-readiness" else ("step_started", "s2")
    try:
        wait_until(lambda: proc.poll() is not None or _seen(tmp_path, kind, step_id) is not None, 300, interval=0.1)
        assert proc.poll() is None, proc.communicate()
        port = _seen(tmp_path, "server_started")["port"]  # type: ignore[index]
        if moment == "mid-step":
            # the long step runs as a job step: its srun client carries the entry's marker and its `sleep 300`
            assert wait_until(lambda: any("sleep 300" in line for line in marked(marker)), 60), marked(marker)
            assert listening(port) and len(processes_with(marker)) >= 2  # both ranks up
        [job] = {line.split()[0] for line in cluster.jobs()}
        cluster.run("scancel", job)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    said = out + err
    assert proc.returncode == 1, said
    assert "Traceback" not in said, said
    assert f"the Slurm allocation (job {job}) is" in said, said
    log = events(tmp_path)
    failed_step = "s1" if moment == "mid-readiness" else "s2"
    step = next(e for e in log if e["type"] == "step_finished" and e["step_id"] == failed_step)
    assert step["status"] in ("unreachable", "failed") and f"job {job}" in (step["error"] or ""), step
    if moment == "mid-readiness":
        assert not [e for e in log if e["type"] == "server_ready"]
        assert [e["server_id"] for e in log if e["type"] == "server_failed"] == ["big"]
    notes = [e["text"] for e in log if e["type"] == "note_added"]
    assert any("ended outside this session" in n for n in notes), notes
    # nothing behind: no rank, no port, no job, no srun client of ours
    assert wait_until(lambda: not processes_with(marker), 15, interval=0.2), "a rank survived the cancelled allocation"
    assert not listening(port)
    assert cluster.wait_idle(15), cluster.jobs()
    # srun clients carry the marker in their command line (the entry's env is exported in their step's script):
    # a job id alone is not unique while another xdist worker runs its own cluster
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert not left, f"srun clients of the cancelled job survived: {left}"
