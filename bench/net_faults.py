"""Network-fault figures for RELIABILITY.md (issue 19): hosts in network namespaces (tests/netns.py).

    python bench/net_faults.py rtt [--steps 50] [--runs 3]     # per-step overhead and fan-out, per link
    python bench/net_faults.py cut [--runs 10] [--keepalive 1]  # link cuts mid-step, counted

``rtt`` measures each link in turn: the veth pair itself (sub-millisecond), the TCP proxy with no delay (its own
cost), 30 ms RTT, and 30 ms RTT with 1 % loss (tests/tcp_delay_proxy.py; the kernel has no netem). Per link:
``steps`` trivial shell steps on one host through the engine (connect excluded, as bench/ssh_overhead.py does)
and through raw asyncssh; one step fanned out to 1 and to 4 hosts, cold (connecting) and warm; a probe step cold
(the 380 kB probe tree pushed, the agent started) and warm (one agent call). Medians of ``runs``.

``cut`` repeats tests/reliability/link_cut.py's trial: a link cut at U(0, 1.5) s into a long step.

Root only (namespaces); run from the repository root with the project's venv and PYTHONPATH=. .
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import asyncssh  # noqa: E402
from netns import NamespacedHost, make_host, netns_missing_reason  # noqa: E402
from ssh_overhead import StepClock  # noqa: E402
from tcp_delay_proxy import start_proxy  # noqa: E402

from orchestrator.inventory import Inventory  # noqa: E402
from orchestrator.playbook.loader import load_playbook_text  # noqa: E402
from orchestrator.runner.playbook_runner import RunnerOptions  # noqa: E402
from orchestrator.session.compose import compose_runner  # noqa: E402
from tests.reliability.link_cut import cut_mid_step, inventory  # noqa: E402

Endpoint = tuple[NamespacedHost, str, int]  # the host, and the address and port to dial (sshd or a proxy)
LINKS = {"veth (no shaping)": None, "proxy, 0 ms": (0.0, 0.0), "proxy, 30 ms RTT": (30.0, 0.0),
         "proxy, 30 ms RTT + 1 % loss": (30.0, 0.01)}


@contextmanager
def link(hosts: list[NamespacedHost], shaping: tuple[float, float] | None) -> Iterator[list[Endpoint]]:
    if shaping is None:
        yield [(h, h.address, h.sshd.port) for h in hosts if h.sshd is not None]
        return
    proxy = start_proxy([(h.near_address, h.address, h.sshd.port) for h in hosts if h.sshd is not None],
                        rtt_ms=shaping[0], loss=shaping[1])
    try:
        for h, (address, port) in zip(hosts, proxy.endpoints, strict=True):
            assert h.sshd is not None
            h.sshd.trust(address, port)
        yield [(h, address, port) for h, (address, port) in zip(hosts, proxy.endpoints, strict=True)]
    finally:
        print(f"    [{proxy.stop()}]", file=sys.stderr)


def _inventory(endpoints: list[Endpoint]) -> Inventory:
    return inventory({f"h{i}": e for i, e in enumerate(endpoints)})


async def engine_steps(endpoints: list[Endpoint], steps: int) -> float:
    text = "name: bench\nhosts: gpus\nsteps:\n" + "".join("  - shell: 'true'\n" for _ in range(steps + 1))
    clock = StepClock()
    engine = compose_runner(load_playbook_text(text), inventory=_inventory(endpoints[:1]), sinks=[clock],
                    options=RunnerOptions(session_id=f"net-{time.time_ns()}"))
    await engine.run()
    assert set(clock.statuses) == {"ok"}, clock.statuses
    return (clock.finished[-1] - clock.finished[0]) / steps


async def raw_steps(endpoints: list[Endpoint], steps: int) -> float:
    host, address, port = endpoints[0]
    assert host.sshd is not None
    s = host.sshd
    async with asyncssh.connect(address, port, username=s.user, client_keys=[str(s.client_key_path)],
                                known_hosts=str(s.known_hosts), config=[str(s.ssh_config)]) as conn:
        await conn.run("true")
        started = time.perf_counter()
        for _ in range(steps):
            await conn.run("true", check=True)
        return (time.perf_counter() - started) / steps


async def fan_out(endpoints: list[Endpoint]) -> tuple[float, float]:
    """(cold, warm) seconds of one `shell: true` step on all the endpoints."""
    clock = StepClock()
    engine = compose_runner(load_playbook_text("name: fan\nhosts: gpus\nsteps:\n  - shell: 'true'\n  - shell: 'true'\n"),
                    inventory=_inventory(endpoints), sinks=[clock],
                    options=RunnerOptions(session_id=f"fan-{time.time_ns()}"))
    started = time.perf_counter()
    await engine.run()
    assert set(clock.statuses) == {"ok"}, clock.statuses
    return clock.finished[0] - started, clock.finished[1] - clock.finished[0]


async def probe_steps(endpoints: list[Endpoint]) -> tuple[float, float]:
    """(cold, warm) seconds of an env_info probe step: cold pushes the probe tree and starts the agent."""
    clock = StepClock()
    engine = compose_runner(load_playbook_text("name: probe\nhosts: gpus\nsteps:\n  - shell: 'true'\n"
                                       "  - probe: env_info\n  - probe: env_info\n"),
                    inventory=_inventory(endpoints[:1]), sinks=[clock],
                    options=RunnerOptions(session_id=f"probe-{time.time_ns()}"))
    await engine.run()
    assert set(clock.statuses) == {"ok"}, clock.statuses
    return clock.finished[1] - clock.finished[0], clock.finished[2] - clock.finished[1]


def rtt(steps: int, runs: int) -> int:
    work = Path(tempfile.mkdtemp(prefix="orch-net-"))
    hosts: list[NamespacedHost] = []
    try:
        hosts = [make_host(work / f"ns{i}") for i in range(4)]
        print(f"{steps} trivial steps on one host (connect excluded); one step on 1 and on 4 hosts; an env_info probe "
              f"step; medians of {runs} runs")
        print(f"{'link':<30}{'engine ms/step':>15}{'raw ms/step':>12}{'1 host cold/warm ms':>22}"
              f"{'4 hosts cold/warm ms':>22}{'probe cold/warm ms':>20}")
        for name, shaping in LINKS.items():
            with link(hosts, shaping) as endpoints:
                per = statistics.median(asyncio.run(engine_steps(endpoints, steps)) for _ in range(runs))
                raw = statistics.median(asyncio.run(raw_steps(endpoints, steps)) for _ in range(runs))
                one = [asyncio.run(fan_out(endpoints[:1])) for _ in range(runs)]
                four = [asyncio.run(fan_out(endpoints)) for _ in range(runs)]
                probe = [asyncio.run(probe_steps(endpoints)) for _ in range(runs)]

            def pair(samples: list[tuple[float, float]]) -> str:
                return (f"{statistics.median(s[0] for s in samples) * 1000:.0f} / "
                        f"{statistics.median(s[1] for s in samples) * 1000:.0f}")

            print(f"{name:<30}{per * 1000:>15.1f}{raw * 1000:>12.1f}{pair(one):>22}{pair(four):>22}{pair(probe):>20}",
                  flush=True)
    finally:
        for host in hosts:
            host.close()
    return 0


def cut(runs: int, keepalive: float, seed: int) -> int:
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="orch-cut-"))
    hosts: list[NamespacedHost] = []
    trials = []
    started = time.monotonic()
    try:
        hosts = [make_host(work / "cut"), make_host(work / "steady")]
        for n in range(runs):
            trial = asyncio.run(cut_mid_step(hosts[0], hosts[1], keepalive=keepalive, rng=rng))
            trials.append(trial)
            detected = f"{trial.detected:.2f}s" if trial.detected is not None else "-"
            cleaned = f"{trial.cleaned:.1f}s" if trial.cleaned is not None else "-"
            print(f"  run {n + 1:2d}: cut {trial.cut_after:.2f}s into the step, unreachable after {detected} "
                  f"(bound {trial.bound:g}s), process {'alive' if trial.alive_during_cut else 'GONE'} during the cut, "
                  f"gone {cleaned} after the link came back{'' if trial.held else '  FAILED: ' + str(trial.problems)}",
                  flush=True)
    finally:
        for host in hosts:
            host.close()
    held = sum(t.held for t in trials)
    detected = [t.detected for t in trials if t.detected is not None]
    cleaned = [t.cleaned for t in trials if t.cleaned is not None]
    print(f"cut: {runs} link cuts in {time.monotonic() - started:.0f}s, keepalive {keepalive:g}s (bound "
          f"{4 * keepalive:g}s) — held {held}/{runs}; unreachable after min {min(detected, default=0):.2f} / median "
          f"{statistics.median(detected or [0]):.2f} / max {max(detected, default=0):.2f}s; step's process gone after "
          f"the link's return: median {statistics.median(cleaned or [0]):.1f} / max {max(cleaned, default=0):.1f}s")
    return 0 if held == runs else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    r = sub.add_parser("rtt")
    r.add_argument("--steps", type=int, default=50)
    r.add_argument("--runs", type=int, default=3)
    c = sub.add_parser("cut")
    c.add_argument("--runs", type=int, default=10)
    c.add_argument("--keepalive", type=float, default=1.0)
    c.add_argument("--seed", type=int, default=19)
    args = parser.parse_args()
    reason = netns_missing_reason()
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    if args.what == "rtt":
        return rtt(args.steps, args.runs)
    return cut(args.runs, args.keepalive, args.seed)


if __name__ == "__main__":
    sys.exit(main())
