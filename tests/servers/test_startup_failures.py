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
    ran = run_playbook(f"""
name: bad flag
steps:
  - server: {{engine: lab, model: /nonexistent, flags: {{no-such-flag: 3}}, env: {{MARK: {marker}}}, ready_timeout: 60}}
    register: srv
""", inventory, tmp_path / "sessions")
    assert ran.status == "failed"
    error = _error(ran)
    assert "exited with code 2 during start-up" in error
    assert "unrecognized arguments: --no-such-flag 3" in error
    result = ran.result("s1")["result"]
    assert result["exit_code"] == 2 and "usage:" in result["log_tail"]
    assert [e["type"] for e in ran.of_type("server_started") + ran.of_type("server_failed")] == \
        ["server_started", "server_failed"]
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
