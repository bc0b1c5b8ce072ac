"""Ad-hoc source reads (rendered in the source viewer) and the replay of a saved session."""

from __future__ import annotations

from orchestrator.session.reader import read_session
from orchestrator.tui.app import OrchestratorApp
from orchestrator.tui.screens.replay import ReplayScreen
from orchestrator.tui.widgets.detail.source import render_reads
from tests.tui.conftest import wait_for


async def test_adhoc_read_source_is_recorded_and_shown(live) -> None:
    s = live(start_mode="running")
    async with s.app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: s.controller.hold.holding)
        await pilot.press("R")
        await pilot.pause()
        form = pilot.app.screen
        form.query_one("#package").value = "json"
        form.query_one("#file").value = "decoder.py"
        form.query_one("#address").value = "/def py_scanstring/"
        await pilot.click("#ok")
        await wait_for(pilot, lambda: "x1" in s.app.model.steps and s.app.model.steps["x1"].status == "ok")
        await wait_for(pilot, lambda: pilot.app.screen.query_one("#tabs").active == "tab-source")
        shown = pilot.app.screen.query_one("#source-body").content.renderables
        assert "decoder.py" in str(shown[0]) and "def py_scanstring" in shown[1].code
        await pilot.press("q")
        await wait_for(pilot, lambda: s.controller.finished)
    started = next(e for e in s.logged("step_started") if e.step_id == "x1")
    assert started.action == "read_source" and started.args["pattern"] == "def py_scanstring"
    finished = next(e for e in s.logged("step_finished") if e.step_id == "x1")
    span = finished.results[0].result["reads"][0]["matches"][0]
    assert any("def py_scanstring" in text for _, text in span["lines"])


def test_render_reads_marks_the_range_and_shows_errors() -> None:
    result = {"package": "sglang", "version": "0.5.12.post1", "reads": [
        {"file": "a.py", "start": 11, "end": 12, "lines": [[10, "x = 1"], [11, "y = 2"], [12, "z = 3"], [13, "w"]]},
        {"file": "gone.py", "error": {"message": "no such file"}},
    ]}
    group = render_reads(result)
    syntax = group.renderables[1]
    assert syntax.highlight_lines == {11, 12} and syntax.start_line == 10
    assert "no such file" in str(group.renderables[2])


async def test_replay_timeline_steps_through_a_saved_session(live) -> None:
    s = live(start_mode="running")
    async with s.app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: s.controller.hold.holding)
        s.controller.note("recorded for replay")
        await pilot.press("q")
        await wait_for(pilot, lambda: s.controller.finished)
    loaded = read_session(s.directory)
    app = OrchestratorApp(replay=loaded)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen = pilot.app.screen
        assert isinstance(screen, ReplayScreen)
        panes = screen.query_one("#panes")
        assert panes.model.status == "ok" and panes.model.board.entries["answer_ok"].state == "confirmed"
        await pilot.press("home")
        assert screen.position == 0 and panes.model.steps["s1"].status == "pending"
        await pilot.press("]")  # the first finished step
        assert panes.model.steps["s1"].status == "ok" and panes.model.steps["s2"].status == "pending"
        await pilot.press("right", "right")
        assert screen.position == loaded.events.index(
            next(e for e in loaded.events if e.type == "step_finished")) + 2
        await pilot.press("r")  # live-only controls are disabled in a replay
        await pilot.press("end")
        assert panes.model.notes[-1].text == "recorded for replay"
        await pilot.press("q")
    assert len(read_session(s.directory).events) == len(loaded.events)  # read-only
