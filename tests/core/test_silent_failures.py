"""No silent failures: a sink that raises (a full disk under the log), a report that cannot be rendered or
written, a malformed event of a known kind in a saved log. Each is counted, said (stderr, or the caller's
``say``) and carried by the session, whose report and `sessions show` mark it incomplete."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.events import Event, MalformedEvent, parse_event
from orchestrator.playbook.models import Playbook
from orchestrator.runner import PlaybookRunner
from orchestrator.session import report as report_module
from orchestrator.session.compose import compose_runner
from orchestrator.session.reader import read_session
from orchestrator.session.recording import write_reports
from orchestrator.session.report import render_report

PLAYBOOK = """name: silent test
hosts: localhost
steps:
  - {name: hello, shell: "echo hello"}
  - {name: again, shell: "echo again"}
"""
ENOSPC = OSError(errno.ENOSPC, "No space left on device")


class FullDiskSink:
    """A sink whose disk fills up at the first step's end."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def handle(self, event: Event) -> None:
        self.seen.append(event.type)
        if event.type == "step_finished" or len(self.seen) > 3:
            raise ENOSPC

    def close(self) -> None:
        pass


class _FullFile:
    """Stands in for events.jsonl once the disk is full: every write fails."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def write(self, _text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        self.real.flush()

    def fileno(self) -> int:
        return int(self.real.fileno())

    def close(self) -> None:
        self.real.close()


def _add_to_each_engine(monkeypatch: pytest.MonkeyPatch, *, sink: Any = None, finalizer: Any = None) -> None:
    """The run_playbook fixture builds the engine; this adds a sink or a finalizer before it runs."""
    original_run = PlaybookRunner.run

    async def run(self: PlaybookRunner) -> Any:
        if sink is not None:
            self.sinks.append(sink)
        if finalizer is not None:
            self.finalizers.append(finalizer)
        return await original_run(self)

    monkeypatch.setattr(PlaybookRunner, "run", run)


async def test_a_raising_sink_is_counted_said_and_marks_the_session_incomplete(
        run_playbook, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    _add_to_each_engine(monkeypatch, sink=FullDiskSink())
    run = await run_playbook(PLAYBOOK)

    assert run.outcome.status == "ok"  # the steps themselves were fine
    assert run.outcome.incomplete
    [problem] = run.outcome.problems
    assert "event sink FullDiskSink failed" in problem and "No space left on device" in problem
    err = capsys.readouterr().err
    assert err.count("FullDiskSink failed") == 1, err  # said once, counted after
    assert "marked incomplete" in err

    finished = run.of_type("session_finished")[-1]
    # session_finished carries the count so far; the outcome also counts session_finished itself
    assert finished.incomplete and finished.problems[0].startswith("event sink FullDiskSink failed (4 times)")
    assert problem.startswith("event sink FullDiskSink failed (5 times)") and "5 event(s) not recorded" in problem
    loaded = read_session(run.session_dir)
    assert loaded.incomplete and loaded.finished is not None and loaded.finished.incomplete
    report = render_report(run.session_dir)
    assert "Incomplete record" in report and "FullDiskSink" in report
    shown = CliRunner().invoke(app, ["sessions", "show", str(run.session_dir)])
    assert "incomplete record" in shown.output and "FullDiskSink" in shown.output


async def test_a_full_disk_under_the_session_log_leaves_it_unfinished_and_says_so(
        run_playbook, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.session.log import SessionLog

    original_handle = SessionLog.handle

    def handle_until_full(self: SessionLog, event: Event) -> None:
        if event.type == "step_finished" and self._file is not None and not isinstance(self._file, _FullFile):
            self._file = _FullFile(self._file)  # type: ignore[assignment]
        original_handle(self, event)

    monkeypatch.setattr(SessionLog, "handle", handle_until_full)
    run = await run_playbook(PLAYBOOK)

    assert run.outcome.incomplete
    assert any("event sink SessionLog failed" in p and "Errno 28" in p for p in run.outcome.problems)
    assert "event sink SessionLog failed" in capsys.readouterr().err
    # the in-memory sink still got the whole story, including what the log missed
    assert run.of_type("session_finished")[-1].incomplete
    loaded = read_session(run.session_dir)
    assert loaded.finished is None and loaded.incomplete  # the log could not take session_finished
    assert "did not finish" in render_report(run.session_dir)


async def test_a_failing_finalizer_is_a_problem_but_not_an_incomplete_record(
        run_playbook, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    async def stop_servers() -> None:
        raise RuntimeError("kill -TERM -4242: no such process group")

    _add_to_each_engine(monkeypatch, finalizer=stop_servers)
    run = await run_playbook(PLAYBOOK)
    assert not run.outcome.incomplete
    [problem] = run.outcome.problems
    assert "stop_servers" in problem and "no such process group" in problem
    assert "stop_servers" in capsys.readouterr().err
    loaded = read_session(run.session_dir)
    assert not loaded.incomplete and loaded.problems == [problem]
    assert "**Problems**" in render_report(run.session_dir)


# -- reports ----------------------------------------------------------------------------------------
@pytest.fixture
async def finished_session(run_playbook) -> Path:
    run = await run_playbook(PLAYBOOK)
    assert run.outcome.status == "ok" and not run.outcome.problems
    return Path(run.session_dir)


def test_a_report_that_fails_to_render_is_said_and_returned(finished_session: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_html(*_args: Any, **_kwargs: Any) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report_module, "to_html", broken_html)
    said: list[str] = []
    reports = write_reports(finished_session, say=said.append)
    assert [p.name for p in reports.written] == ["report.md"]
    [failure] = reports.failures
    assert failure.startswith("report.html was not written") and "No space left on device" in failure
    assert len(said) == 1 and "report.html" in said[0] and "orchestrator report" in said[0]


def test_a_report_that_fails_again_says_the_old_one_is_stale(finished_session: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    assert not write_reports(finished_session, say=lambda _m: None).failures
    monkeypatch.setattr(Path, "write_text", _raise_enospc)
    said: list[str] = []
    reports = write_reports(finished_session, say=said.append)
    assert len(reports.failures) == 2 and all("out of date" in f for f in reports.failures)
    assert len(said) == 2


def _raise_enospc(*_args: Any, **_kwargs: Any) -> int:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_broken_report_section_is_said_too(finished_session: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def servers_section(_session: Any) -> list[Any]:
        raise KeyError("port")

    monkeypatch.setattr(report_module, "SECTIONS", [*report_module.SECTIONS, servers_section])
    said: list[str] = []
    reports = write_reports(finished_session, say=said.append)
    assert len(reports.written) == 2  # the rest of the report is still there
    assert reports.failures == ["report.md: section servers_section failed: KeyError: 'port'",
                                "report.html: section servers_section failed: KeyError: 'port'"]
    assert len(said) == 2
    result = CliRunner().invoke(app, ["report", str(finished_session), "--stdout"])
    assert result.exit_code == 0
    assert "section servers_section failed" in result.output  # in the report, and on stderr below
    assert "orchestrator: report.md: section servers_section failed" in result.stderr


def test_write_reports_writes_both_when_nothing_fails(finished_session: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reports = write_reports(finished_session)
    assert sorted(p.name for p in reports.written) == ["report.html", "report.md"] and not reports.failures
    assert capsys.readouterr().err == ""


# -- malformed known events in a saved log ------------------------------------------------------------
def test_a_malformed_known_event_is_counted_not_dropped(finished_session: Path) -> None:
    path = finished_session / "events.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    number = next(i for i, line in enumerate(lines, start=1) if json.loads(line)["type"] == "step_finished")
    bad = json.loads(lines[number - 1])
    bad["status"] = "exploded"
    lines[number - 1] = json.dumps(bad)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    loaded = read_session(finished_session)
    assert loaded.torn_lines == 0
    [malformed] = loaded.malformed
    assert malformed.startswith(f"line {number}: step_finished: status:")
    assert loaded.incomplete and loaded.finished is not None  # finished, but a step's record is missing
    assert any("malformed event skipped" in p for p in loaded.problems)
    report = render_report(finished_session)
    assert "Incomplete record" in report and f"line {number}" in report
    shown = CliRunner().invoke(app, ["sessions", "show", str(finished_session)])
    assert "incomplete record" in shown.output and "malformed event skipped" in shown.output
    listed = CliRunner().invoke(app, ["sessions", "list", "--sessions-dir", str(finished_session.parent)])
    assert "(incomplete)" in listed.output


def test_parse_event_tells_unknown_from_malformed() -> None:
    assert parse_event({"type": "from_the_future", "x": 1}) is None
    assert parse_event({"no_type": True}) is None
    with pytest.raises(MalformedEvent) as caught:
        parse_event({"type": "output", "step_id": "s1", "host": "h"})  # text is missing
    assert caught.value.kind == "output" and "text" in caught.value.detail
    ok = parse_event({"type": "note_added", "text": "hi"})
    assert ok is not None and ok.type == "note_added"


# -- the forced cancel is public ---------------------------------------------------------------------
def test_force_cancelled_is_public_and_needs_two_cancels() -> None:
    engine = compose_runner(Playbook(name="p", steps=[]))
    assert not engine.cancelled and not engine.force_cancelled
    engine.cancel()
    assert engine.cancelled and not engine.force_cancelled
    engine.cancel()
    assert engine.force_cancelled
