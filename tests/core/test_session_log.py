"""The session on disk: events.jsonl read back (a torn last line after kill -9 is tolerated), large output
in outputs/ in full and inline only in part, and `sessions list|show` / `report` in-process and as a subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.events import SCHEMA_VERSION
from orchestrator.session.log import INLINE_OUTPUT, SessionLog, new_session_dir
from orchestrator.session.reader import find_session, list_sessions, read_session
from orchestrator.session.report import render_report

PLAYBOOK = """name: log test
hosts: localhost
steps:
  - {name: hello, shell: "echo hello; echo warn >&2"}
  - {name: fails, shell: "echo broken; exit 2", ignore_errors: true}
always:
  - {name: bye, shell: echo bye}
"""


@pytest.fixture
async def session(run_playbook) -> Path:
    run = await run_playbook(PLAYBOOK)
    assert run.outcome.status == "ok"
    return run.session_dir


async def test_log_matches_what_the_sinks_saw(run_playbook) -> None:
    run = await run_playbook(PLAYBOOK)
    lines = (run.session_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    logged = [json.loads(line) for line in lines]
    assert [e["seq"] for e in logged] == [e.seq for e in run.events] == list(range(1, len(lines) + 1))
    assert all(e["schema_version"] == SCHEMA_VERSION for e in logged)
    assert logged[0]["type"] == "session_started" and logged[-1]["type"] == "session_finished"
    assert (run.session_dir / "outputs" / "s1.localhost.log").read_text() in ("hello\nwarn\n", "warn\nhello\n")


def test_torn_last_line_is_tolerated(session: Path) -> None:
    path = session / "events.jsonl"
    complete = path.read_text(encoding="utf-8").splitlines()
    data = path.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(data[: last + (len(data) - last) // 2])  # kill -9 in the middle of the last write
    loaded = read_session(session)
    assert loaded.torn_lines == 1
    assert len(loaded.events) == len(complete) - 1
    assert [e.seq for e in loaded.events] == list(range(1, len(complete)))
    assert loaded.finished is None  # session_finished was the torn line
    report = render_report(session)
    assert "did not finish" in report and "hello" in report
    shown = CliRunner().invoke(app, ["sessions", "show", str(session)])
    assert shown.exit_code == 0, shown.output
    assert "incomplete" in shown.output and "1 unreadable line" in shown.output


def test_unknown_event_types_are_skipped_not_torn(session: Path) -> None:
    path = session / "events.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    future = json.dumps({"schema_version": 99, "seq": 999, "ts": 0, "type": "from_the_future", "x": 1})
    path.write_text("\n".join([lines[0], future, *lines[1:]]) + "\n", encoding="utf-8")
    loaded = read_session(session)
    assert loaded.torn_lines == 0 and len(loaded.events) == len(lines) and len(loaded.raw) == len(lines) + 1


async def test_large_output_lands_in_outputs_and_is_truncated_inline(run_playbook) -> None:
    total = 200_000
    run = await run_playbook(
        "name: big\nhosts: localhost\nsteps:\n"
        f"  - {{shell: \"python3 -c \\\"import sys; sys.stdout.write(''.join('%07d|' % i for i in range({total // 8})))\\\"\","
        " register: big}\n"
    )
    expected = "".join(f"{i:07d}|" for i in range(total // 8))
    assert run.engine.vars.shared["big"]["stdout"] == expected  # the registered value is whole
    assert (run.session_dir / "outputs" / "s1.localhost.log").read_text() == expected
    log = run.session_dir / "events.jsonl"
    inline = "".join(e["text"] for e in map(json.loads, log.read_text().splitlines()) if e["type"] == "output")
    assert expected.startswith(inline.split("\n[output continues")[0])
    assert "[output continues in outputs/s1.localhost.log]" in inline
    assert INLINE_OUTPUT <= len(inline) < INLINE_OUTPUT + 200
    assert log.stat().st_size < 3 * INLINE_OUTPUT + 20_000  # the result does not repeat the output in full
    loaded = read_session(run.session_dir)
    assert loaded.of_type("step_finished")[0].results[0].result["rc"] == 0


def test_session_log_appends_and_new_dirs_are_unique(tmp_path: Path) -> None:
    first = new_session_dir(tmp_path, "Same Name!")
    second = new_session_dir(tmp_path, "Same Name!")
    assert first != second and first.name.endswith("-same-name") and second.name.endswith("-2")
    assert (first / "outputs").is_dir()
    log = SessionLog(first)
    log.close()
    log.close()  # idempotent


def test_sessions_list_show_report_in_process(session: Path) -> None:
    root = session.parent
    runner = CliRunner()
    listed = runner.invoke(app, ["sessions", "list", "--sessions-dir", str(root)])
    assert listed.exit_code == 0 and session.name in listed.output and "ok" in listed.output
    assert list_sessions(root) == [session] and find_session("last", root) == session
    assert find_session(session.name[:8], root) == session
    shown = runner.invoke(app, ["sessions", "show", "last", "--sessions-dir", str(root), "--output"])
    assert shown.exit_code == 0, shown.output
    for text in ("hello", "fails", "broken", "bye", "■ ok"):
        assert text in shown.output
    report = runner.invoke(app, ["report", session.name, "--sessions-dir", str(root)])
    assert report.exit_code == 0, report.output
    md = (session / "report.md").read_text()
    assert "# Postmortem: log test" in md and "echo broken; exit 2" in md and "failed (ignored)" in md
    html = runner.invoke(app, ["report", "last", "-f", "html", "--stdout", "--sessions-dir", str(root)])
    assert html.exit_code == 0 and "<html" in html.output.lower()
    missing = runner.invoke(app, ["sessions", "show", "nope", "--sessions-dir", str(root)])
    assert missing.exit_code == 2 and "no session matches" in missing.output
    bad_format = runner.invoke(app, ["report", "last", "-f", "pdf", "--sessions-dir", str(root)])
    assert bad_format.exit_code == 2


def test_sessions_and_report_as_subprocess(cli, session: Path) -> None:
    root = str(session.parent)
    listed = cli("sessions", "list", "--sessions-dir", root)
    assert listed.returncode == 0 and session.name in listed.stdout
    report = cli("report", "last", "--stdout", "--sessions-dir", root)
    assert report.returncode == 0 and "# Postmortem: log test" in report.stdout
    empty = CliRunner().invoke(app, ["sessions", "list", "--sessions-dir", str(session.parent / "none")])
    assert empty.exit_code == 0 and "no sessions" in empty.output


def test_a_big_structured_result_is_kept_whole_beside_the_log(tmp_path: Path) -> None:
    """A result whose rows of data pass the inline cap (a tuner's rows at every concurrency): the log line keeps
    their head, the whole result goes to outputs/ and read_session gives it back whole; output text is not copied
    (it is in outputs/<step>.<host>.log already)."""
    from orchestrator.events import HostOutcome, StepFinished

    directory = new_session_dir(tmp_path, "big result")
    rows = [{"k": i, "label": f"k={i}", "ci": [i * 0.5, i * 1.5], "note": "x" * 200} for i in range(1000)]
    text = "y" * (2 * INLINE_OUTPUT)
    log = SessionLog(directory)
    log.handle(StepFinished(seq=1, step_id="s1", name="tune", action="tune", status="ok", duration=1.0,
                            results=[HostOutcome(host="lab", status="ok", result={"rows": rows, "n": 3})]))
    log.handle(StepFinished(seq=2, step_id="s2", name="chatty", action="shell", status="ok", duration=1.0,
                            results=[HostOutcome(host="lab", status="ok",
                                                 result={"stdout": text, "stdout_lines": [text[:100]] * 2000})]))
    log.close()
    logged = [json.loads(line) for line in (directory / "events.jsonl").read_text().splitlines()]
    inline = logged[0]["results"][0]["result"]
    assert len(inline["rows"]) < len(rows) and "more items in outputs/" in inline["rows"][-1]
    assert inline["full_result"] == "outputs/s1.lab.result.json"
    loaded = read_session(directory)
    assert loaded.of_type("step_finished")[0].results[0].result == {"rows": rows, "n": 3}
    assert "full_result" not in logged[1]["results"][0]["result"]
    assert not (directory / "outputs" / "s2.lab.result.json").exists()
