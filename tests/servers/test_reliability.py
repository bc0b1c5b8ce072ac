"""Nothing is left behind: the orchestrator SIGKILLed with 3 servers running -> `cleanup` leaves 0 orphans;
Ctrl-C (SIGINT) during a sweep -> every server stopped within 5 s. Real `python -m orchestrator run`
subprocesses, real lab servers, checked in the process table (/proc) and on the ports."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.runner.shutdown import FINALIZER_GRACE
from tests.servers.conftest import REPO, listening, processes_with
from tests.waiting import wait_until

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def _inventory_file(tmp_path: Path, state_dir: Path, lab_models: dict[str, str]) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(json.dumps({"hosts": {"localhost": {
        "transport": "local", "python": sys.executable, "state_dir": str(state_dir),
        "env": {"PYTHONPATH": str(REPO)}, "vars": {"engine": "lab", **lab_models}}},
        "default_hosts": "localhost"}))
    return path


def _start_run(playbook: Path, inventory: Path, sessions: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(playbook), "-i", str(inventory),
                             "--sessions-dir", str(sessions)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, cwd=str(REPO))


def _events(sessions: Path) -> list[dict]:
    logs = list(sessions.glob("*/events.jsonl"))
    if not logs:
        return []
    events = []
    for line in logs[0].read_text().splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue  # a torn last line while the writer is mid-write
    return events


def _wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen) -> None:  # noqa: ANN001
    if not wait_until(lambda: predicate() or proc.poll() is not None, timeout, interval=0.2):
        raise AssertionError(f"timed out waiting for {what}")
    if not predicate():
        raise AssertionError(f"orchestrator exited ({proc.returncode}) before {what}: {proc.stderr.read()[-2000:]!r}")


def _benchmarked(state_dir: Path) -> bool:
    """A bench request was served: the lab server's access log (uvicorn's shape) has a POST /generate line."""
    return any('"POST /generate ' in log.read_text(errors="replace") for log in state_dir.glob("sessions/*/logs/*.log"))


def test_sigkill_then_cleanup_leaves_no_orphans(tmp_path: Path, state_dir: Path, lab_models: dict[str, str],
                                                marker: str) -> None:
    from typer.testing import CliRunner

    inventory = _inventory_file(tmp_path, state_dir, lab_models)
    playbook = tmp_path / "three.yaml"
    playbook.write_text(f"""
name: three servers
steps:
  - server: {{name: one, model: "{{{{ target }}}}", env: {{MARK: {marker}}}}}
  - server: {{name: two, model: "{{{{ target }}}}", env: {{MARK: {marker}}}}}
  - server: {{name: three, model: "{{{{ target }}}}", env: {{MARK: {marker}}}}}
  - shell: {{argv: [sleep, "120"], env: {{MARK: {marker[::-1]}}}}}
""")
    sessions = tmp_path / "sessions"
    proc = _start_run(playbook, inventory, sessions)
    try:
        # the third server's ready event comes before the `sleep` step has started (and written its pidfile):
        # the kill waits for both, as a crash mid-step would find them
        _wait_for(lambda: len([e for e in _events(sessions) if e["type"] == "server_ready"]) == 3
                  and bool(list(state_dir.glob("sessions/*/procs/run-*.json"))), 240,
                  "3 servers ready and the sleep step running", proc)
        ports = [e["port"] for e in _events(sessions) if e["type"] == "server_ready"]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert len(processes_with(marker)) >= 3 and all(listening(p) for p in ports)  # orphans, as after a crash

        import typer

        from orchestrator.cli.cleanup import register

        app = typer.Typer()
        register(app)
        app.command("noop")(lambda: None)  # a second command keeps `cleanup` a sub-command
        dry = CliRunner().invoke(app, ["cleanup", "localhost", "-i", str(inventory), "--dry-run", "--json"])
        assert dry.exit_code == 0, dry.output
        planned = json.loads(dry.output)
        servers = sorted(r["name"] for r in planned if r["name"].startswith("server-"))
        commands = [r for r in planned if r["name"].startswith("run-")]
        warm = [r for r in planned if r["name"].startswith("warm-")]
        assert servers == ["server-one", "server-three", "server-two"]
        assert len(warm) == 1  # the lab servers' warm interpreter (servers/warm.py): a process of ours like them
        assert len(planned) == len(servers) + len(commands) + len(warm)
        assert len(commands) == 1  # the `sleep 120` step: plain commands are recorded too
        assert {r["action"] for r in planned} == {"would stop"} and {r["owner"] for r in planned} == {"gone"}
        assert len(processes_with(marker)) >= 3  # a dry run changes nothing

        started = time.monotonic()
        done = CliRunner().invoke(app, ["cleanup", "localhost", "-i", str(inventory), "--json"])
        took = time.monotonic() - started
        assert done.exit_code == 0, done.output
        rows = json.loads(done.output)
        server_rows = [r for r in rows if r["name"].startswith("server-")]
        assert {r["action"] for r in server_rows} == {"stopped"} and {r["port_free"] for r in server_rows} == {True}
        assert [r["action"] for r in rows if r["name"].startswith("warm-")] == ["stopped"]
        # commands that ended while we were dead leave a stale pidfile, which cleanup removes
        assert {r["action"] for r in rows if r not in server_rows} <= {"stopped", "removed stale pidfile"}
        assert processes_with(marker) == [], "orphaned server processes left"
        assert processes_with(marker[::-1]) == [], "the running shell step's process was left"
        assert not any(listening(p) for p in ports)
        assert list(state_dir.glob("sessions/*/procs/*.json")) == []  # pidfiles gone: a second run finds nothing
        again = CliRunner().invoke(app, ["cleanup", "localhost", "-i", str(inventory), "--json"])
        assert json.loads(again.output) == []
        print(f"\ncleanup: {len(rows)} servers stopped in {took:.2f}s, 0 orphan processes, ports {ports} free")
    finally:
        for pid in processes_with(marker) + processes_with(f"{marker[::-1]}"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_sigint_during_sweep_stops_every_server_before_it_exits(tmp_path: Path, state_dir: Path,
                                                                lab_models: dict[str, str], marker: str) -> None:
    """The time it takes is printed (bench figures in RELIABILITY.md); the bound asserted is the engine's own
    promise after an outside cancel (``FINALIZER_GRACE`` per finalizer), which holds on a loaded machine: the
    servers' TERM -> KILL takes at most their 5 s grace, a busy CPU only adds to the moment the KILL lands."""
    inventory = _inventory_file(tmp_path, state_dir, lab_models)
    playbook = tmp_path / "sweep.yaml"
    playbook.write_text(f"""
name: interrupted sweep
steps:
  - sweep:
      model: "{{{{ target }}}}"
      env: {{MARK: {marker}}}
      flags: {{speculative-algorithm: EAGLE3, speculative-draft-model-path: "{{{{ draft }}}}", speculative-eagle-topk: 1}}
      configs:
        - {{speculative-num-steps: 3, speculative-num-draft-tokens: 4}}
        - {{speculative-num-steps: 5, speculative-num-draft-tokens: 6}}
        - {{speculative-num-steps: 7, speculative-num-draft-tokens: 8}}
      bench: {{n: 50, max_new_tokens: 64}}
""")
    sessions = tmp_path / "sessions"
    proc = _start_run(playbook, inventory, sessions)
    try:
        # Interrupt while a server is up and being benchmarked.
        _wait_for(lambda: any(e["type"] == "server_ready" for e in _events(sessions)), 240, "a server ready", proc)
        _wait_for(lambda: _benchmarked(state_dir), 120, "the first bench request", proc)
        assert processes_with(marker)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        gone = wait_until(lambda: not processes_with(marker), FINALIZER_GRACE)
        stopped_after = time.monotonic() - sent
        code = proc.wait(timeout=30)
        assert gone and processes_with(marker) == [], f"servers still running {stopped_after:.1f}s after Ctrl-C"
        assert code == 130
        events = _events(sessions)
        assert events[-1]["type"] == "session_finished" and events[-1]["status"] == "cancelled"
        started = {e["server_id"] for e in events if e["type"] == "server_started"}
        stopped = {e["server_id"] for e in events if e["type"] in ("server_stopped", "server_failed")}
        assert started and started == stopped
        assert list(state_dir.glob("sessions/*/procs/*.json")) == []
        print(f"\nCtrl-C during sweep: every server stopped {stopped_after:.2f}s after SIGINT")
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in processes_with(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
