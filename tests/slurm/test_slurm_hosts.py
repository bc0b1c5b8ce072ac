"""Slurm allocations as hosts, on a real single-machine cluster: the allocation is taken or asked for, its
nodes are reached with srun, fan-out runs on each node, and the allocation is released at session end."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from slurm_cluster import SlurmCluster

from tests.core.conftest import subprocess_env

REPO = Path(__file__).resolve().parents[2]


def run_cli(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=tmp_path, env=subprocess_env(),
                          capture_output=True, text=True, timeout=timeout)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def events(tmp_path: Path) -> list[dict]:
    [log] = sorted((tmp_path / "sessions").glob("*/events.jsonl"))
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def test_cluster_runs_one_task_per_node(cluster: SlurmCluster) -> None:
    """The fixture's cluster is real: four slurmd, each runs its own task (told apart by SLURMD_NODENAME)."""
    result = cluster.run("srun", "-N4", "bash", "-c", "echo $SLURMD_NODENAME")
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == ["n1", "n2", "n3", "n4"]


FANOUT = """\
    name: fanout
    hosts: cluster
    steps:
      - name: where am I
        shell: echo "node=$SLURMD_NODENAME job=$SLURM_JOB_ID"
        register: where
      - probe: {name: env_info, args: {torch: false}}
        register: env
      - env_diff: env
        register: envdiff
"""


def test_fanout_env_info_over_a_new_allocation_released_at_the_end(cluster: SlurmCluster, tmp_path: Path) -> None:
    write(tmp_path, "inv.yaml", f"""\
        slurm:
          cluster: {{partition: {cluster.partition}, nodes: 4, time: "10", state_dir: {tmp_path}/state}}
        """)
    write(tmp_path, "pb.yaml", FANOUT)
    result = run_cli(tmp_path, "run", "pb.yaml", "-i", "inv.yaml", "--json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    log = events(tmp_path)
    notes = [e["text"] for e in log if e["type"] == "note_added"]
    assert any("nodes n1, n2, n3, n4 via srun" in n for n in notes), notes
    assert any("released (scancel)" in n for n in notes), notes
    where = {e["host"]: e["text"] for e in log if e["type"] == "output" and e["step_id"] == "s1"}
    # each host's command ran on its own node, inside the allocation the session asked for
    assert {h: t.split()[0] for h, t in where.items()} == {f"n{i}": f"node=n{i}" for i in range(1, 5)}
    job = {t.split("job=")[1].strip() for t in where.values()}
    assert len(job) == 1
    env_step = next(e for e in log if e["type"] == "step_finished" and e["step_id"] == "s2")
    assert sorted(r["host"] for r in env_step["results"]) == ["n1", "n2", "n3", "n4"]
    diff = next(e for e in log if e["type"] == "step_finished" and e["step_id"] == "s3")["results"][0]["result"]
    assert diff["hosts"] == ["n1", "n2", "n3", "n4"]
    # one machine: the nodes agree on every field (the table is tested with different nodes in test_env_diff)
    assert diff["differences"] == {} and diff["same"]["python"].count(".") == 2
    assert cluster.wait_idle(10), cluster.jobs()  # released: no job left
    # each node's workdir was removed while the allocation still existed
    assert not list((tmp_path / "state").glob("nodes/*/sessions/*")), list((tmp_path / "state").rglob("*"))


def test_an_existing_job_is_used_and_not_released(cluster: SlurmCluster, tmp_path: Path) -> None:
    granted = cluster.run("salloc", "--no-shell", "-N3", "-t", "10", "-J", "mine")
    job = granted.stderr.split("Granted job allocation")[1].split()[0]
    try:
        write(tmp_path, "inv.yaml", f"""\
            slurm:
              cluster: {{job: {job}, nodes: 2, state_dir: {tmp_path}/state}}
            """)
        write(tmp_path, "pb.yaml", """\
            name: existing
            hosts: cluster
            steps:
              - shell: echo "$SLURMD_NODENAME in $SLURM_JOB_ID"
            """)
        result = run_cli(tmp_path, "run", "pb.yaml", "-i", "inv.yaml", "--json")
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        outputs = sorted(e["text"].strip() for e in events(tmp_path) if e["type"] == "output" and e["step_id"] == "s1")
        assert outputs == [f"n1 in {job}", f"n2 in {job}"]  # the first 2 of the job's 3 nodes
        assert any(line.startswith(f"{job} RUNNING") for line in cluster.jobs())  # someone else's: still held
    finally:
        cluster.run("scancel", job)


def test_mistakes_are_clear_errors(cluster: SlurmCluster, tmp_path: Path) -> None:
    write(tmp_path, "pb.yaml", "name: x\nhosts: cluster\nsteps:\n  - shell: 'true'\n")
    cases = {
        "job: 999999": "job 999999 does not exist",
        "nodes: 9, time: '5'": "asks for 9 node(s), partition 'debug' has 4",
        "nodes: 1, partition: gpu": "partition 'gpu' does not exist (sinfo lists: debug)",
        "nodes: 2, time: soon": "'soon' is not a Slurm time limit",
        "nodes: 2, user: me": "user only apply with via: ssh",
    }
    for entry, expected in cases.items():
        write(tmp_path, "inv.yaml", f"slurm:\n  cluster: {{{entry}}}\n")
        result = run_cli(tmp_path, "run", "pb.yaml", "-i", "inv.yaml")
        said = result.stdout + result.stderr
        assert result.returncode in (1, 2), (entry, said)
        assert expected in said, (entry, said)
        assert "Traceback" not in said, said
    assert cluster.wait_idle(10), cluster.jobs()
