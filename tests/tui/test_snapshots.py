"""SVG snapshots of the main states at 80x24 (and one wider). Update with `pytest --snapshot-update`.
Only `set` steps finish in the shots (their 0.0s durations are stable); shell steps show as running."""

from __future__ import annotations

import asyncio

from orchestrator.session.reader import read_session
from orchestrator.tui.app import OrchestratorApp
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
    shell: {command: "echo loading weights; echo server ready; sleep 3"}
"""


def _live(tmp_path, mode: str = "paused") -> Live:
    return Live(tmp_path, STABLE, start_mode=mode)  # type: ignore[arg-type]


def test_snapshot_start(snap_compare, tmp_path) -> None:
    s = _live(tmp_path)

    async def before(pilot) -> None:
        await wait_for(pilot, lambda: s.controller.gate.waiting is not None)
        await pilot.pause(0.1)

    assert snap_compare(s.app, terminal_size=(80, 24), run_before=before)


def test_snapshot_running_with_output(snap_compare, tmp_path) -> None:
    s = _live(tmp_path, "running")

    async def before(pilot) -> None:
        await wait_for(pilot, lambda: "s4" in s.app.model.steps and len(s.app.model.steps["s4"].lines) >= 2)
        await pilot.pause(0.1)

    assert snap_compare(s.app, terminal_size=(80, 24), run_before=before)


def test_snapshot_finished_with_confirmed_hypothesis(snap_compare, tmp_path) -> None:
    s = Live(tmp_path, STABLE.replace('echo loading weights; echo server ready; sleep 3', 'true'), start_mode="paused")

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
    s = Live(tmp_path, STABLE.replace('echo loading weights; echo server ready; sleep 3', 'true'),
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
