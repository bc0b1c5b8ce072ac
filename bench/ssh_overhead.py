"""SSH overhead benchmark: orchestrator vs raw asyncssh vs OpenSSH ControlMaster vs ansible-playbook.

Starts its own OpenSSH sshd on loopback (127.0.0.2 .. 127.0.0.33, one port, keys generated per run)
and prints a table of medians. Nothing but 127.0.0.0/8 is contacted.

    .venv/bin/python bench/ssh_overhead.py                 # everything, 3 runs each
    .venv/bin/python bench/ssh_overhead.py --no-ansible    # skip Ansible (slow: ~50 s a run)
    .venv/bin/python bench/ssh_overhead.py --profile       # + where the engine spends its time

Ansible runs from a separate venv under $ORCHESTRATOR_CACHE_DIR/bench/ansible-venv (made on first use
with ``python3 -m venv`` + ``pip install ansible-core``), pipelining and ControlPersist on.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import asyncssh  # noqa: E402
from sshd_fixture import SshdServer, start_sshd  # noqa: E402

from orchestrator.events import Event  # noqa: E402
from orchestrator.inventory import Inventory  # noqa: E402
from orchestrator.playbook.loader import load_playbook_text  # noqa: E402
from orchestrator.runner.playbook_runner import RunnerOptions  # noqa: E402
from orchestrator.session.compose import compose_runner  # noqa: E402

STEPS = 200
CACHE = Path(os.environ.get("ORCHESTRATOR_CACHE_DIR", "~/.cache/orchestrator")).expanduser() / "bench"


class StepClock:
    """A sink that notes when each step finished, so connect time can be left out of per-step figures."""

    def __init__(self) -> None:
        self.finished: list[float] = []
        self.statuses: list[str] = []

    def handle(self, event: Event) -> None:
        if event.type == "step_finished":
            self.finished.append(time.perf_counter())
            self.statuses.append(event.status)  # type: ignore[attr-defined]

    def close(self) -> None:
        pass


def inventory(server: SshdServer, count: int) -> Inventory:
    hosts = {f"h{i}": {k: v for k, v in server.host_spec(f"h{i}", address=server.addresses[i]).items() if k != "name"}
             for i in range(count)}
    return Inventory.model_validate({"hosts": hosts, "groups": {"bench": {"hosts": list(hosts)}}})


async def engine_steps(server: SshdServer, steps: int) -> float:
    """Seconds per step for ``steps`` trivial shell steps on one host (after a warm-up step that connects)."""
    text = "name: bench\nhosts: bench\nsteps:\n" + "".join("  - shell: 'true'\n" for _ in range(steps + 1))
    clock = StepClock()
    engine = compose_runner(load_playbook_text(text), inventory=inventory(server, 1), sinks=[clock],
                    options=RunnerOptions(session_id=f"bench-{time.time_ns()}"))
    await engine.run()
    assert set(clock.statuses) == {"ok"}, clock.statuses
    return (clock.finished[-1] - clock.finished[0]) / steps


async def engine_fan_out(server: SshdServer, hosts: int) -> tuple[float, float]:
    """(cold, warm) seconds for one step on ``hosts`` hosts: cold includes connecting, warm reuses it."""
    text = "name: fan\nhosts: bench\nsteps:\n  - shell: 'true'\n  - shell: 'true'\n"
    clock = StepClock()
    engine = compose_runner(load_playbook_text(text), inventory=inventory(server, hosts), sinks=[clock],
                    options=RunnerOptions(session_id=f"fan-{time.time_ns()}", forks=max(16, hosts)))
    started = time.perf_counter()
    await engine.run()
    assert set(clock.statuses) == {"ok"}, clock.statuses
    return clock.finished[0] - started, clock.finished[1] - clock.finished[0]


async def raw_asyncssh(server: SshdServer, steps: int) -> float:
    async with asyncssh.connect(server.addresses[0], server.port, username=server.user,
                                client_keys=[str(server.client_key_path)], known_hosts=str(server.known_hosts),
                                config=[str(server.ssh_config)]) as conn:
        await conn.run("true")
        started = time.perf_counter()
        for _ in range(steps):
            await conn.run("true", check=True)
        return (time.perf_counter() - started) / steps


async def raw_fan_out(server: SshdServer, hosts: int) -> tuple[float, float]:
    """The same fan-out with bare asyncssh (one connection per address), to tell engine cost from host cost."""
    async def one(address: str) -> asyncssh.SSHClientConnection:
        conn = await asyncssh.connect(address, server.port, username=server.user, client_keys=[str(server.client_key_path)],
                                      known_hosts=str(server.known_hosts), config=[str(server.ssh_config)])
        await conn.run("true", check=True)
        return conn

    started = time.perf_counter()
    conns = await asyncio.gather(*(one(a) for a in server.addresses[:hosts]))
    cold = time.perf_counter() - started
    started = time.perf_counter()
    await asyncio.gather(*(c.run("true", check=True) for c in conns))
    warm = time.perf_counter() - started
    for conn in conns:
        conn.close()
    return cold, warm


def ssh_argv(server: SshdServer, control: Path) -> list[str]:
    return ["ssh", "-F", str(server.ssh_config), "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={server.known_hosts}",
            "-o", "StrictHostKeyChecking=yes", "-i", str(server.client_key_path), "-p", str(server.port),
            "-o", "ControlMaster=auto", "-o", f"ControlPath={control}", "-o", "ControlPersist=60",
            f"{server.user}@{server.addresses[0]}"]


def control_master(server: SshdServer, steps: int, workdir: Path) -> float:
    control = workdir / f"cm-{time.time_ns()}"
    argv = ssh_argv(server, control)
    subprocess.run([*argv, "true"], check=True)  # starts the master
    started = time.perf_counter()
    for _ in range(steps):
        subprocess.run([*argv, "true"], check=True)
    elapsed = (time.perf_counter() - started) / steps
    subprocess.run([*argv[:-1], "-O", "exit", argv[-1]], capture_output=True)
    return elapsed


def ansible_venv() -> Path | None:
    venv = CACHE / "ansible-venv"
    playbook_bin = venv / "bin" / "ansible-playbook"
    if not playbook_bin.exists():
        print(f"installing ansible-core into {venv} ...", file=sys.stderr)
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([shutil.which("python3") or sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "ansible-core"], check=True)
    return playbook_bin if playbook_bin.exists() else None


def ansible(server: SshdServer, steps: int, workdir: Path, playbook_bin: Path) -> float:
    root = workdir / f"ansible-{time.time_ns()}"
    root.mkdir()
    (root / "inventory.ini").write_text(
        f"bench ansible_host={server.addresses[0]} ansible_port={server.port} ansible_user={server.user} "
        f"ansible_ssh_private_key_file={server.client_key_path} ansible_python_interpreter=/usr/bin/python3\n"
    )
    (root / "ansible.cfg").write_text(
        "[defaults]\nhost_key_checking = True\ngathering = explicit\nretry_files_enabled = False\n"
        "[ssh_connection]\npipelining = True\n"
        f"ssh_args = -F {server.ssh_config} -o ControlMaster=auto -o ControlPersist=60s "
        f"-o UserKnownHostsFile={server.known_hosts}\ncontrol_path_dir = {root}/cp\n"
    )
    tasks = "".join("    - command: /bin/true\n" for _ in range(steps))
    (root / "play.yaml").write_text(f"- hosts: bench\n  gather_facts: false\n  tasks:\n{tasks}")
    env = {**os.environ, "ANSIBLE_CONFIG": str(root / "ansible.cfg"), "ANSIBLE_LOCAL_TEMP": str(root / "tmp"),
           "ANSIBLE_HOME": str(root / "home")}
    started = time.perf_counter()
    done = subprocess.run([str(playbook_bin), "-i", str(root / "inventory.ini"), str(root / "play.yaml")],
                          capture_output=True, text=True, env=env, cwd=root)
    elapsed = (time.perf_counter() - started) / steps
    if done.returncode != 0:
        raise RuntimeError(f"ansible-playbook failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return elapsed


def median_of(runs: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(runs))


def profile_engine(server: SshdServer) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    asyncio.run(engine_steps(server, STEPS))
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(20)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ansible-runs", type=int, default=None, help="default: --runs")
    parser.add_argument("--no-ansible", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="orch-bench-"))
    server = start_sshd(workdir / "sshd", hosts=32)
    rows: list[tuple[str, float]] = []
    try:
        per = {
            "orchestrator engine": median_of(args.runs, lambda: asyncio.run(engine_steps(server, STEPS))),
            "raw asyncssh loop": median_of(args.runs, lambda: asyncio.run(raw_asyncssh(server, STEPS))),
            "OpenSSH ControlMaster": median_of(args.runs, lambda: control_master(server, STEPS, workdir)),
        }
        playbook_bin = None if args.no_ansible else ansible_venv()
        if playbook_bin is not None:
            per["ansible-playbook"] = median_of(args.ansible_runs or args.runs,
                                                lambda: ansible(server, STEPS, workdir, playbook_bin))
        print(f"\n{STEPS} trivial steps on one host (median of {args.runs} runs, connect excluded except Ansible's)")
        print(f"{'method':<24}{'ms/step':>10}{'vs asyncssh':>14}")
        for name, seconds in per.items():
            rows.append((name, seconds))
            print(f"{name:<24}{seconds * 1000:>10.2f}{seconds / per['raw asyncssh loop']:>13.2f}x")
        if "ansible-playbook" in per:
            print(f"orchestrator is {per['ansible-playbook'] / per['orchestrator engine']:.0f}x faster than Ansible per step")

        print(f"\none `shell: true` step fanned out (median of {args.runs} runs; forks = max(16, hosts))")
        print(f"{'hosts':<8}{'cold ms (connect)':>20}{'warm ms':>10}{'raw cold ms':>14}{'raw warm ms':>14}")
        fan: dict[int, tuple[float, float]] = {}
        raw: dict[int, tuple[float, float]] = {}
        for hosts in (1, 8, 32):
            samples = [asyncio.run(engine_fan_out(server, hosts)) for _ in range(args.runs)]
            fan[hosts] = (statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples))
            samples = [asyncio.run(raw_fan_out(server, hosts)) for _ in range(args.runs)]
            raw[hosts] = (statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples))
            print(f"{hosts:<8}{fan[hosts][0] * 1000:>20.1f}{fan[hosts][1] * 1000:>10.1f}"
                  f"{raw[hosts][0] * 1000:>14.1f}{raw[hosts][1] * 1000:>14.1f}")
        print(f"32 hosts / 1 host: engine warm {fan[32][1] / fan[1][1]:.2f}x, cold {fan[32][0] / fan[1][0]:.2f}x; "
              f"raw asyncssh warm {raw[32][1] / raw[1][1]:.2f}x, cold {raw[32][0] / raw[1][0]:.2f}x")
        if args.profile:
            print("\nengine profile, 200 steps (top 20 by own time):")
            print(profile_engine(server))
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
