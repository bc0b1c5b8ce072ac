"""Pilot tests: every control and ad-hoc action driven by keys, asserting what the session log recorded."""

from __future__ import annotations

from orchestrator.events import ServerEvent
from orchestrator.tui.screens.dialogs import ErrorDialog, QuitDialog
from orchestrator.tui.screens.forms import FlagEditor, parse_flags
from orchestrator.tui.widgets.detail.output import OutputPane
from tests.tui.conftest import wait_for

SERVER_PB = """
name: tui server
hosts: localhost
steps:
  - name: start candidate
    server: {action: start, engine: no_such_engine, model: /m, flags: {speculative-num-steps: 1, speculative-eagle-topk: 1}}
    when: false
"""


async def _quit(pilot, s) -> None:
    await pilot.press("q")
    await wait_for(pilot, lambda: s.controller.finished)
    await wait_for(pilot, lambda: not s.app.is_running)


async def test_step_controls_by_key(live) -> None:
    s = live()
    async with s.app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: s.controller.gate.waiting is not None)
        await pilot.press("n")  # s1 runs, then paused before s2
        await wait_for(pilot, lambda: getattr(s.controller.gate.waiting, "step_id", None) == "s2")
        assert "paused before s2" in str(s.app.screen.query_one("#status").render())
        await pilot.press("s")  # skip s2
        await wait_for(pilot, lambda: getattr(s.controller.gate.waiting, "step_id", None) == "s3")
        await pilot.press("p", "r")
        await wait_for(pilot, lambda: s.controller.hold.holding)
        await pilot.pause(0.05)
        assert "playbook done" in str(s.app.screen.query_one("#status").render())
        # the board shows the rule's verdict
        assert s.app.model.board.entries["answer_ok"].state == "confirmed"
        await _quit(pilot, s)
    statuses = {e.step_id: e.status for e in s.logged("step_finished")}
    assert statuses == {"s1": "ok", "s2": "skipped", "s3": "ok", "a1": "ok"}
    assert (s.directory / "report.md").exists()


async def test_rerun_selected_step_and_output_pane(live) -> None:
    s = live(start_mode="running")
    async with s.app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: s.controller.hold.holding)
        pilot.app.screen.query_one("#steps").focus()
        pilot.app.screen.panes.select_step("s3")
        await pilot.pause()
        pane = pilot.app.screen.query_one(OutputPane)
        assert pane.lines[1:4] == ["line 1", "line 2", "line 3"]
        await pilot.press("e")
        await wait_for(pilot, lambda: "x1" in s.app.model.steps and s.app.model.steps["x1"].status == "ok")
        await wait_for(pilot, lambda: pane.step_id == "x1")
        assert "line 3" in pane.lines
        await _quit(pilot, s)
    rerun = next(e for e in s.logged("step_started") if e.step_id == "x1")
    assert rerun.section == "adhoc" and "rerun" in rerun.name


async def test_adhoc_command_note_and_verdict(live) -> None:
    s = live(start_mode="running")
    async with s.app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: s.controller.hold.holding)
        await pilot.press("x")
        await pilot.press(*"echo from-tui", "enter")
        await wait_for(pilot, lambda: s.app.model.steps.get("x1") is not None
                       and s.app.model.steps["x1"].status == "ok")
        await pilot.press("a")
        await pilot.press(*"odd output", "enter")
        await pilot.pause(0.05)
        # verdict: choose hypothesis and state through the dialog's widgets
        await pilot.press("v")
        await pilot.pause()
        dialog = pilot.app.screen
        dialog.query_one("#hypothesis").value = "flags_override"
        dialog.query_one("#state").value = "refuted"
        dialog.query_one("#because").value = "effective flags equal requested"
        await pilot.click("#ok")
        await pilot.pause(0.05)
        assert pilot.app.model.board.entries["flags_override"].state == "refuted"
        await _quit(pilot, s)
    cmd = next(e for e in s.logged("step_started") if e.step_id == "x1")
    assert cmd.action == "shell" and cmd.args["command"] == "echo from-tui"
    assert any(e.step_id == "x1" and e.text == "from-tui\n" for e in s.logged("output"))
    assert [n.text for n in s.logged("note_added") if n.author != "engine"] == ["odd output"]
    verdict = [h for h in s.logged("hypothesis_updated") if h.source == "manual"]
    assert [(v.hypothesis_id, v.state, v.evidence) for v in verdict] == [
        ("flags_override", "refuted", "effective flags equal requested")]


async def test_verdict_without_reason_is_refused_in_the_dialog(live) -> None:
    s = live(start_mode="running")
    async with s.app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: s.controller.hold.holding)
        await pilot.press("v")
        await pilot.pause()
        pilot.app.screen.query_one("#hypothesis").value = "answer_ok"
        pilot.app.screen.query_one("#state").value = "refuted"
        await pilot.click("#ok")
        await pilot.pause()
        assert "say why" in str(pilot.app.screen.query_one("#problem").render())
        await pilot.press("escape")
        await _quit(pilot, s)
    assert not [h for h in s.logged("hypothesis_updated") if h.source == "manual"]


async def test_edit_server_flags_then_rerun(live) -> None:
    s = live(SERVER_PB, start_mode="running")
    async with s.app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: s.controller.hold.holding)
        pilot.app.screen.panes.select_step("s1")
        await pilot.press("f")
        await pilot.pause()
        editor = pilot.app.screen
        assert isinstance(editor, FlagEditor)
        assert parse_flags(editor.query_one("#flags").text) == {"speculative-num-steps": 1, "speculative-eagle-topk": 1}
        editor.query_one("#flags").text = "speculative-num-steps: 3\nspeculative-eagle-topk: 1\n"
        await pilot.click("#ok")
        await wait_for(pilot, lambda: "x1" in s.app.model.steps and s.app.model.steps["x1"].status != "running")
        await _quit(pilot, s)
    rerun = next(e for e in s.logged("step_started") if e.step_id == "x1")
    assert rerun.action == "server"
    assert rerun.args["flags"] == {"speculative-num-steps": 3, "speculative-eagle-topk": 1}
    assert s.controller.server_flags("s1") == {"speculative-num-steps": 3, "speculative-eagle-topk": 1}


async def test_flags_on_a_shell_step_shows_the_error_dialog(live) -> None:
    s = live(start_mode="running")
    async with s.app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: s.controller.hold.holding)
        pilot.app.screen.panes.select_step("s2")
        await pilot.press("f")
        await pilot.pause()
        assert isinstance(pilot.app.screen, ErrorDialog)
        assert "not a server step" in pilot.app.screen.message
        await pilot.press("escape")
        await _quit(pilot, s)


async def test_servers_pane_and_quit_confirm(live) -> None:
    s = live(start_mode="running")
    async with s.app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: s.controller.hold.holding)
        # what the servers service emits when a server comes up (no real server here: the lab may be absent)
        for kind in ("server_started", "server_ready"):
            s.engine.emit(ServerEvent(type=kind, server_id="spec", host="localhost", engine="sglang", port=30000,
                                      flags={"speculative-num-steps": 1, "speculative-eagle-topk": 4},
                                      overrides=[{"flag": "speculative-eagle-topk", "requested": 4, "effective": 1}]))
        await pilot.pause(0.05)
        servers = pilot.app.screen.query_one("#servers")
        assert servers.display and servers.row_count == 1
        row = [str(c) for c in servers.get_row_at(0)]
        assert row[:3] == ["sglang", "localhost:30000", "ready"] and row[5] == "1"
        assert "spec-eagle-topk=4!" in row[6]
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(pilot.app.screen, QuitDialog)
        await pilot.press("escape")  # stay
        await pilot.pause()
        assert not s.controller.finished and pilot.app.is_running
        await pilot.press("q")
        await pilot.pause()
        await pilot.click("#ok")
        await wait_for(pilot, lambda: s.controller.finished)
    assert s.logged("session_finished")


async def test_command_palette_lists_the_controls(live) -> None:
    s = live()
    async with s.app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: s.controller.gate.waiting is not None)
        await pilot.press("ctrl+p")
        await pilot.press(*"run all")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(pilot, lambda: s.controller.hold.holding)
        await _quit(pilot, s)
    assert len(s.logged("step_finished")) == 4
