"""Start-up failures are clear errors and leave nothing behind: a bad flag, a server that exits, one that
never becomes ready, a port already taken. Real processes on the local transport; no models needed."""

from __future__ import annotations

import socket
from pathlib import Path

from orchestrator.inventory import Inventory
from tests.servers.conftest import processes_with, run_playbook


def _error(ran, step_id: str = "s1") -> str:
    return ran.step(step_id)["error"] or ""


def test_bad_flag_fails_with_exit_code_and_usage(inventory: Inventory, tmp_path: Path, marker: str) -> None:
    from io import StringIO

    from rich.console import Console

    from orchestrator.console import ConsoleSink
    from orchestrator.session.report import render_report

    screen = StringIO()
    ran = run_playbook(f"""
name: bad flag
steps:
  - server: {{engine: lab, model: /nonexistent, flags: {{no-such-flag: 3}}, env: {{MARK: {marker}}}, ready_timeout: 60}}
    register: srv
""", inventory, tmp_path / "sessions", sinks=[ConsoleSink(Console(file=screen, width=300, highlight=False))])
    assert ran.status == "failed"
    error = _error(ran)
    assert "exited with code 2 during start-up" in error
    assert "unrecognized arguments: --no-such-flag 3" in error
    result = ran.result("s1")["result"]
    assert result["exit_code"] == 2 and "usage:" in result["log_tail"]
    failure = result["failure"]
    assert failure["cause"] == "unknown_flag" and failure["reason"] == "exited" and failure["exit_code"] == 2
    assert failure["error_lines"] == [
        "python -m orchestrator.lab.stand_in.server: error: unrecognized arguments: --no-such-flag 3"]
    # the console shows the cause and the server's own error line, not its usage text
    shown = screen.getvalue()
    assert "cause: unknown flag — the server does not accept a flag (unrecognized arguments: --no-such-flag 3)" \
        in shown
    assert "  python -m orchestrator.lab.stand_in.server: error: unrecognized arguments: --no-such-flag 3" in shown
    assert "usage:" not in shown
    # so does the report: the step's error, and the servers table's state
    report = render_report(ran.directory)
    assert "cause: unknown flag" in report
    assert "failed: exited with code 2 during start-up; unknown flag: the server does not accept a flag" in report
    failed = ran.of_type("server_failed")
    assert [e["type"] for e in ran.of_type("server_started") + failed] == ["server_started", "server_failed"]
    assert processes_with(marker) == []


def test_health_polls_do_not_hide_the_servers_error(inventory: Inventory, tmp_path: Path, marker: str) -> None:
    # A server that answers /health 503 for a while, then dies with a traceback, then logs more polls (the
    # access log of SGLang's readiness poll): the error shown is the traceback's, not the polls.
    script = (
        "import sys, time\n"
        "for i in range(20): print(f'[2026-11-30 10:00:{i:02d}] INFO:     127.0.0.1:{50000 + i} - "
        "\"GET /health HTTP/1.1\" 503 Service Unavailable', file=sys.stderr)\n"
        "print('[2026-11-30 10:00:20 TP0] Scheduler hit an exception: Traceback (most recent call last):\\n'\n"
        "      '  File \"/opt/sglang/srt/speculative/eagle_worker.py\", line 131, in __init__\\n'\n"
        "      '    super().__init__(\\n'\n"
        "      'RuntimeError: Error(s) in loading state_dict for LlamaForCausalLMEagle3\\n', file=sys.stderr)\n"
        "for i in range(20): print(f'[2026-11-30 10:00:{i + 21:02d}] INFO:     127.0.0.1:{50100 + i} - "
        "\"GET /health HTTP/1.1\" 503 Service Unavailable', file=sys.stderr)\n"
        "sys.exit(1)\n")
    (tmp_path / "fake_server.py").write_text(script)
    ran = run_playbook(f"""
name: traceback then polls
steps:
  - server:
      engine: lab
      launcher: [python, {tmp_path / "fake_server.py"}]
      env: {{MARK: {marker}}}
      ready_timeout: 60
    register: srv
""", inventory, tmp_path / "sessions")
    assert ran.status == "failed"
    error = _error(ran)
    assert "cause: draft load error — the draft model could not be loaded (RuntimeError: Error(s) in loading " \
        "state_dict for LlamaForCausalLMEagle3)" in error
    assert 'File "/opt/sglang/srt/speculative/eagle_worker.py", line 131, in __init__' in error
    assert "GET /health" not in error
    assert ran.result("s1")["result"]["failure"]["cause"] == "draft_load"
    assert processes_with(marker) == []


def test_server_exiting_at_startup_reports_log(inventory: Inventory, tmp_path: Path, marker: str) -> None:
    ran = run_playbook(f"""
name: missing model
steps:
  - server: {{engine: lab, model: /nonexistent/model, env: {{MARK: {marker}}}, ready_timeout: 60}}
""", inventory, tmp_path / "sessions")
    assert ran.status == "failed"
    error = _error(ran)
    assert "exited with code 1 during start-up" in error
    assert "/nonexistent/model" in error  # the lab's own message is in the last log lines
    assert processes_with(marker) == []


def test_never_ready_times_out_and_is_killed(inventory: Inventory, tmp_path: Path, marker: str) -> None:
    # A `sleep` pretending to be a server: it never answers /health.
    ran = run_playbook(f"""
name: never ready
steps:
  - server:
      engine: lab
      launcher: [bash, -c, "echo pretending to be a server; exec sleep 300", fake-server]
      env: {{MARK: {marker}}}
      ready_timeout: 2
""", inventory, tmp_path / "sessions")
    assert ran.status == "failed"
    error = _error(ran)
    assert "did not become ready within 2s" in error
    assert "pretending to be a server" in error
    logs = [e["text"] for e in ran.events if e["type"] == "output" and e["stream"] == "server_log"]
    assert any("pretending to be a server" in t for t in logs)  # the log was streamed while waiting
    assert processes_with(marker) == []


def test_port_already_taken(inventory: Inventory, tmp_path: Path, marker: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        ran = run_playbook(f"""
name: port taken
steps:
  - server: {{engine: lab, model: /m, port: {port}, env: {{MARK: {marker}}}}}
""", inventory, tmp_path / "sessions")
    assert ran.status == "failed"
    assert f"port {port} on localhost is already in use" in _error(ran)
    assert ran.of_type("server_started") == []  # nothing was started
    assert processes_with(marker) == []


def test_bad_arguments_are_playbook_errors(inventory: Inventory, tmp_path: Path) -> None:
    import pytest

    from orchestrator.errors import PlaybookErrors
    from orchestrator.playbook.loader import load_playbook_text

    with pytest.raises(PlaybookErrors) as info:
        load_playbook_text("name: x\nsteps:\n  - server: {action: launch, port: 70000}\n", file="pb.yaml")
    message = info.value.message
    assert "pb.yaml:3" in message and "action" in message and "port" in message


def test_flag_name_injection_refused(inventory: Inventory, tmp_path: Path) -> None:
    ran = run_playbook("""
name: injection
steps:
  - server: {engine: lab, model: /m, flags: {"x; touch /tmp/pwned": 1}}
""", inventory, tmp_path / "sessions")
    assert ran.status == "failed"
    assert "is not a flag name" in _error(ran)
    assert ran.of_type("server_started") == []


def test_step_timeout_during_startup_kills_the_server(inventory: Inventory, tmp_path: Path, marker: str) -> None:
    ran = run_playbook(f"""
name: step timeout
steps:
  - server:
      engine: lab
      launcher: [bash, -c, "exec sleep 300", fake-server]
      env: {{MARK: {marker}}}
      ready_timeout: 120
    timeout: 2
  - shell: "true"
    ignore_errors: true
""", inventory, tmp_path / "sessions")
    assert ran.step("s1")["status"] == "timeout"
    failed = ran.of_type("server_failed")
    assert [e["detail"] for e in failed] == ["start-up interrupted"]  # killed by the step, not at session end
    assert processes_with(marker) == []
