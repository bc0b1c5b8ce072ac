"""The lab's first use, timed: the shipped models installed into a fresh lab directory and confirmed on this CPU —
or, with ``--unmatched``, treated as computed otherwise than on every recorded CPU, so that the lab calibrates here
(the path a new CPU model takes). The fingerprint is still computed in full; only its comparison is made to fail
(a key no recorded CPU has is added), so the time is the one a new CPU pays.

    .venv/bin/python bench/lab_first_use.py                       # matched bits (this CPU's, if recorded)
    .venv/bin/python bench/lab_first_use.py --unmatched           # a CPU whose bits match none
    .venv/bin/python bench/lab_first_use.py --unmatched --scenario all     # `orchestrator lab build --scenario all`
    .venv/bin/python bench/lab_first_use.py --unmatched --run playbooks/eagle3.yaml   # command 1's run, in full

The lab directory is a fresh temporary one ($ORCHESTRATOR_LAB_DIR is set to it); the cache directory is yours
(only its sglang source tree is read; --fresh-cache takes an empty one, so the sglang install is timed too). Prints
the build's progress lines, the seconds, lab.json's timings and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _unmatch() -> None:
    from orchestrator.lab.building import shipped

    real = shipped.fingerprint

    def unmatched(base: Path) -> dict[str, Any]:
        return {**real(base), "bench": "bits no recorded CPU has"}

    shipped.fingerprint = unmatched  # type: ignore[assignment]  # a bench, not the product


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--unmatched", action="store_true", help="treat this CPU's bits as matching no recorded CPU")
    parser.add_argument("--scenario", default="seed-wiring", help="the scenario built (default: the flagship's)")
    parser.add_argument("--run", metavar="PLAYBOOK", help="run `orchestrator run PLAYBOOK` instead of a bare build")
    parser.add_argument("--fresh-cache", action="store_true", help="an empty $ORCHESTRATOR_CACHE_DIR as well")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directories")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lab-first-use."))
    os.environ["ORCHESTRATOR_LAB_DIR"] = str(work / "lab")
    if args.fresh_cache:
        os.environ["ORCHESTRATOR_CACHE_DIR"] = str(work / "cache")
    if args.unmatched:
        _unmatch()
    print(f"load start {_load()}  ({'unmatched' if args.unmatched else 'matched'} bits, lab {work / 'lab'})",
          flush=True)
    t0 = time.monotonic()
    rc = 0
    if args.run:
        from orchestrator.cli import app

        os.chdir(REPO)
        try:
            app(["run", args.run, "--sessions-dir", str(work / "sessions")], standalone_mode=False)
        except SystemExit as exc:
            rc = int(exc.code or 0)
    else:
        from orchestrator.cli.progress import PlainProgress
        from orchestrator.lab.building.build import SCENARIO_NAMES
        from orchestrator.lab.building.builder import build_lab

        report = PlainProgress(sys.stdout)
        for name in SCENARIO_NAMES if args.scenario == "all" else [args.scenario]:
            build_lab(name, progress=report)
    seconds = time.monotonic() - t0
    from orchestrator.lab.building.build import read_state

    state = read_state(work / "lab")
    print(f"{'run' if args.run else 'build'} {seconds:.1f} s (rc {rc}); lab.json timings "
          f"{json.dumps(state.get('timings', {}))}; calibrated {sorted(state.get('calibration', {}))}")
    print(f"load end {_load()}")
    if not args.keep:
        from orchestrator.tree_removal import remove_tree

        remove_tree(work)
    else:
        print(f"kept {work}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
