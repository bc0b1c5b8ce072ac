"""Lab-build progress off a terminal: plain lines with the elapsed time, a few a stage, never one per callback."""

from __future__ import annotations

import io
import re
from pathlib import Path

from typer.testing import CliRunner

from orchestrator.cli.progress import PlainProgress, build_progress

LINE = re.compile(r"^\[ *\d+\.\ds\] \S[^:]*: .+$")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_stream_that_is_not_a_terminal_gets_plain_lines_a_terminal_gets_bars() -> None:
    stream = io.StringIO()
    context, report = build_progress(stream)
    assert isinstance(report, PlainProgress)
    with context:
        report("sglang", "pip install sglang", 0.0)
    assert LINE.match(stream.getvalue().strip()), stream.getvalue()

    from rich.progress import Progress

    context, _ = build_progress(Tty())
    assert isinstance(context, Progress)


def test_a_training_stage_prints_each_tenth_and_its_end_with_the_elapsed_time() -> None:
    stream, clock = io.StringIO(), Clock()
    report = PlainProgress(stream, clock=clock)
    report("sglang", "pip install --no-deps --target ... sglang==0.5.12.post1", 0.0)
    clock.now += 4.0
    report("sglang", "sglang 0.5.12.post1 source tree ready", 1.0)
    for step in range(0, 561, 5):  # 113 callbacks, 0.2 s apart
        clock.now += 0.2
        report("target", f"target step {step}/560 loss {3 - step / 560:.2f}", step / 560)
    clock.now += 0.1
    report("target", "target ready", 1.0)
    report("target", "target ready", 1.0)  # a repeated end says nothing new
    lines = stream.getvalue().splitlines()
    assert all(LINE.match(line) for line in lines), lines
    assert lines[0] == "[   0.0s] sglang: pip install --no-deps --target ... sglang==0.5.12.post1"
    assert lines[1] == "[   4.0s] sglang: sglang 0.5.12.post1 source tree ready"
    target = [line for line in lines if "] target: " in line]
    assert target[0] == "[   4.2s] target: target step 0/560 loss 3.00"
    assert [int(re.search(r"step (\d+)/", t).group(1)) for t in target[1:-2]] == [60, 115, 170, 225, 280, 340, 395,
                                                                                   450, 505]
    assert target[-2:] == ["[  26.6s] target: target step 560/560 loss 2.00", "[  26.7s] target: target ready"]
    assert len(lines) == 2 + 1 + 9 + 2  # sglang start and end; target start, nine tenths, last step, ready


def test_a_slow_stage_still_says_something_every_15_seconds() -> None:
    stream, clock = io.StringIO(), Clock()
    report = PlainProgress(stream, clock=clock)
    for second in range(50):  # a stage stuck below its next tenth for 50 s, a callback a second
        report("draft seed-wiring", f"draft step {second}/560", 0.01)
        clock.now += 1.0
    assert stream.getvalue().splitlines() == [
        "[   0.0s] draft seed-wiring: draft step 0/560",
        "[  15.0s] draft seed-wiring: draft step 15/560",
        "[  30.0s] draft seed-wiring: draft step 30/560",
        "[  45.0s] draft seed-wiring: draft step 45/560",
    ]


def test_a_stage_that_starts_over_and_distinct_closing_lines_are_all_shown() -> None:
    stream, clock = io.StringIO(), Clock()
    report = PlainProgress(stream, clock=clock)
    report("calibrate", "calibrating draft seed-wiring (attempt 1/3)", 0.0)
    report("calibrate", "ok   seed-wiring: wiring mismatch is clear", 1.0)
    report("calibrate", "ok   no-lm-head: lm head missing is clear", 1.0)
    report("calibrate", "calibrating draft healthy (attempt 1/3)", 0.0)  # back to 0: a new round
    text = stream.getvalue()
    assert text.count("\n") == 4 and "no-lm-head" in text and "draft healthy" in text


def test_lab_build_off_a_terminal_streams_plain_lines(monkeypatch, tmp_path: Path) -> None:
    """`orchestrator lab build` with stderr not a terminal (CliRunner's): the callback's lines, no training."""
    import orchestrator.lab.building.build as build
    import orchestrator.lab.building.builder as builder
    from orchestrator.cli.lab import lab_app

    def fake_build(name, *, root=None, progress=None, from_scratch=False, target_class=None):  # noqa: ANN001, ANN202
        for step in range(0, 101, 10):
            progress("target", f"target step {step}/100", step / 100)
        return build.paths(name, root=tmp_path)

    monkeypatch.setattr(builder, "build_lab", fake_build)
    result = CliRunner().invoke(lab_app, ["build", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "] target: " in line]
    assert len(lines) == 11 and all(LINE.match(line) for line in lines), result.output
    assert "lab ready in" in result.output
