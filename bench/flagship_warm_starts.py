"""The flagship on the lab through the CLI, with the warm starts (the lab's warm interpreter for its servers, the
session's warm-up of the torch probes' zygote) and without them (``ORCHESTRATOR_WARM_STARTS=0``: each server
imports torch itself, the zygote starts with the draft test's call), alternated so that load drift hits both alike.

    .venv/bin/python bench/flagship_warm_starts.py [--repeat 3] [--modes warm cold]

Each run is ``orchestrator run playbooks/eagle3.yaml`` as a new process in a fresh sessions dir (the user's path:
console, session log, reports) on the default lab. Prints per mode the median session time (the CLI's own
``ok in N s``) and wall time, and the median duration of the steps that differ (the three server starts, the draft
test, the reconcile), with the load average before and after each run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = ("Baseline server (no speculation)", "Speculative server with the candidate flags", "Restart with the fix",
         "Standalone draft test over candidate wirings", "Reconcile every speculative benchmark with the draft test")


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


@dataclass
class Run:
    session: float
    wall: float
    steps: dict[str, float]
    load: str


def run_once(mode: str, work: Path) -> Run:
    env = dict(os.environ)
    if mode == "cold":
        env["ORCHESTRATOR_WARM_STARTS"] = "0"
    sessions = Path(tempfile.mkdtemp(prefix=f"{mode}-", dir=work))
    before = _load()
    started = time.monotonic()
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "orchestrator"), "run", "playbooks/eagle3.yaml",
                           "--sessions-dir", str(sessions)], cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    said = re.search(r"■ \w+ in ([\d.]+)s", proc.stdout)
    if proc.returncode != 0 or not said:
        raise SystemExit(f"{mode} run failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    (log,) = sessions.glob("*/events.jsonl")
    steps = {}
    for line in log.read_text().splitlines():
        event = json.loads(line)
        if event.get("type") == "step_finished" and event.get("name") in STEPS:
            steps[event["name"]] = float(event["duration"])
    return Run(float(said.group(1)), wall, steps, f"{before} -> {_load()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--modes", nargs="+", default=["warm", "cold"], choices=["warm", "cold"])
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="flagship-warm-"))
    runs: dict[str, list[Run]] = {m: [] for m in args.modes}
    for i in range(args.repeat):
        for mode in args.modes:
            run = run_once(mode, work)
            runs[mode].append(run)
            print(f"run {i + 1} {mode}: session {run.session:.1f} s, wall {run.wall:.1f} s, load {run.load}", flush=True)
    print()
    for mode, done in runs.items():
        sessions = [r.session for r in done]
        print(f"{mode}: session median {statistics.median(sessions):.1f} s (min {min(sessions):.1f}, "
              f"max {max(sessions):.1f}), wall median {statistics.median(r.wall for r in done):.1f} s")
        for step in STEPS:
            values = [r.steps[step] for r in done if step in r.steps]
            if values:
                print(f"  {step}: median {statistics.median(values):.2f} s")
    print(f"\nsessions under {work}")


if __name__ == "__main__":
    sys.exit(main())
