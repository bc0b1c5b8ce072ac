"""The scenario x seed matrix: build the lab with several seeds (each from nothing, in its own lab and cache
directories, calibration on), then run the flagship through the CLI on every scenario and print whether each
verdict is right: the scenario's planted fault(s) confirmed, no other fault confirmed, and on the healthy lab
`wiring` refuted. Slow (about 3-5 min of training a seed plus ~30 s a flagship run on 2 cores); not part of CI.

Usage: python bench/lab_seeds.py [--seeds 0 1 2] [--scenarios all] [--work DIR] [--keep]
Prints one line per run as it goes, then the matrix (markdown) with the calibration margins per seed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.lab.building.build import SCENARIO_NAMES, read_state, scenarios  # noqa: E402
from orchestrator.lab.building.builder import build_lab  # noqa: E402

FAULTS = {"wiring", "flags_override", "d2t_mapping", "lm_head_sharing", "wrong_algorithm", "layer_id_convention",
          "lm_head_missing", "architecture", "rope_mismatch", "served_part", "draft_field"}


def board_of(session: Path) -> dict[str, str]:
    from orchestrator.hypotheses.board import HypothesisBoard
    from orchestrator.session.reader import read_session

    board = HypothesisBoard.from_events(read_session(session).events)
    return {hid: entry.state for hid, entry in board.entries.items()}


def run_flagship(lab: Path, cache: Path, scenario: str, sessions: Path) -> tuple[dict[str, str], int, float]:
    env = dict(os.environ, ORCHESTRATOR_LAB_DIR=str(lab), ORCHESTRATOR_CACHE_DIR=str(cache),
               ORCHESTRATOR_LAB_SCENARIO=scenario)
    before = set(sessions.glob("*")) if sessions.is_dir() else set()
    started = time.monotonic()
    cli = Path(sys.executable).parent / "orchestrator"  # the console script the user runs
    proc = subprocess.run([str(cli), "run", str(REPO / "playbooks" / "eagle3.yaml"),
                           "--sessions-dir", str(sessions)], env=env, capture_output=True, text=True, cwd=str(REPO))
    seconds = time.monotonic() - started
    new = sorted(set(sessions.glob("*")) - before)
    if not new:
        raise SystemExit(f"flagship on {scenario} left no session: {proc.stderr[-2000:]}")
    return board_of(new[-1]), proc.returncode, seconds


def judge(scenario: str, confirms: tuple[str, ...], states: dict[str, str]) -> tuple[bool, str]:
    confirmed = {h for h, s in states.items() if s == "confirmed"} & FAULTS
    ok = confirmed == set(confirms)
    if scenario == "healthy":
        ok = ok and states.get("wiring") == "refuted"
    shown = ", ".join(sorted(confirmed)) or "nothing"
    return ok, shown + ("" if scenario != "healthy" else f"; wiring {states.get('wiring')}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--scenarios", nargs="+", default=["all"])
    ap.add_argument("--work", type=Path, default=None, help="keep labs here (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="do not delete the work directory")
    args = ap.parse_args()
    names = list(SCENARIO_NAMES) if args.scenarios == ["all"] else args.scenarios
    work = args.work or Path(tempfile.mkdtemp(prefix="lab-seeds-"))
    cells: dict[tuple[str, int], tuple[bool, str]] = {}
    calibration: dict[int, str] = {}
    try:
        for seed in args.seeds:
            lab, cache = work / f"lab-{seed}", work / f"cache-{seed}"
            os.environ["ORCHESTRATOR_CACHE_DIR"] = str(cache)  # a fresh cache: every seed trains from nothing
            t0 = time.monotonic()

            def say(stage: str, message: str, fraction: float, t0: float = t0, seed: int = seed) -> None:
                if fraction >= 1.0:
                    print(f"  [{time.monotonic() - t0:6.1f}s] seed {seed} {stage}: {message}", flush=True)

            for name in names:
                build_lab(name, root=lab, seed=seed, progress=say, from_scratch=True)
            state = read_state(lab)
            margins = []
            for kind, record in sorted(state.get("calibration", {}).items()):
                last = record["attempts"][-1]
                margins.append(f"{kind}: {len(record['attempts'])} training(s), "
                               + ", ".join(f"{c['scenario']}/{c['kind']} {c['margin']}" for c in last["checks"]))
            rejected = [f"target seed {r['seed']} rejected ({r['draft']} unclear)"
                        for r in state.get("targets_rejected", [])]
            margins.insert(0, f"target seed {state.get('target_seed')}" + (f" [{', '.join(rejected)}]"
                                                                            if rejected else ""))
            calibration[seed] = "; ".join(margins)
            print(f"seed {seed}: lab built in {time.monotonic() - t0:.0f} s; calibration {calibration[seed]}",
                  flush=True)
            table = scenarios(lab, json.loads((lab / "target" / "config.json").read_text())["num_hidden_layers"])
            for name in names:
                states, code, seconds = run_flagship(lab, cache, name, work / f"sessions-{seed}")
                ok, shown = judge(name, table[name].confirms, states)
                cells[(name, seed)] = (ok, shown)
                print(f"seed {seed} {name:<17} exit {code} {seconds:5.1f}s {'RIGHT' if ok else 'WRONG'}: {shown}",
                      flush=True)
    finally:
        if not (args.keep or args.work):
            shutil.rmtree(work, ignore_errors=True)
    print("\n| scenario | " + " | ".join(f"seed {s}" for s in args.seeds) + " |")
    print("|---|" + "---|" * len(args.seeds))
    for name in names:
        row = [("✔ " if cells[(name, s)][0] else "✘ ") + cells[(name, s)][1] for s in args.seeds]
        print(f"| {name} | " + " | ".join(row) + " |")
    right = sum(ok for ok, _ in cells.values())
    print(f"\n{right}/{len(cells)} cells right")
    for seed, text in calibration.items():
        print(f"- seed {seed} calibration margins: {text}")
    return 0 if right == len(cells) else 1


if __name__ == "__main__":
    sys.exit(main())
