"""Issue 9's story in the TUI, against the real lab: run the flagship, read the code the seed read, change a
server step's flags and rerun it, mark a hypothesis, quit (stopping the running server), replay the session —
and find all of it in the saved log and the report."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.lab.building.build import LabPaths
from orchestrator.lab.building.inventory import lab_inventory
from orchestrator.playbook.loader import load_playbook
from orchestrator.session.reader import read_session
from orchestrator.session.recording import build_runner
from orchestrator.tui.app import OrchestratorApp
from orchestrator.tui.control import Controller
from orchestrator.tui.messages import TuiSink
from orchestrator.tui.screens.dialogs import QuitDialog
from orchestrator.tui.screens.forms import FlagEditor
from tests.tui.conftest import wait_for

FLAGSHIP = Path(__file__).resolve().parents[2] / "playbooks" / "eagle3.yaml"


@pytest.mark.lab
@pytest.mark.slow
async def test_flagship_in_the_tui_then_replay(lab: LabPaths, tmp_path: Path) -> None:
    inventory = lab_inventory("seed-wiring", root=lab.root)
    playbook = load_playbook(FLAGSHIP, extra_names=inventory.host_vars("lab"))
    sink = TuiSink()
    # the flagship's own sample sizes: the ones the lab is calibrated for (a smaller sample is rightly inconclusive)
    engine, directory = build_runner(playbook, inventory, sinks=[sink], sessions_dir=tmp_path / "sessions")
    controller = Controller(engine, start_mode="running")
    app = OrchestratorApp(controller=controller, sink=sink, session_dir=directory)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: controller.hold.holding, timeout=300)
        assert app.model.board.entries["wiring"].state == "confirmed"

        # the seed's read: eagle_worker.py 155-200 of the lab's sglang 0.5.12.post1
        await pilot.press("R")
        await pilot.pause()
        form = pilot.app.screen
        form.query_one("#package").value = "sglang"
        form.query_one("#file").value = "srt/speculative/eagle_worker.py"
        form.query_one("#address").value = "155,200"
        await pilot.click("#ok")
        await wait_for(pilot, lambda: app.model.steps.get("x1") is not None and app.model.steps["x1"].status == "ok",
                       timeout=60)

        # edit the speculative server step's flags, rerun it
        pilot.app.screen.panes.select_step("s4")
        await pilot.press("f")
        await pilot.pause()
        editor = pilot.app.screen
        assert isinstance(editor, FlagEditor)
        text = editor.query_one("#flags").text
        assert "speculative-num-draft-tokens: 16" in text
        editor.query_one("#flags").text = text.replace("speculative-num-draft-tokens: 16", "speculative-num-draft-tokens: 8")
        await pilot.click("#ok")
        await wait_for(pilot, lambda: app.model.steps.get("x2") is not None
                       and app.model.steps["x2"].status not in ("running", "pending"), timeout=120)
        assert app.model.steps["x2"].status == "ok"

        # mark a hypothesis by hand
        await pilot.press("v")
        await pilot.pause()
        dialog = pilot.app.screen
        dialog.query_one("#hypothesis").value = "chat_template"
        dialog.query_one("#state").value = "refuted"
        dialog.query_one("#because").value = "the lab's prompts use no chat template"
        await pilot.click("#ok")
        await pilot.pause(0.1)

        # quit: the rerun server still runs, so the TUI asks; confirm
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(pilot.app.screen, QuitDialog)
        await pilot.click("#ok")
        await wait_for(pilot, lambda: controller.finished, timeout=120)
        # the app writes the report after the session ends, then exits: wait for that, not for time to pass
        await wait_for(pilot, lambda: (directory / "report.md").is_file() or not app.is_running, timeout=120)

    loaded = read_session(directory)
    started = {e.step_id: e for e in loaded.of_type("step_started")}
    assert started["x1"].action == "read_source" and started["x1"].args["lines"] == "155,200"
    read = next(e for e in loaded.of_type("step_finished") if e.step_id == "x1").results[0].result
    assert read["version"] == "0.5.12.post1"
    assert any("get_embed_and_head" in text for _, text in read["reads"][0]["lines"])
    assert started["x2"].action == "server" and started["x2"].args["flags"]["speculative-num-draft-tokens"] == 8
    manual = [e for e in loaded.of_type("hypothesis_updated") if e.source == "manual"]
    assert [(e.hypothesis_id, e.state) for e in manual] == [("chat_template", "refuted")]
    stopped = {e.server_id for e in loaded.events if e.type == "server_stopped"}
    ready = {e.server_id for e in loaded.events if e.type == "server_ready"}
    assert ready <= stopped, f"servers left running: {ready - stopped}"
    assert loaded.finished is not None

    report = (directory / "report.md").read_text()
    assert "the lab's prompts use no chat template" in report and "eagle_worker.py:155-200" in report

    # replay the saved session, read-only
    replay = OrchestratorApp(replay=loaded)
    async with replay.run_test(size=(80, 24)) as pilot:
        await pilot.press("end")
        await pilot.pause(0.1)
        board = pilot.app.screen.query_one("#panes").model.board
        assert board.entries["chat_template"].state == "refuted"
        assert board.entries["wiring"].state == "confirmed"
        await pilot.press("home")
        await pilot.pause(0.1)
        assert pilot.app.screen.query_one("#panes").model.board.entries["wiring"].state == "open"
        await pilot.press("q")
