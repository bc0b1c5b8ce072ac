"""A real terminal: the TUI in tmux (80x24) on a localhost playbook, keys sent, the pane captured, a clean
quit, and no process left behind."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import realparts
from tests.tui.conftest import write_playbook
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _tmux_installed() -> None:
    realparts.require(shutil.which("tmux"), "tmux is not installed")


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=False).stdout


def _wait_screen(session: str, needle: str, timeout: float = 20.0) -> str:
    screens = [""]

    def shown() -> bool:
        screens.append(_tmux("capture-pane", "-p", "-t", session))
        return needle in screens[-1]

    if wait_until(shown, timeout, interval=0.1):
        return screens[-1]
    raise AssertionError(f"{needle!r} never appeared; screen:\n{screens[-1]}")


def test_tui_in_a_real_terminal(tmp_path: Path) -> None:
    playbook = write_playbook(tmp_path)
    session = f"orch-tui-{tmp_path.name}"[:40]
    marker = tmp_path / "exit-code"
    command = (f"cd {REPO} && {sys.executable} -m orchestrator.cli.tui {playbook} --host localhost "
               f"--sessions-dir {tmp_path / 'sessions'}; echo $? > {marker}")
    _tmux("new-session", "-d", "-s", session, "-x", "80", "-y", "24", command)
    try:
        _wait_screen(session, "paused before s1")
        screen = _wait_screen(session, "answer_ok")
        assert "Steps" in screen and "s3" in screen
        _tmux("send-keys", "-t", session, "r")
        _wait_screen(session, "playbook done")
        _wait_screen(session, "confirmed")
        _tmux("send-keys", "-t", session, "q")
        # the shell creates the file before `echo` writes the code into it: wait for the code, not the file
        assert wait_until(lambda: marker.exists() and marker.read_text().strip(), 20, interval=0.1), \
            "the TUI never exited"
        assert marker.read_text().strip() == "0"
    finally:
        _tmux("kill-session", "-t", session)
    sessions = list((tmp_path / "sessions").iterdir())
    assert len(sessions) == 1 and (sessions[0] / "report.md").exists()
    leftovers = subprocess.run(["pgrep", "-f", str(playbook)], capture_output=True, text=True).stdout.split()
    assert leftovers == []
