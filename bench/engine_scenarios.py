"""The flagship through the CLI on every lab scenario of one engine, and the cross-engine playbook on its scenarios.

Runs ``orchestrator run playbooks/eagle3.yaml`` as a new process (the console script the user runs, session log and
reports on) with ``ORCHESTRATOR_LAB_ENGINE`` set, against an already built lab (``--lab``; the test suite's lab is
``~/.cache/orchestrator/lab-test``), and prints, per scenario, the exit code, the wall time and whether the verdict
is right: the scenario's planted fault(s) confirmed and no other fault confirmed. With ``--cross`` it also runs
``playbooks/cross-engine.yaml`` on the divergent scenarios and prints its board.

Usage: python bench/engine_scenarios.py --engine vllm [--lab DIR] [--scenarios all] [--cross]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lab_seeds import FAULTS, board_of  # noqa: E402

from orchestrator.lab.build import SCENARIO_NAMES, scenarios  # noqa: E402
from orchestrator.lab.vllm_lab import VLLM_SCENARIO_NAMES, vllm_scenarios  # noqa: E402

CROSS = ("off-by-one", "sglang-ids", "seed-wiring")


def run_cli(playbook: str, lab: Path, engine: str, scenario: str, sessions: Path) -> tuple[dict[str, str], int, float]:
    env = dict(os.environ, ORCHESTRATOR_LAB_DIR=str(lab), ORCHESTRATOR_LAB_ENGINE=engine,
               ORCHESTRATOR_LAB_SCENARIO=scenario)
    before = set(sessions.glob("*")) if sessions.is_dir() else set()
    cli = Path(sys.executable).parent / "orchestrator"
    started = time.monotonic()
    proc = subprocess.run([str(cli), "run", str(REPO / "playbooks" / playbook), "--sessions-dir", str(sessions)],
                          env=env, capture_output=True, text=True, cwd=str(REPO))
    seconds = time.monotonic() - started
    new = sorted(set(sessions.glob("*")) - before)
    if not new:
        raise SystemExit(f"{playbook} on {scenario} left no session: {proc.stderr[-2000:]}")
    return board_of(new[-1]), proc.returncode, seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=["sglang", "vllm"], default="vllm")
    ap.add_argument("--lab", type=Path, default=Path.home() / ".cache" / "orchestrator" / "lab-test")
    ap.add_argument("--scenarios", nargs="+", default=["all"])
    ap.add_argument("--cross", action="store_true", help="also run playbooks/cross-engine.yaml")
    args = ap.parse_args()
    lab = args.lab
    num_layers = json.loads((lab / "target" / "config.json").read_text())["num_hidden_layers"]
    if args.engine == "vllm":
        table = vllm_scenarios(lab, num_layers)
        every = list(VLLM_SCENARIO_NAMES)
    else:
        table = scenarios(lab, num_layers)
        every = list(SCENARIO_NAMES)
    names = every if args.scenarios == ["all"] else args.scenarios
    sessions = Path(tempfile.mkdtemp(prefix="engine-scenarios-"))
    print(f"lab {lab}, engine {args.engine}, load average {os.getloadavg()[0]:.1f}, sessions in {sessions}")
    rows, right = [], 0
    for name in names:
        states, code, seconds = run_cli("eagle3.yaml", lab, args.engine, name, sessions)
        confirmed = {h for h, s in states.items() if s == "confirmed"} & FAULTS
        ok = confirmed == set(table[name].confirms) and code == 0
        right += ok
        shown = ", ".join(sorted(confirmed)) or "nothing"
        rows.append(f"| {name} | {', '.join(table[name].confirms) or 'none'} | {shown} | "
                    f"{'right' if ok else 'WRONG'} | {seconds:.1f} s |")
        print(f"{name:<12} exit {code} {seconds:6.1f}s {'right' if ok else 'WRONG'}: {shown}", flush=True)
    print("\n| scenario | planted | confirmed | verdict | time |\n|---|---|---|---|---:|")
    print("\n".join(rows))
    print(f"\n{right}/{len(names)} right; load average now {os.getloadavg()[0]:.1f}")
    if args.cross:
        print("\n| cross-engine scenario | feeds_differ | depth_differs | unexplained | time |\n|---|---|---|---|---:|")
        for name in CROSS:
            states, code, seconds = run_cli("cross-engine.yaml", lab, "vllm", name, sessions)
            print(f"| {name} | {states.get('feeds_differ')} | {states.get('depth_differs')} | "
                  f"{states.get('unexplained')} | {seconds:.1f} s (exit {code}) |", flush=True)
    return 0 if right == len(names) else 1


if __name__ == "__main__":
    sys.exit(main())
