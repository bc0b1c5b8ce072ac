"""The user's path: per-step overhead of `orchestrator run` (session log, console, redaction, reports all on) against
raw asyncssh, measured from outside, side by side in one run.

Each side runs as a new process, as a user would start it, once with 1 + STEPS trivial steps and once with 1 step;
the difference over STEPS is the per-step cost, so start-up, connecting and report writing at the end cancel out
(the reports' size does grow with the steps: that is part of the user's per-step cost, and counted). The runs
interleave (orchestrator long, orchestrator short, raw long, raw short, ...) so load drifts hit both sides alike.

    .venv/bin/python bench/user_path.py [--steps 200] [--runs 5]
    .venv/bin/python bench/user_path.py --profile      # + where `orchestrator run`'s per-step time goes (in-process)
    .venv/bin/python bench/user_path.py --baseline ../main   # + another checkout's `orchestrator run`, interleaved

Starts its own sshd on 127.0.0.2 (keys per run); nothing else is contacted.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import yaml  # noqa: E402
from sshd_fixture import SshdServer, start_sshd  # noqa: E402

RAW = """
import asyncio, sys
import asyncssh
async def main(address, port, user, key, known_hosts, config, steps):
    async with asyncssh.connect(address, int(port), username=user, client_keys=[key], known_hosts=known_hosts,
                                config=[config]) as conn:
        for _ in range(int(steps)):
            await conn.run("true", check=True)
asyncio.run(main(*sys.argv[1:]))
"""


def write_inputs(server: SshdServer, root: Path, steps: int) -> dict[str, Path]:
    spec = {k: v for k, v in server.host_spec("bench").items() if k != "name"}
    spec["python"] = sys.executable
    inventory = root / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"hosts": {"bench": spec}}))
    files = {"inventory": inventory}
    for count in (1, steps + 1):
        path = root / f"steps-{count}.yaml"
        path.write_text("name: bench\nhosts: bench\nsteps:\n" + "".join("  - shell: 'true'\n" for _ in range(count)))
        files[f"play{count}"] = path
    return files


CPU: dict[tuple[str, ...], float] = {}  # argv -> the CPU seconds (user + system) its last run took


def timed(argv: list[str], cwd: Path, repo: Path = REPO) -> float:
    """Wall seconds of one run; its CPU seconds go to CPU (under load, CPU time drifts far less than wall time)."""
    env = {**os.environ, "PYTHONPATH": str(repo)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU[(str(repo), *argv)] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if done.returncode != 0:
        raise SystemExit(f"{argv[:4]} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return elapsed


def profile(files: dict[str, Path], steps: int, root: Path) -> str:
    """`orchestrator run`'s own code path in this process (CliRunner), profiled."""
    from typer.testing import CliRunner

    from orchestrator.cli import app

    profiler = cProfile.Profile()
    runner = CliRunner()
    profiler.enable()
    result = runner.invoke(app, ["run", str(files[f"play{steps + 1}"]), "-i", str(files["inventory"]),
                                 "--sessions-dir", str(root / "profile-sessions")])
    profiler.disable()
    if result.exit_code != 0:
        raise SystemExit(f"profiled run failed: {result.output[-2000:]}")
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--baseline", type=Path, help="another checkout whose `orchestrator run` runs alongside")
    opts = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="orch-user-path-"))
    server = start_sshd(root / "sshd", hosts=1)
    try:
        files = write_inputs(server, root, opts.steps)
        orch = [sys.executable, "-m", "orchestrator", "run", "-i", str(files["inventory"]),
                "--sessions-dir", str(root / "sessions")]
        raw = [sys.executable, "-c", RAW, server.addresses[0], str(server.port), server.user,
               str(server.client_key_path), str(server.known_hosts), str(server.ssh_config)]
        cases = {
            "orchestrator run": (lambda n: [*orch[:4], str(files[f"play{n}"]), *orch[4:]]),
            "raw asyncssh": (lambda n: [*raw, str(n)]),
        }
        repos = {"orchestrator run": REPO, "raw asyncssh": REPO}
        if opts.baseline:
            cases["baseline run"] = cases["orchestrator run"]
            repos["baseline run"] = opts.baseline.resolve()
        times: dict[tuple[str, int], list[float]] = {(name, n): [] for name in cases for n in (1, opts.steps + 1)}
        cpu: dict[tuple[str, int], list[float]] = {(name, n): [] for name in cases for n in (1, opts.steps + 1)}
        for name in repos:
            if name != "raw asyncssh":
                timed(cases[name](1), root, repos[name])  # warm caches (imports, sshd)
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for _ in range(opts.runs):
            for name, argv in cases.items():
                for n in (opts.steps + 1, 1):
                    times[(name, n)].append(timed(argv(n), root, repos[name]))
                    cpu[(name, n)].append(CPU[(str(repos[name]), *argv(n))])
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"{opts.steps} extra `true` steps on one loopback host; median of {opts.runs} interleaved runs each")
        print(f"{'':<18}{'1 step s':>10}{f'{opts.steps + 1} steps s':>14}{'ms/step':>10}{'spread ms/step':>18}")
        per: dict[str, float] = {}
        for name in cases:
            short = statistics.median(times[(name, 1)])
            long = statistics.median(times[(name, opts.steps + 1)])
            per[name] = (long - short) / opts.steps
            # the spread: each run's own (long - short) pair, as ms/step
            pairs = sorted((lg - sh) / opts.steps * 1000 for lg, sh in zip(times[(name, opts.steps + 1)],
                                                                             times[(name, 1)], strict=True))
            print(f"{name:<18}{short:>10.2f}{long:>14.2f}{per[name] * 1000:>10.2f}{pairs[0]:>9.2f}-{pairs[-1]:.2f}")
        for name in cases:
            if name != "raw asyncssh":
                ratio = per[name] / per["raw asyncssh"]
                print(f"{name} / raw asyncssh per step: {ratio:.2f}x (target <= 1.3x)")
        # The client's own CPU per step (user + system of the process, the sshd's excluded): what the code costs,
        # which load inflates far less than wall time.
        cpu_per = {name: (statistics.median(cpu[(name, opts.steps + 1)]) - statistics.median(cpu[(name, 1)]))
                   / opts.steps * 1000 for name in cases}
        print("client CPU ms/step: " + ", ".join(f"{name} {v:.2f}" for name, v in cpu_per.items()))
        if opts.profile:
            print("\n`orchestrator run` profile (top 25 by own time):")
            print(profile(files, opts.steps, root))
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
