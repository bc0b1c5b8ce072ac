"""Reliability figures for RELIABILITY.md (issue 19): the heavy repetitions of tests/reliability/.

    python bench/reliability.py fuzz --count 1000          # generated + mutated playbooks, counted by outcome
    python bench/reliability.py crash --runs 20            # kill -9 at random moments, then cleanup
    python bench/reliability.py crash --runs 20 --lab-playbook eagle3.yaml   # the same, of the flagship on the lab
    python bench/reliability.py crash --runs 20 --lab-playbook sweep.yaml     # ... of the sweep
    python bench/reliability.py crash --runs 5 --lab-playbook eagle3.yaml --real-vllm --after-server 20
                                                        # the flagship on a REAL vLLM host, killed within 20 s of
                                                        # its first server answering
    python bench/reliability.py engine-kill --runs 3 --process both   # SIGKILL of a real vLLM's EngineCore /
                                                                      # Worker mid-benchmark

Run from the repository root with the project's venv (PYTHONPATH=.). Each prints a summary line to paste.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


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


def real_vllm_host() -> object:
    """The vLLM host ``orchestrator lab vllm-host`` built (``$ORCH_TEST_VLLM_HOST`` or the default dir)."""
    from orchestrator.lab.vllm_host.host import ensure_vllm_host, host_dir, is_built

    where = os.environ.get("ORCH_TEST_VLLM_HOST") or None
    if not is_built(where):
        raise SystemExit(f"no real vLLM host at {host_dir(where)}: run `orchestrator lab vllm-host` first")
    return ensure_vllm_host(where)


def engine_kill(runs: int, process: str, lab_root: Path | None) -> int:
    from orchestrator.lab.building.build import lab_dir
    from orchestrator.lab.building.inventory import ensure_lab
    from tests.reliability.engine_kill import kill_engine_mid_bench

    host = real_vllm_host()
    root = lab_dir(lab_root)
    ensure_lab("seed-wiring", root=root, engine="vllm")
    targets = ["EngineCore", "Worker"] if process == "both" else [process]
    held = total = 0
    started = time.monotonic()
    for n in range(runs):
        for target in targets:
            with tempfile.TemporaryDirectory(prefix="orch-engine-kill-") as tmp:
                run = kill_engine_mid_bench(Path(tmp), host, root, target)
            total += 1
            held += run.held
            first = run.bench_error.split("the server's own error:", 1)[-1].strip().splitlines()[:1]
            print(f"  run {n + 1} {target}: killed {run.killed.get('name', 'nothing').split()[0]} at "
                  f"{run.killed.get('after_s')}s of {run.seconds}s; bench {run.step('Benchmark')[1]}: "
                  f"{first[0][:160] if first else '-'}; next step {run.step('The investigation goes on')[1]}; "
                  f"{len(run.processes)} server processes, {len(run.left)} left"
                  f"{'' if run.held else '  FAILED'}", flush=True)
    print(f"engine-kill: {total} runs ({', '.join(targets)}) in {time.monotonic() - started:.0f}s — held "
          f"{held}/{total}; load average {Path('/proc/loadavg').read_text().split()[:3]}")
    return 0 if held == total else 1


def crash(runs: int, seed: int, lab_playbook: str | None = None, scenario: str = "seed-wiring",
          lab_root: Path | None = None, window: float | None = None, real_vllm: bool = False,
          after_server: float | None = None) -> int:
    from tests.reliability.crash import LabRun, kill_and_clean

    rng = random.Random(seed)
    lab = None
    earliest, latest = 0.2, 4.5
    if lab_playbook:
        from orchestrator.lab.building.build import lab_dir
        from orchestrator.lab.building.inventory import ensure_lab

        root = lab_dir(lab_root)
        ensure_lab(scenario, root=root, engine="vllm" if real_vllm else None)  # built once, before any timing
        lab = LabRun(lab_playbook, scenario, root, real_vllm_host() if real_vllm else None)
        # kill anywhere in a whole run: time one undisturbed run first (unless given), then draw the moments inside it
        if after_server is not None:
            earliest, latest = 0.0, after_server
            print(f"kills drawn from U(0, {after_server:.0f}) s after the run's first server answers", flush=True)
        elif window:
            earliest, latest = 1.0, window
            print(f"kills drawn from U(1, {window:.0f}) s (given)", flush=True)
        else:
            t0 = time.monotonic()
            whole = subprocess.run([sys.executable, "-m", "orchestrator", "run",
                                    str(REPO / "playbooks" / lab_playbook),
                                    "--sessions-dir", tempfile.mkdtemp(prefix="orch-crash-whole-")],
                                   env={**os.environ, "PYTHONPATH": str(REPO), "ORCHESTRATOR_LAB_DIR": str(root),
                                        "ORCHESTRATOR_LAB_SCENARIO": scenario},
                                   capture_output=True, text=True, cwd=str(REPO))
            duration = time.monotonic() - t0
            print(f"one whole {lab_playbook} run on {scenario}: {duration:.0f}s (exit {whole.returncode}); "
                  f"kills drawn from U(1, {0.95 * duration:.0f}) s", flush=True)
            earliest, latest = 1.0, 0.95 * duration
    held = 0
    orphans = ports = torn = 0
    worst: list[str] = []
    started = time.monotonic()
    for n in range(runs):
        with tempfile.TemporaryDirectory(prefix="orch-crash-") as tmp:
            trial = kill_and_clean(Path(tmp), rng=rng, earliest=earliest, latest=latest, lab=lab,
                                   after_listener=0 if after_server is not None else None)
        held += trial.held
        orphans += trial.orphans_before_cleanup
        ports += trial.ports_before_cleanup
        torn += trial.torn_lines
        print(f"  run {n + 1:2d}: killed at {trial.killed_after:.2f}s, {trial.events} events logged, "
              f"{trial.torn_lines} torn, {trial.orphans_before_cleanup} processes / {trial.ports_before_cleanup} ports "
              f"orphaned -> left {len(trial.left_processes)} / {len(trial.left_ports)}"
              f"{'' if trial.held else '  FAILED: ' + str(trial.problems)}", flush=True)
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
    c.add_argument("--lab-playbook", choices=["eagle3.yaml", "sweep.yaml"], default=None,
                   help="kill this playbook of playbooks/ on the lab host instead of the quick local one")
    c.add_argument("--scenario", default="seed-wiring")
    c.add_argument("--lab", type=Path, default=None, help="the lab directory (default: the CLI's)")
    c.add_argument("--window", type=float, default=None,
                   help="draw the kill moments from U(1, WINDOW) s instead of timing one whole run first")
    c.add_argument("--real-vllm", action="store_true", help="the lab's models on a REAL vLLM host (built by "
                   "`orchestrator lab vllm-host`) instead of the lab's stand-in")
    c.add_argument("--after-server", type=float, default=None,
                   help="draw the kill moments from U(0, S) s after the run's first server answers")
    k = sub.add_parser("engine-kill")
    k.add_argument("--runs", type=int, default=3)
    k.add_argument("--process", choices=["EngineCore", "Worker", "both"], default="both")
    k.add_argument("--lab", type=Path, default=None, help="the lab directory (default: the CLI's)")
    args = parser.parse_args()
    if args.what == "fuzz":
        return fuzz(args.count)
    if args.what == "engine-kill":
        return engine_kill(args.runs, args.process, args.lab)
    return crash(args.runs, args.seed, args.lab_playbook, args.scenario, args.lab, args.window, args.real_vllm,
                 args.after_server)


if __name__ == "__main__":
    sys.exit(main())
