"""The tuner against brute force, through the CLI on one host: the full chain grid the way SGLang's
bench_speculative.py runs it (one server restart per point plus the no-speculation baseline: playbooks/tune.yaml
with every candidate verified) and the tuner (a baseline, one probe, ``--verify`` restarts). Prints both optima with
their tok/s intervals, the restarts each needed, and whether the tuner's pick is the grid's optimum within intervals.

Restarts are counted as each tool would: the grid is one server start per chain length plus the no-speculation
baseline (bench_speculative.py's ``--steps 0`` point), concurrency looping inside each server; the tuner's are its
step's own starts (``restarts_counted`` in its result: the baseline, the probe, each top prediction not measured).

Usage:
  python bench/tune_vs_grid.py                                  # the lab (its SGLang stand-in, the default scenario)
  python bench/tune_vs_grid.py --real-vllm healthy              # the lab's models on the REAL vLLM host
  python bench/tune_vs_grid.py -i inventory.yaml --host vllm1   # any host of an inventory
  python bench/tune_vs_grid.py --ks 1 2 3 4 5 6 7 8 --verify 2 --n 12 --tokens 64 --repeat 2
  python bench/tune_vs_grid.py --ks 2 3 4 5 6 7 8 --topk 1 2 4 --draft-tokens 6 8 16 32   # SGLang's trees too
  python bench/tune_vs_grid.py --only grid --save DIR; ... --only tuner --compare DIR/grid-0.json   # apart
  python bench/tune_vs_grid.py --concurrency 1 4     # a concurrency profile: each start benched at 1 and 4,
                                                    # the optimum compared per concurrency, the crossover printed
  python bench/tune_vs_grid.py --replay DIR/grid-0.json --verify 2   # the tuner's part of a saved grid run

``--replay``: the grid run starts the baseline, then the probe at the largest k, then every other k in the order of
the model's prediction, so its first server starts ARE the tuner's (the same fit from the same two benchmarks picks
the same top predictions): the tuner's result is read from that prefix, the same measurements, not a second run.
For a host too slow for two runs (the real vLLM host under load); an independent tuner run is the default.
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
            result = event["results"][0]["result"] or {}
            if result.get("full_result"):  # the log line kept the head of a big result (session/log.py)
                result = json.loads((new[-1] / result["full_result"]).read_text())
            return result, seconds, proc.returncode, new[-1]
    raise SystemExit(f"{new[-1]}: the tune step left no result (rc {proc.returncode}): {proc.stdout[-1500:]}")


def _name(row: dict) -> str:
    """A row's or recommendation's configuration: a chain's k, a tree's label (tree_space.TreeConfig)."""
    return str(row.get("label") or f"k={row.get('k')}")


def fmt(ci: list[float] | None) -> str:
    return f"[{ci[0]:.1f}, {ci[1]:.1f}]" if ci else "[-]"


def real_vllm_inventory_file(scenario: str, where: str | None, directory: Path) -> Path:
    """The lab's models served by the real vLLM host (orchestrator/lab/vllm_host/inventory.py), as an inventory file."""
    from orchestrator.lab.building.inventory import ensure_lab
    from orchestrator.lab.vllm_host.host import ensure_vllm_host, is_built
    from orchestrator.lab.vllm_host.inventory import real_vllm_inventory

    if not is_built(where):
        raise SystemExit("no real vLLM host is built: `orchestrator lab vllm-host` (or --vllm-host DIR)")
    lab = ensure_lab(scenario, engine="vllm")
    inventory = real_vllm_inventory(scenario, root=lab.root, host=ensure_vllm_host(where), run_dir=directory / "run")
    path = directory / "inventory.json"  # JSON is YAML: load_inventory reads it
    path.write_text(json.dumps(inventory.model_dump(mode="json", exclude={"source"}), indent=2))
    return path


def replay(grid: dict, verify: int, *, baseline_given: bool = False) -> dict:
    """What ``tune`` with ``verify`` would have measured and recommended: the grid run's baseline, its probe, and its
    first restarts while each is the best unmeasured of the model's top ``verify`` at that pick (the grid run and
    the tuner refit the same model from the same measurements, so their rankings agree pick by pick)."""
    counted = grid["restarts_counted"]
    probe_k = next(r["k"] for r in grid["rows"] if r.get("probe"))
    measured, top = {probe_k}, []
    # one ranking per pick, and one more where the grid stopped: the picks bound the loop
    for ranking, pick in zip(counted.get("rankings") or [], counted["verify"], strict=False):
        pending = [k for k in ranking[:verify] if k not in measured]
        if len(top) >= verify or not pending:
            break
        assert pending[0] == pick, (pending, pick)  # the first unmeasured of the ranking is the grid's pick
        top.append(pick)
        measured.add(pick)
    rows = [dict(r) for r in grid["rows"]]
    kept = measured
    for r in rows:
        r.pop("recommended", None)
        if r["k"] not in kept:
            for key in ("measured_tok_s", "measured_tok_s_ci", "measured_accept_length", "agrees"):
                r.pop(key, None)
    done = [r for r in rows if r.get("measured_tok_s") is not None]
    best = max(done, key=lambda r: r["measured_tok_s"])
    base = grid["baseline"]
    lo, hi = best["measured_tok_s_ci"]
    beats = "yes" if lo > base["tok_s_ci"][1] else "no" if hi < base["tok_s_ci"][0] else "inconclusive"
    verified = [k for k in top if not next(r for r in rows if r["k"] == k).get("probe")]
    return {"rows": rows, "baseline": base, "profile": grid.get("profile"),
            "recommended": {"k": best["k"], "tok_s": best["measured_tok_s"], "tok_s_ci": best["measured_tok_s_ci"],
                            "speedup": round(best["measured_tok_s"] / base["tok_s"], 3), "beats_baseline": beats},
            "restarts": (0 if baseline_given else counted["baseline"]) + 1 + len(verified),
            "restarts_counted": {**counted, "verify": verified, "top_predicted": top},
            "agreement": {"measured": len(done), "agree": sum(1 for r in done if r.get("agrees")),
                          "independent": sum(1 for r in done if not r["probe"]),
                          "independent_agree": sum(1 for r in done if not r["probe"] and r.get("agrees"))}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-i", "--inventory")
    ap.add_argument("--host")
    ap.add_argument("--real-vllm", metavar="SCENARIO", help="the lab's SCENARIO (e.g. healthy) on the real vLLM host")
    ap.add_argument("--vllm-host", help="a built vLLM host directory (default: orchestrator lab vllm-host's)")
    ap.add_argument("--only", choices=("grid", "tuner"), help="run one side (e.g. the long grid apart)")
    ap.add_argument("--save", help="write each run's tune result here as KIND-RUN.json")
    ap.add_argument("--compare", help="a saved grid result (--save) to hold --only tuner against")
    ap.add_argument("--replay", help="a saved grid result (--save): print the tuner's part of it (no server)")
    ap.add_argument("--baseline-given", action="store_true", help="with --replay: the baseline counted as given "
                    "to both (the flagship's, as -e tune_after_fix=true reuses it)")
    ap.add_argument("--ks", type=int, nargs="+", default=list(range(1, 16)))  # the seed went to 15
    ap.add_argument("--verify", type=int, default=2)
    ap.add_argument("--topk", type=int, nargs="+", default=[1], help="SGLang topk values: above 1 adds trees")
    ap.add_argument("--draft-tokens", type=int, nargs="+", default=[8, 16], help="the trees' budgets")
    ap.add_argument("--concurrency", type=int, nargs="+", default=None, help="a concurrency profile (tune_concurrency)")
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=1, help="pairs of runs (their order alternates)")
    args = ap.parse_args()
    if args.replay and args.concurrency and len(set(args.concurrency)) > 1:
        raise SystemExit("--replay reads one concurrency's rankings: run the tuner with a profile instead")
    if args.replay:
        grid = json.loads(Path(args.replay).read_text())
        tuner, g = replay(grid, args.verify, baseline_given=args.baseline_given), grid["recommended"]
        grid_restarts = grid["restarts"] - (grid["restarts_counted"]["baseline"] if args.baseline_given else 0)
        t = tuner["recommended"]
        same = t["k"] == g["k"] or (t["tok_s_ci"][0] <= g["tok_s_ci"][1] and g["tok_s_ci"][0] <= t["tok_s_ci"][1])
        a = tuner["agreement"]
        print(f"grid : k={g['k']} {g['tok_s']} {fmt(g['tok_s_ci'])} tok/s ({g['speedup']}x), {grid_restarts} "
              f"restarts, {grid.get('wall_s')} s; agree {grid['agreement']['agree']}/{grid['agreement']['measured']}")
        print(f"tuner (replayed, verify {args.verify}): k={t['k']} {t['tok_s']} {fmt(t['tok_s_ci'])} tok/s "
              f"({t['speedup']}x; beats the baseline: {t['beats_baseline']}), {tuner['restarts']} restarts "
              f"{tuner['restarts_counted']['verify']} (top predicted {tuner['restarts_counted']['top_predicted']}); "
              f"agree {a['agree']}/{a['measured']} (without the probe {a['independent_agree']}/{a['independent']})")
        print(f"same optimum within intervals: {same}; restarts {tuner['restarts']} vs {grid_restarts} "
              f"({tuner['restarts'] / grid_restarts:.2f} of the grid's"
              f"{', the baseline given to both' if args.baseline_given else ''})")
        return 0
    scratch = Path(tempfile.mkdtemp(prefix="tune-vs-grid-"))
    where = (["-i", args.inventory] if args.inventory else []) + (["--host", args.host] if args.host else [])
    if args.real_vllm:
        where = ["-i", str(real_vllm_inventory_file(args.real_vllm, args.vllm_host, scratch)), "--host", "lab"]
    common = where + ["-e", f"bench_n={args.n}", "-e", f"bench_tokens={args.tokens}",
                      "-e", f"tune_candidates={json.dumps(args.ks)}", "-e", f"tune_topk={json.dumps(args.topk)}",
                      "-e", f"tune_draft_tokens={json.dumps(args.draft_tokens)}"]
    if args.concurrency:
        common += ["-e", f"tune_concurrency={json.dumps(sorted(set(args.concurrency)))}"]
    from orchestrator.tuning.tree_space import tree_configs

    space = len(args.ks) + len(tree_configs(args.ks, args.topk, args.draft_tokens))
    sessions = scratch / "sessions"
    kinds = (args.only,) if args.only else ("grid", "tuner")
    with open("/proc/loadavg") as f:
        print(f"load {' '.join(f.read().split()[:3])}; ks {args.ks}; tuner verifies {args.verify}; "
              f"{args.n} requests x {args.tokens} tokens per point; {' '.join(where) or 'the lab'}")
    held = 0
    for run in range(args.repeat):
        results = {}
        if args.compare:
            results["grid"] = json.loads(Path(args.compare).read_text())
        for kind in (kinds if run % 2 == 0 else kinds[::-1]):
            verify = space if kind == "grid" else args.verify  # the grid: every chain and every tree measured
            res, seconds, rc, session = run_tune(sessions, common + ["-e", f"tune_verify={verify}"])
            rec = res.get("recommended") or {}
            results[kind] = res
            if args.save and res.get("rows"):  # a stopped run has no result to hold anything against
                Path(args.save).mkdir(parents=True, exist_ok=True)
                (Path(args.save) / f"{kind}-{run}.json").write_text(json.dumps({**res, "wall_s": round(seconds)},
                                                                                default=str))
            agreement = res.get("agreement") or {}
            with open("/proc/loadavg") as f:
                load = " ".join(f.read().split()[:3])
            print(f"[{run}] {kind:5s}: {_name(rec)} {rec.get('tok_s')} {fmt(rec.get('tok_s_ci'))} tok/s "
                  f"({rec.get('speedup')}x baseline {res.get('baseline', {}).get('tok_s')}; beats it: "
                  f"{rec.get('beats_baseline')}), {res.get('restarts')} restarts {res.get('restarts_counted', {})}, "
                  f"{seconds:.0f} s, rc {rc}; predicted/measured agree {agreement.get('agree')}/"
                  f"{agreement.get('measured')} (without the probe: {agreement.get('independent_agree')}/"
                  f"{agreement.get('independent')}); profile {res.get('profile')}; load {load}; {session}")
            for row in res.get("rows") or []:
                print(f"    {_name(row)}: predicted {row['predicted_tok_s']:.1f} {fmt(row['predicted_tok_s_ci'])}"
                      + (f", measured {row['measured_tok_s']:.1f} {fmt(row['measured_tok_s_ci'])} agrees "
                         f"{row['agrees']}" if row.get("measured_tok_s") is not None else "")
                      + (" (probe)" if row.get("probe") else ""))
            for entry in (res.get("by_concurrency") or []) if len(res.get("by_concurrency") or []) > 1 else []:
                r, a = entry.get("recommended") or {}, entry.get("agreement") or {}
                print(f"    concurrency {entry['concurrency']}: {_name(r)} {r.get('tok_s')} {fmt(r.get('tok_s_ci'))} "
                      f"({r.get('speedup')}x baseline {entry['baseline']['tok_s']} {fmt(entry['baseline']['tok_s_ci'])}; "
                      f"pays: {r.get('beats_baseline')}); agree {a.get('agree')}/{a.get('measured')}"
                      + (f", trees {a.get('trees_agree')}/{a.get('trees_measured')} (accept "
                         f"{a.get('trees_accept_agree')})" if a.get("trees_measured") else ""))
            if res.get("crossover"):
                print(f"    {res['crossover'].get('line')}")
        if "grid" not in results or "tuner" not in results:
            continue
        pairs = zip(results["grid"].get("by_concurrency") or [], results["tuner"].get("by_concurrency") or [],
                    strict=False)
        for g_entry, t_entry in pairs if len(results["tuner"].get("by_concurrency") or []) > 1 else []:
            g, t = g_entry.get("recommended") or {}, t_entry.get("recommended") or {}
            if g and t:
                same = _name(t) == _name(g) or (t["tok_s_ci"][0] <= g["tok_s_ci"][1]
                                                and g["tok_s_ci"][0] <= t["tok_s_ci"][1])
                print(f"[{run}] concurrency {g_entry['concurrency']}: same optimum within intervals: {same} (grid "
                      f"{_name(g)} {fmt(g['tok_s_ci'])}, tuner {_name(t)} {fmt(t['tok_s_ci'])})")
        grid, tuner = results["grid"].get("recommended") or {}, results["tuner"].get("recommended") or {}
        if grid and tuner:
            gci, tci = grid["tok_s_ci"], tuner["tok_s_ci"]
            same = _name(tuner) == _name(grid) or (tci[0] <= gci[1] and gci[0] <= tci[1])
            held += same
            ratio = results["tuner"]["restarts"] / results["grid"]["restarts"]
            print(f"[{run}] same optimum within intervals: {same} (grid {_name(grid)} {fmt(gci)}, tuner "
                  f"{_name(tuner)} {fmt(tci)}); restarts {results['tuner']['restarts']} vs "
                  f"{results['grid']['restarts']} ({ratio:.2f} of the grid's)")
    print(f"held {held}/{args.repeat}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
