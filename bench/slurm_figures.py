"""Slurm figures on a real single-machine cluster (tests/slurm_cluster.py; needs slurm-wlm + munge, root):

    .venv/bin/python bench/slurm_figures.py [--runs 5]

(1) time from starting `orchestrator run` to the first step running on an allocation the session asks for
    (salloc granted, nodes added as hosts, first srun connect): the wall time until its step_started event, and
    within it the salloc time the session's note reports;
(2) fan-out: the env_info probe step (torch: false) on 1 node versus 4 nodes of one allocation (step duration).
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    reason = slurm_missing_reason()
    if reason:
        raise SystemExit(reason)
    cluster = start_cluster(4)
    env = {**os.environ, **cluster.env, "PYTHONPATH": str(REPO)}
    try:
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
