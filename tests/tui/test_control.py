"""The command API without Textual: gate modes, skip, cancel, reruns and pokes recorded in the log."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from orchestrator.errors import UserInputError
from tests.core.conftest import marker_pids
from tests.tui.conftest import Live
from tests.waiting import wait_until_async


async def _until(predicate, timeout: float = 10.0) -> None:  # noqa: ANN001
    assert await wait_until_async(predicate, timeout, interval=0.01), "condition not reached in time"


async def test_pause_next_skip_run_all_and_pokes(tmp_path) -> None:
    s = Live(tmp_path)
    task = asyncio.ensure_future(s.controller.start())
    await _until(lambda: s.controller.gate.waiting is not None)
    assert s.controller.gate.waiting.step_id == "s1"  # paused before anything ran
    s.controller.next_step()
    await _until(lambda: s.controller.gate.waiting is not None and s.controller.gate.waiting.step_id == "s2")
    s.controller.skip()
    await _until(lambda: s.controller.gate.waiting is not None and s.controller.gate.waiting.step_id == "s3")
    s.controller.run_all()
    await _until(lambda: s.controller.hold.holding)
    # the session is still open: pokes are recorded like steps
    finished = await s.controller.run_command("echo poked", host="localhost")
    assert (finished.step_id, finished.status) == ("x1", "ok")
    rerun = await s.controller.rerun("s2")
    assert rerun.step_id == "x2" and rerun.status == "ok"
    s.controller.note("looked at it", hypothesis_id="answer_ok", step_id="s2")
    s.controller.verdict("flags_override", "refuted", "no override in the flags")
    with pytest.raises(UserInputError):
        s.controller.verdict("nope", "refuted", "x")
    with pytest.raises(UserInputError):
        s.controller.server_flags("s2")  # a shell step has no flags
    s.controller.finish()
    outcome = await task
    assert outcome.status == "ok"
    statuses = {e.step_id: e.status for e in s.logged("step_finished")}
    assert statuses == {"s1": "ok", "s2": "skipped", "s3": "ok", "a1": "ok", "x1": "ok", "x2": "ok"}
    x1 = next(e for e in s.logged("step_started") if e.step_id == "x1")
    assert x1.section == "adhoc" and x1.args == {"command": "echo poked"}
    assert any(e.text == "poked\n" for e in s.logged("output") if e.step_id == "x1")
    assert [n.text for n in s.logged("note_added") if n.author != "engine"] == ["looked at it"]
    manual = [h for h in s.logged("hypothesis_updated") if h.source == "manual"]
    assert [(h.hypothesis_id, h.state) for h in manual] == [("flags_override", "refuted")]
    assert s.logged("session_finished")[0].status == "ok"


async def test_cancel_stops_the_running_step_and_always_runs(tmp_path) -> None:
    mark = f"30.{uuid.uuid4().int % 10**9}"  # a unique sleep: its process is found by its argv
    text = f"""
    name: slow
    hosts: localhost
    steps:
      - {{name: sleepy, shell: "sleep {mark}"}}
      - {{name: never, shell: "echo never"}}
    always:
      - {{name: cleanup, shell: "echo cleaned"}}
    """
    s = Live(tmp_path, text, start_mode="running")
    task = asyncio.ensure_future(s.controller.start())
    await _until(lambda: bool(marker_pids(mark)))  # the step's command runs: the cancel meets it mid-run
    s.controller.cancel()
    await _until(lambda: s.controller.hold.holding)
    s.controller.finish()
    outcome = await task
    assert outcome.status == "cancelled"
    statuses = {e.step_id: e.status for e in s.logged("step_finished")}
    assert statuses == {"s1": "cancelled", "a1": "ok"}
    assert await wait_until_async(lambda: not marker_pids(mark), 10), "the cancelled step's sleep survived"


async def test_quit_while_paused_cancels_remaining_steps(tmp_path) -> None:
    s = Live(tmp_path)
    task = asyncio.ensure_future(s.controller.start())
    await _until(lambda: s.controller.gate.waiting is not None)
    s.controller.finish()
    outcome = await asyncio.wait_for(task, 10)
    assert outcome.status == "cancelled"
    assert [e.step_id for e in s.logged("step_finished")] == ["a1"]  # always: still ran


async def test_unregistered_kind_is_a_clear_error(tmp_path) -> None:
    s = Live(tmp_path)
    step = s.engine.adhoc_step("no_such_kind", {})
    with pytest.raises(UserInputError, match="not available"):
        await s.controller.run_adhoc(step)
