"""The session log's durability guarantee (orchestrator/session/log.py): fsync moved off the engine's path must not
weaken what a kill -9 can take, and an fsync that fails must be said."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.session.log import EVENTS_FILE, _BackgroundSync

WRITER = """
import os, signal, sys
from pathlib import Path
from orchestrator.events import StepFinished
from orchestrator.session.log import SessionLog
log = SessionLog(Path(sys.argv[1]))
for i in range(200):
    log.handle(StepFinished(step_id=f"s{i}", name="true", action="shell", status="ok", duration=0.0, results=[]))
print("handed", flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no close(), no atexit: as `kill -9` between two steps
"""


def test_kill_9_loses_no_event_that_was_handed_over(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", WRITER, str(tmp_path)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}, timeout=60)
    assert proc.returncode == -9 and proc.stdout == "handed\n", proc.stderr
    lines = (tmp_path / EVENTS_FILE).read_text().splitlines()
    assert [json.loads(line)["step_id"] for line in lines] == [f"s{i}" for i in range(200)]


def test_a_failed_fsync_is_raised_not_swallowed(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    os.close(fd)  # fsync on it now fails with EBADF, as a failing disk would fail it
    sync = _BackgroundSync(fd)
    sync.request()
    with pytest.raises(OSError, match="fsync of the session log failed"):
        sync.close()


def test_close_waits_for_the_last_fsync(tmp_path: Path) -> None:
    with open(tmp_path / "f", "w") as handle:
        sync = _BackgroundSync(handle.fileno())
        for _ in range(50):
            sync.request()
        sync.close()
        assert sync.done == sync.wanted == 50 and not sync.thread.is_alive()
