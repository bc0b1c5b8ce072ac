"""Ctrl-C on a real `python -m orchestrator run`: exit 130, no child left, `always:` ran, a valid log."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from tests.core.conftest import marker_pids, subprocess_env, wait_for_pids
from tests.waiting import wait_until


def start_run(tmp_path: Path, marker: str, inventory: Path, *extra: str) -> subprocess.Popen[str]:
    (tmp_path / "pb.yaml").write_text(f"""name: sigint
hosts: localhost
steps:
  - name: quick
    shell: echo quick
  - name: long
    shell: "sleep {marker} & sleep {marker}; echo never"
  - name: after
    shell: "touch {tmp_path}/after"
always:
  - name: cleanup
    shell: "touch {tmp_path}/cleaned"
""", encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "pb.yaml", "-i", str(inventory), "--sessions-dir", "sessions",
         *extra],
        cwd=tmp_path, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert wait_until(lambda: len(marker_pids(marker)) >= 2, 20), "the long step's two sleeps never both ran"
    return proc


def load_events(tmp_path: Path) -> list[dict]:
    [session] = list((tmp_path / "sessions").iterdir())
    lines = (session / "events.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]  # every line must be valid JSON


def test_sigint_mid_step(tmp_path: Path, marker: str, local_inventory: Path) -> None:
    proc = start_run(tmp_path, marker, local_inventory)
    assert len(marker_pids(marker)) >= 2
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err
    assert wait_for_pids(marker, present=False, timeout=3) == [], "a child of the cancelled step survived"
    events = load_events(tmp_path)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    finished = {e["step_id"]: e["status"] for e in events if e["type"] == "step_finished"}
    assert finished == {"s1": "ok", "s2": "cancelled", "a1": "ok"}
    assert events[-1]["type"] == "session_finished" and events[-1]["status"] == "cancelled"
    assert (tmp_path / "cleaned").exists() and not (tmp_path / "after").exists()
    assert "cancelled" in out
    [session] = list((tmp_path / "sessions").iterdir())
    assert (session / "report.md").exists()


def test_sigterm_mid_step_with_json(tmp_path: Path, marker: str, local_inventory: Path) -> None:
    proc = start_run(tmp_path, marker, local_inventory, "--json")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert wait_for_pids(marker, present=False, timeout=3) == []
    streamed = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert streamed[-1]["type"] == "session_finished" and streamed[-1]["status"] == "cancelled"
    # What --json printed is the same stream the log holds.
    assert [e["seq"] for e in streamed] == [e["seq"] for e in load_events(tmp_path)]
