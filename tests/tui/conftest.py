"""Fixtures for the TUI tests: small localhost playbooks run by a real engine, and an app around it."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.inventory import Inventory
from orchestrator.playbook.loader import load_playbook
from orchestrator.session.reader import read_session
from orchestrator.session.recording import build_runner
from orchestrator.tui.app import OrchestratorApp
from orchestrator.tui.control import Controller
from orchestrator.tui.messages import TuiSink

SMALL = """
name: tui small
hosts: localhost
hypotheses:
  - id: answer_ok
    title: The answer is forty-two
    prediction: the set step computes 42
  - id: flags_override
    title: A speculative flag is silently overridden
steps:
  - name: compute the answer
    set: {answer: 42}
    evidence:
      answer_ok: {confirm_if: "answer == 42", because: "answer is {{ answer }}"}
  - name: say hello
    shell: {command: "echo hello; echo world"}
    register: hello
  - name: count to three
    shell: {command: "for i in 1 2 3; do echo line $i; done"}
always:
  - name: tidy up
    shell: {command: "echo bye"}
"""


def write_playbook(tmp_path: Path, text: str = SMALL, name: str = "small.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


class Live:
    """A live session app plus the handles a test needs."""

    def __init__(self, tmp_path: Path, text: str = SMALL, *, start_mode: str = "paused",
                 sink: TuiSink | None = None) -> None:
        pb = load_playbook(write_playbook(tmp_path, text))
        self.sink = sink if sink is not None else TuiSink()
        self.engine, self.directory = build_runner(pb, Inventory(), sinks=[self.sink],
                                                   sessions_dir=tmp_path / "sessions")
        self.controller = Controller(self.engine, start_mode=start_mode)  # type: ignore[arg-type]
        self.app = OrchestratorApp(controller=self.controller, sink=self.sink, session_dir=self.directory)

    def events(self) -> list[Any]:
        return read_session(self.directory).events

    def logged(self, kind: str) -> list[Any]:
        return [e for e in self.events() if e.type == kind]


@pytest.fixture
def live(tmp_path: Path) -> Callable[..., Live]:
    def make(text: str = SMALL, **kwargs: Any) -> Live:
        return Live(tmp_path, text, **kwargs)

    return make


async def wait_for(pilot: Any, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Let the app run until ``predicate()`` holds (real engine work takes real time)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await pilot.pause(0.02)
