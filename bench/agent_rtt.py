"""The per-session remote agent: probe and source-read round trips through it against one-shot probe runs, side by
side in one run (interleaved, so load drift hits both alike).

    .venv/bin/python bench/agent_rtt.py [--repeat 15]

Over a loopback sshd (started here, keys per run) with the SshTransport, on the cached sglang 0.5.12.post1 tree
(installed with pip --no-deps when missing):
  * one-shot ``sglang_source`` (a Python start per call, today's path) vs the same call through the agent;
  * 1 range vs 50 ranges in one call through the agent, and bench/read_batch.py's mix (48 ranges, a symbol, a regex
    range) both ways: the symbol read parses the file's AST, real work that no transport removes;
  * the agent's bare round trip (``ping``: a JSON line each way, no fork);
and, on the local transport, an ad-hoc ``read_source`` step as the TUI's R key runs it (``PlaybookRunner.run_step`` of an
ad-hoc step: event emission, the step, rendering of the read into text; Textual's own paint is not included).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from sshd_fixture import start_sshd  # noqa: E402

from orchestrator.inventory import HostSpec, Inventory  # noqa: E402
from orchestrator.lab.building.build import cached_sglang_tree  # noqa: E402
from orchestrator.playbook.loader import load_playbook_text  # noqa: E402
from orchestrator.probes.invoke import run_probe  # noqa: E402
from orchestrator.runner.playbook_runner import RunnerOptions  # noqa: E402
from orchestrator.session.compose import compose_runner  # noqa: E402
from orchestrator.transport.ssh import SshTransport  # noqa: E402

FILE = "srt/speculative/eagle_worker.py"


def reads_args(tree: Path, kind: str) -> dict[str, object]:
    if kind == "one":
        reads = [{"file": FILE, "lines": "155,200"}]
    elif kind == "fifty":  # 50 line ranges of 21 lines over the file
        reads = [{"file": FILE, "lines": f"{1 + 25 * i},+20"} for i in range(50)]
    else:  # bench/read_batch.py's mix: 48 ranges, a symbol (an AST parse of the file) and a regex range
        reads = [{"file": FILE, "lines": f"{1 + 25 * i},+20"} for i in range(48)]
        reads += [{"file": FILE, "symbol": "EAGLEWorker.__init__"}, {"file": FILE, "lines": "/get_embed_and_head/,+23"}]
    return {"package": "sglang", "sys_path": [str(tree)], "reads": reads}


async def timed(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def over_ssh(root: Path, tree: Path, repeat: int) -> dict[str, list[float]]:
    server = start_sshd(root / "sshd", hosts=1)
    transport = SshTransport(HostSpec(**server.host_spec("bench")), session_id="agent-bench")
    one, fifty, mixed = reads_args(tree, "one"), reads_args(tree, "fifty"), reads_args(tree, "mixed")
    py = sys.executable
    try:
        await run_probe(transport, "sglang_source", one, python=py, use_agent=False)  # push the probes, warm caches
        await run_probe(transport, "sglang_source", one, python=py)  # start the agent
        agent = next(iter(transport.agents.agents.values()))
        cases: dict[str, Callable[[], Awaitable[object]]] = {
            "one-shot, 1 range": lambda: run_probe(transport, "sglang_source", one, python=py, use_agent=False),
            "agent, 1 range": lambda: run_probe(transport, "sglang_source", one, python=py),
            "agent, 50 ranges": lambda: run_probe(transport, "sglang_source", fifty, python=py),
            "agent, 48 + sym + re": lambda: run_probe(transport, "sglang_source", mixed, python=py),
            "one-shot, 48+sym+re": lambda: run_probe(transport, "sglang_source", mixed, python=py, use_agent=False),
            "agent ping": lambda: agent.request("ping"),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(repeat):
            for name, call in cases.items():
                times[name].append(await timed(call))
        return times
    finally:
        await transport.close()
        server.stop()


async def adhoc_read(root: Path, tree: Path, repeat: int) -> list[float]:
    inventory = Inventory.model_validate({"hosts": {"localhost": {"transport": "local", "python": sys.executable,
                                                                  "state_dir": str(root / "state")}}})
    engine = compose_runner(load_playbook_text("name: adhoc\nhosts: localhost\nsteps: []\n"), inventory=inventory, sinks=[],
                    options=RunnerOptions(session_id="adhoc-bench"))
    args = {"package": "sglang", "file": FILE, "lines": "155,200", "sys_path": [str(tree)]}
    samples = []
    try:
        for i in range(repeat + 1):
            step = engine.adhoc_step("read_source", args, name="read")
            started = time.perf_counter()
            finished = await engine.run_step(step)
            if finished.status != "ok":
                raise SystemExit(f"ad-hoc read failed: {finished.results}")
            if i:  # the first starts the agent
                samples.append(time.perf_counter() - started)
    finally:
        for transport in engine.transports.values():
            await transport.remove_workdir()
            await transport.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    opts = parser.parse_args()
    tree = cached_sglang_tree("0.5.12.post1")
    root = Path(tempfile.mkdtemp(prefix="orch-agent-bench-"))
    load_before = os.getloadavg()
    try:
        times = asyncio.run(over_ssh(root, tree, opts.repeat))
        adhoc = asyncio.run(adhoc_read(root, tree, opts.repeat))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    print(f"loopback sshd, sglang 0.5.12.post1 tree; median of {opts.repeat} interleaved calls each; load average "
          f"before {' '.join(f'{x:.2f}' for x in load_before)}, after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for name, ts in times.items():
        q = statistics.quantiles(ts, n=4) if len(ts) > 1 else [ts[0]] * 3
        print(f"{name:<20} {med[name] * 1000:8.2f} ms  (min {min(ts) * 1000:.2f}, quartiles {q[0] * 1000:.2f}-"
              f"{q[2] * 1000:.2f}, max {max(ts) * 1000:.2f})")
    print(f"one-shot / agent, 1 range: {med['one-shot, 1 range'] / med['agent, 1 range']:.1f}x faster through the agent")
    print(f"agent 50 ranges / 1 range: {med['agent, 50 ranges'] / med['agent, 1 range']:.2f}x (target <= 1.2x)")
    print(f"read_batch mix / 1 range: agent {med['agent, 48 + sym + re'] / med['agent, 1 range']:.2f}x, one-shot "
          f"{med['one-shot, 48+sym+re'] / med['one-shot, 1 range']:.2f}x")
    print(f"agent 1 range: {med['agent, 1 range'] * 1000:.2f} ms (target <= 5 ms median on loopback); over the bare "
          f"round trip: +{(med['agent, 1 range'] - med['agent ping']) * 1000:.2f} ms")
    # What the machine's load costs by itself, per call: the same 1-range call's fastest runs.
    print(f"agent 1 range, fastest quarter of the calls: {statistics.quantiles(times['agent, 1 range'], n=4)[0] * 1000:.2f} ms")
    print(f"ad-hoc read_source step (local host, what the TUI's R runs): median {statistics.median(adhoc) * 1000:.2f} ms "
          f"(min {min(adhoc) * 1000:.2f}, max {max(adhoc) * 1000:.2f}; target <= 50 ms to the source shown)")


if __name__ == "__main__":
    main()
