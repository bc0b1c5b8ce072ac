"""Core figures: how fast `orchestrator --help` starts, and how many events/s the session log sustains.

    .venv/bin/python bench/core_figures.py [--runs 5] [--outputs 100000]

Prints (1) the median wall time of `python -m orchestrator --help` over N fresh subprocesses, and
(2) events/s written by SessionLog (events.jsonl + outputs/, fsync at every step boundary) for
100k Output events in 100 steps, fed straight to the sink and through PlaybookRunner.emit (numbering,
redaction and re-validation, i.e. what a real run pays per output chunk).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def help_start_time(runs: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "orchestrator", "--help"], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return times


def events(outputs: int, steps: int) -> list:
    from orchestrator.events import Output, SessionFinished, SessionStarted, StepFinished, StepStarted

    per_step = outputs // steps
    line = "INFO 12-01 10:00:00 [scheduler.py:1234] Decode batch. #running-req: 8, #token: 4096, gen throughput: 123.4\n"
    stream: list = [SessionStarted(session_id="bench", playbook="bench")]
    for s in range(steps):
        sid = f"s{s + 1}"
        stream.append(StepStarted(step_id=sid, name=f"step {s}", action="shell", hosts=["localhost"]))
        stream.extend(Output(step_id=sid, host="localhost", text=line) for _ in range(per_step))
        stream.append(StepFinished(step_id=sid, name=f"step {s}", action="shell", status="ok", duration=0.1))
    stream.append(SessionFinished(status="ok", duration=1.0))
    return stream


def sink_rate(stream: list) -> tuple[float, int]:
    from orchestrator.session.log import SessionLog

    with tempfile.TemporaryDirectory() as tmp:
        log = SessionLog(Path(tmp))
        started = time.perf_counter()
        for event in stream:
            log.handle(event)
        log.close()
        elapsed = time.perf_counter() - started
        size = (Path(tmp) / "events.jsonl").stat().st_size
    return len(stream) / elapsed, size


def engine_rate(stream: list) -> float:
    from orchestrator.playbook.models import Playbook
    from orchestrator.runner import RunnerOptions
    from orchestrator.session.compose import compose_runner
    from orchestrator.session.log import SessionLog

    with tempfile.TemporaryDirectory() as tmp:
        engine = compose_runner(Playbook(name="bench"), sinks=[SessionLog(Path(tmp))],
                        options=RunnerOptions(session_id="bench"))
        engine.redactor.add("not-in-the-output-but-checked-s3cret")
        started = time.perf_counter()
        for event in stream:
            engine.emit(event)
        for sink in engine.sinks:
            sink.close()
        return len(stream) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--outputs", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()

    times = help_start_time(args.runs)
    print(f"orchestrator --help: median {statistics.median(times) * 1000:.0f} ms over {args.runs} runs "
          f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f})")
    stream = events(args.outputs, args.steps)
    rate, size = sink_rate(stream)
    print(f"SessionLog sink: {rate:,.0f} events/s ({len(stream):,} events, {args.steps} fsync'd step boundaries, "
          f"events.jsonl {size / 1e6:.1f} MB)")
    print(f"PlaybookRunner.emit -> SessionLog (redaction + validation): {engine_rate(stream):,.0f} events/s")


if __name__ == "__main__":
    main()
