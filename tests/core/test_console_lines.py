"""The console's per-step lines are written without Rich's render pipeline (orchestrator/console.py _LineWriter):
they must read as Rich printed them, in colour on a terminal, plain elsewhere, with control codes stripped."""

from __future__ import annotations

import io

from rich.console import Console

from orchestrator.console import ConsoleSink
from orchestrator.events import HostOutcome, Output, StepFinished, StepStarted


def _events() -> list[StepStarted | Output | StepFinished]:
    return [
        StepStarted(step_id="s1", name="[bold]not markup[/]", action="shell"),
        Output(step_id="s1", host="gpu1", stream="stderr", text="warned\n"),
        Output(step_id="s1", host="gpu1", stream="stdout", text="one\rline\nhalf "),
        StepFinished(step_id="s1", name="[bold]not markup[/]", action="shell", status="failed", duration=0.25,
                     attempts=2, ignored=True, error="it broke\nsecond line",
                     results=[HostOutcome(host="gpu1", status="failed")]),
    ]


def _print(console: Console) -> None:
    sink = ConsoleSink(console, verbose=True)
    for event in _events():
        sink.handle(event)


def test_plain_lines_when_not_a_terminal() -> None:
    out = io.StringIO()
    _print(Console(file=out, width=200, highlight=False))
    assert out.getvalue().splitlines() == [
        "  … s1 [bold]not markup[/]",  # a name is text, never markup
        "    gpu1 │ warned",
        "    gpu1 │ oneline",  # \r stripped, as Rich strips it
        "    gpu1 │ half ",  # the unfinished line, when the step ends
        "✗ failed      [bold]not markup[/] gpu1 0.25s ×2 (ignored)",
        "    it broke",
        "    second line",
    ]


def test_colours_on_a_terminal_match_rich() -> None:
    out = io.StringIO()
    _print(Console(file=out, width=200, highlight=False, force_terminal=True, color_system="standard"))
    text = out.getvalue()
    reference = io.StringIO()
    rich = Console(file=reference, width=200, highlight=False, force_terminal=True, color_system="standard")
    rich.print("[red]✗ failed     [/] \\[bold]not markup\\[/] [dim]gpu1 0.25s[/] [dim]×2[/] [dim](ignored)[/]")
    assert reference.getvalue() in text
    # stderr lines dim as a whole (the host dim cyan), stdout lines plain with the host in cyan
    assert "\x1b[2;36mgpu1\x1b[0m\x1b[2m │ warned\x1b[0m" in text and "\x1b[36mgpu1\x1b[0m │ oneline" in text


def test_a_recording_console_gets_the_lines_through_rich() -> None:
    console = Console(record=True, width=200, color_system=None)
    _print(console)
    assert "✗ failed      [bold]not markup[/] gpu1 0.25s ×2 (ignored)" in console.export_text()
