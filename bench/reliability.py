"""Reliability figures for RELIABILITY.md (issue 19): the heavy repetitions of tests/reliability/.

    python bench/reliability.py fuzz --count 1000          # generated + mutated playbooks, counted by outcome
    python bench/reliability.py crash --runs 20            # kill -9 at random moments, then cleanup

Run from the repository root with the project's venv (PYTHONPATH=.). Each prints a summary line to paste.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def fuzz(count: int) -> int:
    from hypothesis import HealthCheck, given, settings

    from tests.reliability.playbook_fuzz import judge, playbook_text

    outcomes: Counter[str] = Counter()
    bad: list[str] = []
    work = Path(tempfile.mkdtemp(prefix="orch-fuzz-"))
    started = time.monotonic()

    @settings(max_examples=count, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(text=playbook_text())
    def case(text: str) -> None:
        verdict = asyncio.run(judge(text, work))
        outcomes[verdict.kind] += 1
        if verdict.kind == "bad":
            bad.append(f"{verdict.detail}\n--- playbook ---\n{text[:2000]}")

    case()  # hypothesis draws its own cases each run (no database): a new sample every time
    took = time.monotonic() - started
    total = sum(outcomes.values())
    print(f"fuzz: {total} playbooks in {took:.0f}s — located error {outcomes['located']}, "
          f"finished run {outcomes['run']}, valid but cut at the time limit {outcomes['cut']}, "
          f"traceback/unlocated {outcomes['bad']}")
    for item in bad[:5]:
        print(item, file=sys.stderr)
    return 1 if bad else 0


def crash(runs: int, seed: int) -> int:
    from tests.reliability.crash import kill_and_clean

    rng = random.Random(seed)
    held = 0
    orphans = ports = torn = 0
    worst: list[str] = []
    started = time.monotonic()
    for n in range(runs):
        with tempfile.TemporaryDirectory(prefix="orch-crash-") as tmp:
            trial = kill_and_clean(Path(tmp), rng=rng, earliest=0.2, latest=4.5)
        held += trial.held
        orphans += trial.orphans_before_cleanup
        ports += trial.ports_before_cleanup
        torn += trial.torn_lines
        print(f"  run {n + 1:2d}: killed at {trial.killed_after:.2f}s, {trial.events} events logged, "
              f"{trial.torn_lines} torn, {trial.orphans_before_cleanup} processes / {trial.ports_before_cleanup} ports "
              f"orphaned -> left {len(trial.left_processes)} / {len(trial.left_ports)}"
              f"{'' if trial.held else '  FAILED: ' + str(trial.problems)}")
        if not trial.held:
            worst.append(str(trial))
    print(f"crash: {runs} kill -9 runs in {time.monotonic() - started:.0f}s — held {held}/{runs}; "
          f"{orphans} orphaned processes and {ports} listening ports in all, 0 left after cleanup"
          f"{'' if held == runs else ' (NOT: see above)'}; {torn} torn last lines, every report marked incomplete")
    return 0 if held == runs else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    f = sub.add_parser("fuzz")
    f.add_argument("--count", type=int, default=1000)
    c = sub.add_parser("crash")
    c.add_argument("--runs", type=int, default=20)
    c.add_argument("--seed", type=int, default=19)
    args = parser.parse_args()
    return fuzz(args.count) if args.what == "fuzz" else crash(args.runs, args.seed)


if __name__ == "__main__":
    sys.exit(main())
