"""Stream 200k output lines into a running TUI (headless ``run_test``) and print: ingest rate, peak
memory, and the latency of key presses answered during the stream.

    .venv/bin/python bench/tui_stream.py [--lines 200000] [--chunk 100] [--cap 5000]

The lines enter where the engine delivers them (the app's sink, after the engine's emit), as ``Output``
events of ``--chunk`` lines each (a transport reads output in chunks); ``--chunk 1`` is the worst case.
The rate counts until the app has applied every line to its model and output pane.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.events import Output  # noqa: E402
from orchestrator.inventory import Inventory  # noqa: E402
from orchestrator.playbook.models import Playbook, Step  # noqa: E402
from orchestrator.session.recording import build_runner  # noqa: E402
from orchestrator.tui.app import OrchestratorApp  # noqa: E402
from orchestrator.tui.control import Controller  # noqa: E402
from orchestrator.tui.messages import TuiSink  # noqa: E402


async def bench(lines: int, chunk: int, cap: int, presses: int, trace: bool) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="tui-bench-"))
    pb = Playbook(name="stream", hosts="localhost",
                  steps=[Step(action="set", args={"x": 1}, name="stream target", step_id="s1")])
    sink = TuiSink()
    engine, _ = build_runner(pb, Inventory(), sinks=[sink], sessions_dir=tmp)
    controller = Controller(engine, start_mode="running")
    app = OrchestratorApp(controller=controller, sink=sink, line_cap=cap)
    answered: list[float] = []
    original = app.action_tab

    def timed_tab(tab: str) -> None:  # the key's action: note when it ran
        answered.append(time.perf_counter())
        original(tab)

    app.action_tab = timed_tab  # type: ignore[method-assign]
    async with app.run_test(size=(120, 40)) as pilot:
        while not controller.hold.holding:
            await pilot.pause(0.01)
        app.screen.panes.select_step("s1")
        await pilot.pause(0.05)
        text = "".join(f"INFO step {i:07d} loading shard {i % 97} of the model weights ... ok\n" for i in range(chunk))
        events = [Output(step_id="s1", host="localhost", stream="stdout", text=text) for _ in range(lines // chunk)]
        row = app.model.steps["s1"]
        base_total = row.total_lines
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        if trace:
            tracemalloc.start()
        sent: list[float] = []
        started = time.perf_counter()
        every = max(1, len(events) // presses)
        for i, event in enumerate(events):
            sink.handle(event)
            if i % every == every // 2:
                sent.append(time.perf_counter())
                app.simulate_key("1")
            if i % 20 == 19:
                await asyncio.sleep(0)  # the engine yields to the loop between reads like this
        # polling the app's state is what is measured
        while row.total_lines - base_total < lines - lines % chunk or sink.queue:  # noqa: ASYNC110
            await asyncio.sleep(0.001)
        elapsed = time.perf_counter() - started
        await pilot.pause(0.2)
        peak = tracemalloc.get_traced_memory()[1] if trace else 0
        tracemalloc.stop()
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        pane_lines = len(app.screen.query_one("#output").lines)
        latencies = [(a - s) * 1000 for s, a in zip(sent, answered, strict=False)]
        await pilot.press("q")
    return {
        "lines": lines - lines % chunk, "chunk": chunk, "seconds": elapsed, "lines_per_s": (lines - lines % chunk) / elapsed,
        "tracemalloc_peak_mib": peak / 2**20, "rss_growth_mib": (rss_after - rss_before) / 1024,
        "kept_lines": len(row.lines), "pane_lines": pane_lines,
        "key_presses": len(latencies), "key_p50_ms": statistics.median(latencies) if latencies else float("nan"),
        "key_max_ms": max(latencies) if latencies else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--chunk", type=int, action="append", help="lines per Output event (repeatable)")
    parser.add_argument("--cap", type=int, default=5000, help="lines kept per step / in the pane")
    parser.add_argument("--presses", type=int, default=20)
    parser.add_argument("--tracemalloc", action="store_true",
                        help="also measure peak Python allocations (slows the run ~3x: the rate is then not comparable)")
    args = parser.parse_args()
    for chunk in args.chunk or [100, 1]:
        r = asyncio.run(bench(args.lines, chunk, args.cap, args.presses, args.tracemalloc))
        print(f"chunk={r['chunk']:>4} lines={r['lines']} time={r['seconds']:.2f}s rate={r['lines_per_s']:,.0f} lines/s "
              f"kept={r['kept_lines']} pane={r['pane_lines']} (cap {args.cap}) "
              f"peak_alloc={r['tracemalloc_peak_mib']:.1f}MiB rss_growth={r['rss_growth_mib']:.1f}MiB "
              f"keys={r['key_presses']} p50={r['key_p50_ms']:.1f}ms max={r['key_max_ms']:.1f}ms")


if __name__ == "__main__":
    main()
