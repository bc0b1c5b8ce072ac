"""Lab-build progress for a person and for a log: Rich bars on a terminal, plain timestamped lines elsewhere.

Both go to stderr (stdout stays for what a command prints: ``run --json`` events, ``lab status --json``). Off a
terminal (CI logs, ``2>&1 | tee``) Rich draws nothing until the end, so a 3-minute build looked stuck; there
``PlainProgress`` writes a line when a stage starts, each time it passes another 10 %, when it ends, and at
least every 15 s while callbacks keep coming::

    [  42.1s] target: target step 251/560 loss 2.31
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

BuildProgress = Callable[[str, str, float], None]  # (stage, message, fraction) as orchestrator.lab.building.build calls it


class PlainProgress:
    """A BuildProgress writing plain lines, at most one per ``step`` of a stage's fraction (or per ``heartbeat`` s)."""

    def __init__(self, stream: TextIO, *, step: float = 0.1, heartbeat: float = 15.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream, self.step, self.heartbeat, self.clock = stream, step, heartbeat, clock
        self.started = self.last_line = clock()
        self.shown: dict[str, tuple[int, float, str]] = {}  # stage -> (step bucket, fraction, message) last written

    def __call__(self, stage: str, message: str, fraction: float) -> None:
        fraction = max(0.0, min(1.0, float(fraction)))
        now = self.clock()
        bucket = int(fraction / self.step + 1e-9)
        last = self.shown.get(stage)
        if last is None or fraction < last[1]:
            due = True  # a new stage, or one that started over (a draft retrained by calibration)
        elif fraction >= 1.0:
            due = message != last[2]  # the end, and each distinct closing line (calibration checks report at 1.0)
        else:
            due = bucket > last[0] or now - self.last_line >= self.heartbeat
        if not due:
            return
        self.shown[stage] = (bucket, fraction, message)
        self.last_line = now
        self.stream.write(f"[{now - self.started:6.1f}s] {stage}: {message}\n")
        self.stream.flush()


def is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def rich_progress(stream: TextIO | None = None) -> tuple[Any, BuildProgress]:
    """A Rich progress display on ``stream`` (default stderr) and a BuildProgress feeding it, one bar a stage."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    console = Console(file=stream) if stream is not None else Console(stderr=True)
    progress = Progress(TextColumn("[bold]{task.fields[stage]:<18}"), BarColumn(), TextColumn("{task.description}"),
                        TimeElapsedColumn(), transient=False, console=console)
    tasks: dict[str, TaskID] = {}

    def report(stage: str, message: str, fraction: float) -> None:
        if stage not in tasks:
            tasks[stage] = progress.add_task(message, total=1.0, stage=stage)
        progress.update(tasks[stage], completed=max(0.0, min(1.0, fraction)), description=message)

    return progress, report


def build_progress(stream: TextIO | None = None) -> tuple[Any, BuildProgress]:
    """``(context manager, callback)`` for a lab build: Rich bars when ``stream`` (stderr) is a terminal, else
    ``PlainProgress`` lines."""
    stream = stream if stream is not None else sys.stderr
    if is_terminal(stream):
        return rich_progress(stream)
    return contextlib.nullcontext(), PlainProgress(stream)
