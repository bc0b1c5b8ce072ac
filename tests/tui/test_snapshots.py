"""SVG snapshots of the main states at 80x24 (and one wider). Update with `pytest --snapshot-update`.

A shot shows a state, never a time: each test waits for the exact state it draws (a step waiting at the gate,
output lines in the model), and the live apps get a sink that pins step durations to 0.0 s. Even a `set`
step's duration is wall time: the engine shares its event loop with the app while it draws, and the session
log fsyncs at step boundaries, so on a loaded machine it read 0.1-0.4 s and failed the shot about 1 run in 20
(every run with both cores busy). The shell step shows as running: it sleeps far longer than any shot takes
(a 3 s sleep ran out before the shot on a loaded machine) and is killed when the app closes."""

from __future__ import annotations

import asyncio

from orchestrator.events import Event
from orchestrator.session.reader import read_session
from orchestrator.tui.app import OrchestratorApp
from orchestrator.tui.messages import TuiSink
from tests.tui.conftest import Live, wait_for

STABLE = """
name: snapshot
hosts: localhost
hypotheses:
  - id: wiring
    title: Server captures other aux hidden states than training used
  - id: flags_override
    title: A speculative flag is silently overridden
steps:
  - name: expected layers
    set: {trained_layers: [1, 2, 3]}
  - name: server layers
    set: {server_layers: [1, 2, 3]}
    evidence:
      wiring: {refute_if: "server_layers == trained_layers", because: "same layers"}
  - name: effective flags
    set: {overrides: 1}
    evidence:
      flags_override: {confirm_if: "overrides > 0", because: "1 flag overridden"}
  - name: tail the log
    shell: {command: "echo loading weights; echo server ready; sleep 120"}
"""


class ZeroDurationSink(TuiSink):
    """The app's sink, with every finished step's duration pinned to 0.0 s (the session log keeps the real one)."""

    def handle(self, event: Event) -> None:
        if event.type == "step_finished":
            event = event.model_copy(update={"duration": 0.0})
        super().handle(event)


def _live(tmp_path, mode: str = "paused", text: str = STABLE) -> Live:
    return Live(tmp_path, text, start_mode=mode, sink=ZeroDurationSink())  # type: ignore[arg-type]


def test_snapshot_start(snap_compare, tmp_path) -> None:
    s = _live(tmp_path)

    async def before(pilot) -> None:
        await wait_for(pilot, lambda: s.controller.gate.waiting is not None)
        await pilot.pause(0.1)

    assert snap_compare(s.app, terminal_size=(80, 24), run_before=before)


def test_snapshot_running_with_output(snap_compare, tmp_path) -> None:
    s = _live(tmp_path, "running")

    async def before(pilot) -> None:
        def drawn() -> bool:  # s4 running with both lines in; the widgets repaint in the same handler
            row = s.app.model.steps.get("s4")
            return row is not None and row.status == "running" and len(row.lines) >= 2

        await wait_for(pilot, drawn)
        await pilot.pause(0.1)

    assert snap_compare(s.app, terminal_size=(80, 24), run_before=before)


def test_snapshot_finished_with_confirmed_hypothesis(snap_compare, tmp_path) -> None:
    s = _live(tmp_path, "paused", STABLE.replace('echo loading weights; echo server ready; sleep 120', 'true'))

    async def before(pilot) -> None:
        for _ in range(3):
            await wait_for(pilot, lambda: s.controller.gate.waiting is not None)
            await pilot.press("n")
        await wait_for(pilot, lambda: getattr(s.controller.gate.waiting, "step_id", None) == "s4")
        await pilot.press("s")  # skip the shell step: its duration would vary
        await wait_for(pilot, lambda: s.controller.hold.holding)
        pilot.app.screen.panes.on_hypothesis_selected(type("M", (), {"hypothesis_id": "flags_override"})())
        await pilot.pause(0.1)

    assert snap_compare(s.app, terminal_size=(80, 24), run_before=before)


def test_snapshot_replay(snap_compare, tmp_path) -> None:
    s = Live(tmp_path, STABLE.replace('echo loading weights; echo server ready; sleep 120', 'true'),
             start_mode="running")

    async def drive() -> None:
        async with s.app.run_test() as pilot:
            await wait_for(pilot, lambda: s.controller.gate.waiting is not None or s.controller.hold.holding)
            await wait_for(pilot, lambda: s.controller.hold.holding)
            await pilot.press("q")
            await wait_for(pilot, lambda: s.controller.finished)

    asyncio.run(drive())
    loaded = read_session(s.directory)
    for event in loaded.events:  # durations vary run to run; the shot is about the layout
        if event.type == "step_finished":
            event.duration = 0.0
        if event.type == "session_started":
            event.session_id = "20260101T000000Z-snapshot"
    app = OrchestratorApp(replay=loaded)

    async def before(pilot) -> None:
        await pilot.pause()
        pilot.app.screen.sub_title = "replay · snapshot · read-only"
        await pilot.press("home", "]", "]")
        await pilot.pause(0.1)

    assert snap_compare(app, terminal_size=(80, 24), run_before=before)


def test_snapshot_wide_uses_the_space(snap_compare, tmp_path) -> None:
    s = _live(tmp_path)

    async def before(pilot) -> None:
        await wait_for(pilot, lambda: s.controller.gate.waiting is not None)
        await pilot.pause(0.1)

    assert snap_compare(s.app, terminal_size=(120, 36), run_before=before)
