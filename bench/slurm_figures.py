"""Slurm figures on a real single-machine cluster (tests/slurm_cluster.py; needs slurm-wlm + munge, root):

    .venv/bin/python bench/slurm_figures.py [--runs 5]

(1) time from starting `orchestrator run` to the first step running on an allocation the session asks for
    (salloc granted, nodes added as hosts, first srun connect): the wall time until its step_started event, and
    within it the salloc time the session's note reports;
(2) fan-out: the env_info probe step (torch: false) on 1 node versus 4 nodes of one allocation (step duration);
(3) a lab server (the healthy lab's candidate EAGLE-3 flags) started with `nodes: 1` versus `nodes: 2` on a 2-node
    allocation: the server's time to ready (spawn of rank 0 to ready: ``srv.ready_s``) and the whole start step
    (port pick, pre-flight check, every rank's spawn as its own job step, readiness, /server_info). Skipped with
    ``--no-servers`` or when the lab's torch is missing; the lab is built (cached) the first time.
Medians over N runs, each a fresh `orchestrator run` subprocess.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from slurm_cluster import slurm_missing_reason, start_cluster  # noqa: E402

PLAYBOOK = """\
name: slurm-bench
hosts: cluster
steps:
  - shell: "true"
  - probe: {name: env_info, args: {torch: false}}
"""


def one_run(directory: Path, nodes: int, env: dict[str, str]) -> dict[str, float]:
    (directory / "inv.yaml").write_text(f"slurm:\n  cluster: {{nodes: {nodes}, time: '10', "
                                        f"state_dir: {directory}/state}}\n")
    (directory / "pb.yaml").write_text(PLAYBOOK)
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "pb.yaml", "-i", "inv.yaml", "--json"],
                            cwd=directory, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    figures: dict[str, float] = {}
    for line in proc.stdout:
        event = json.loads(line)
        if event["type"] == "step_started" and "first_step_s" not in figures:
            figures["first_step_s"] = time.monotonic() - started
        elif event["type"] == "note_added" and "granted in" in event["text"]:
            figures["salloc_s"] = float(event["text"].split("granted in ")[1].split("s,")[0])
        elif event["type"] == "step_finished" and event["step_id"] == "s2":
            figures["env_info_s"] = event["duration"]
    if proc.wait() != 0:
        raise SystemExit(f"orchestrator run failed (exit {proc.returncode}) in {directory}")
    figures["total_s"] = time.monotonic() - started
    return figures


SERVER_PLAYBOOK = """\
name: slurm-server-bench
hosts: "cluster[0]"
steps:
  - server: {name: s, nodes: NODES, model: "{{ target }}", flags: "{{ candidate_flags }}", ready_timeout: 600}
  - server: {action: stop, name: s}
"""


def server_run(directory: Path, nodes: int, env: dict[str, str], lab_root: Path) -> dict[str, float]:
    from orchestrator.lab.building.inventory import lab_env, lab_host_vars

    entry = {"nodes": 2, "time": "10", "state_dir": f"{directory}/state", "python": sys.executable,
             "env": lab_env(lab_root, "sglang"), "vars": lab_host_vars("healthy", root=lab_root, engine="sglang")}
    (directory / "inv.yaml").write_text(json.dumps({"slurm": {"cluster": entry}}))
    (directory / "pb.yaml").write_text(SERVER_PLAYBOOK.replace("NODES", str(nodes)))
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "run", "pb.yaml", "-i", "inv.yaml", "--json"],
                          cwd=directory, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"orchestrator run failed (exit {proc.returncode}) in {directory}: {proc.stderr[-2000:]}")
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    start = next(e for e in events if e["type"] == "step_finished" and e["step_id"] == "s1")
    result = start["results"][0]["result"]
    assert len(result["ranks"] or [None]) == nodes, result["ranks"]
    return {"ready_s": result["ready_s"], "start_step_s": start["duration"]}


def server_figures(cluster: object, env: dict[str, str], runs: int) -> None:
    try:
        from orchestrator.lab.building.build import cache_dir
        from orchestrator.lab.building.builder import build_lab
    except ImportError as exc:
        print(f"server figures skipped: {exc}")
        return
    root = cache_dir() / "lab-test"
    build_lab("healthy", root=root)
    rows: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    for _ in range(runs):
        for nodes in (1, 2):
            with tempfile.TemporaryDirectory() as tmp:
                rows[nodes].append(server_run(Path(tmp), nodes, env, root))
            cluster.wait_idle(15)  # type: ignore[attr-defined]
    for nodes, found in rows.items():
        med = {key: statistics.median(r[key] for r in found) for key in found[0]}
        spread = {key: (min(r[key] for r in found), max(r[key] for r in found)) for key in found[0]}
        print(f"lab server, nodes: {nodes}, median of {runs}: "
              + ", ".join(f"{k} {v:.2f} (range {spread[k][0]:.2f}-{spread[k][1]:.2f})" for k, v in med.items()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-servers", action="store_true", help="skip the multi-node server figure")
    parser.add_argument("--only-servers", action="store_true", help="only the multi-node server figure")
    options = parser.parse_args()
    runs = options.runs
    reason = slurm_missing_reason()
    if reason:
        raise SystemExit(reason)
    cluster = start_cluster(4)
    env = {**os.environ, **cluster.env, "PYTHONPATH": str(REPO)}
    try:
        if not options.no_servers:
            server_figures(cluster, env, runs)
        if options.only_servers:
            return
        results: dict[int, list[dict[str, float]]] = {1: [], 4: []}
        for _ in range(runs):
            for nodes in (1, 4):
                with tempfile.TemporaryDirectory() as tmp:
                    results[nodes].append(one_run(Path(tmp), nodes, env))
                cluster.wait_idle(15)
        for nodes, rows in results.items():
            med = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
            print(f"{nodes} node(s), median of {runs}: " + ", ".join(f"{k} {v:.3f}" for k, v in med.items()))
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
