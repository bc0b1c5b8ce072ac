"""The tuner against brute force, through the CLI on one host: the full chain grid the way SGLang's
bench_speculative.py runs it (one server restart per point plus the no-speculation baseline: playbooks/tune.yaml
with every candidate verified) and the tuner (a baseline, one probe, ``--verify`` restarts). Prints both optima with
their tok/s intervals, the restarts each needed, and whether the tuner's pick is the grid's optimum within intervals.

Usage:
  python bench/tune_vs_grid.py                                  # the lab (its SGLang stand-in, the default scenario)
  python bench/tune_vs_grid.py -i inventory.yaml --host vllm1   # a real host (e.g. the README's real vLLM)
  python bench/tune_vs_grid.py --ks 1 2 3 4 5 6 7 8 --verify 2 --n 12 --tokens 64 --repeat 2
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


def run_tune(sessions: Path, extra: list[str]) -> tuple[dict, float, int, Path]:
    before = set(sessions.glob("*")) if sessions.is_dir() else set()
    exe = Path(sys.executable).parent / "orchestrator"
    started = time.monotonic()
    proc = subprocess.run([str(exe), "run", str(REPO / "playbooks" / "tune.yaml"), "--sessions-dir", str(sessions),
                           *extra], capture_output=True, text=True, cwd=str(REPO), env=dict(os.environ))
    seconds = time.monotonic() - started
    new = sorted(set(sessions.glob("*")) - before)
    if not new:
        raise SystemExit(f"tune.yaml left no session: {proc.stderr[-2000:]}")
    for line in (new[-1] / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("type") == "step_finished" and event.get("action") == "tune":
            return event["results"][0]["result"] or {}, seconds, proc.returncode, new[-1]
    raise SystemExit(f"{new[-1]}: the tune step left no result (rc {proc.returncode}): {proc.stdout[-1500:]}")


def fmt(ci: list[float] | None) -> str:
    return f"[{ci[0]:.1f}, {ci[1]:.1f}]" if ci else "[-]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-i", "--inventory")
    ap.add_argument("--host")
    ap.add_argument("--ks", type=int, nargs="+", default=list(range(1, 9)))
    ap.add_argument("--verify", type=int, default=2)
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=1, help="pairs of runs (their order alternates)")
    args = ap.parse_args()
    where = (["-i", args.inventory] if args.inventory else []) + (["--host", args.host] if args.host else [])
    common = where + ["-e", f"bench_n={args.n}", "-e", f"bench_tokens={args.tokens}",
                      "-e", f"tune_candidates={json.dumps(args.ks)}"]
    sessions = Path(tempfile.mkdtemp(prefix="tune-vs-grid-")) / "sessions"
    with open("/proc/loadavg") as f:
        print(f"load {' '.join(f.read().split()[:3])}; ks {args.ks}; tuner verifies {args.verify}; "
              f"{args.n} requests x {args.tokens} tokens per point")
    held = 0
    for run in range(args.repeat):
        results = {}
        for kind in (("grid", "tuner") if run % 2 == 0 else ("tuner", "grid")):
            verify = len(args.ks) if kind == "grid" else args.verify
            res, seconds, rc, session = run_tune(sessions, common + ["-e", f"tune_verify={verify}"])
            rec = res.get("recommended") or {}
            results[kind] = res
            print(f"[{run}] {kind:5s}: k={rec.get('k')} {rec.get('tok_s')} {fmt(rec.get('tok_s_ci'))} tok/s "
                  f"({rec.get('speedup')}x baseline {res.get('baseline', {}).get('tok_s')}; beats it: "
                  f"{rec.get('beats_baseline')}), {res.get('restarts')} restarts, {seconds:.0f} s, rc {rc}; "
                  f"predicted/measured agree {res['agreement']['agree']}/{res['agreement']['measured']}; {session}")
        grid, tuner = results["grid"].get("recommended") or {}, results["tuner"].get("recommended") or {}
        if grid and tuner:
            gci, tci = grid["tok_s_ci"], tuner["tok_s_ci"]
            same = tuner["k"] == grid["k"] or (tci[0] <= gci[1] and gci[0] <= tci[1])
            held += same
            ratio = results["tuner"]["restarts"] / results["grid"]["restarts"]
            print(f"[{run}] same optimum within intervals: {same} (grid k={grid['k']} {fmt(gci)}, tuner "
                  f"k={tuner['k']} {fmt(tci)}); restarts {results['tuner']['restarts']} vs "
                  f"{results['grid']['restarts']} ({ratio:.2f} of the grid's)")
    print(f"held {held}/{args.repeat}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
