"""Fixtures for the core tests: playbooks from text, the engine run in-process, the CLI as a subprocess,
and unique process markers so a test can prove that no child it started survives."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.inventory import Inventory
from orchestrator.playbook.loader import load_playbook
from orchestrator.runner import PlaybookRunner, RunnerOptions, SessionOutcome
from orchestrator.runner.sinks import ListSink
from orchestrator.session.compose import compose_runner
from orchestrator.session.log import SessionLog
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for `python -m orchestrator` in a subprocess: the repo importable, no colour."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update({"NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "200"})
    env.update(extra)
    return env


def run_cli(args: list[str], *, cwd: Path, timeout: float = 60, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd, env=env or subprocess_env(),
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def cli(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run `python -m orchestrator ARGS` in tmp_path (sessions land in tmp_path/sessions)."""

    def call(*args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
        return run_cli(list(args), cwd=tmp_path, timeout=timeout, env=subprocess_env(**env))

    return call


@pytest.fixture
def cli_inproc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., subprocess.CompletedProcess[str]]:
    """The same as ``cli`` but in this process (typer's CliRunner): much faster, same exit codes and streams."""
    from typer.testing import CliRunner

    from orchestrator.cli import app

    monkeypatch.chdir(tmp_path)

    def call(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        result = CliRunner().invoke(app, list(args), env=env or None)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception  # a traceback the user would have seen: fail loudly
        return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)

    return call


@pytest.fixture
def local_inventory(tmp_path: Path) -> Path:
    """An inventory with only localhost, so CLI runs never reach for the (heavy) embedded lab."""
    path = tmp_path / "inventory.yaml"
    path.write_text("hosts: {localhost: {}}\n", encoding="utf-8")
    return path


@pytest.fixture
def write_playbook(tmp_path: Path) -> Callable[[str, str], Path]:
    def write(text: str, name: str = "pb.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


@dataclass
class EngineRun:
    outcome: SessionOutcome
    events: list[Any]
    engine: PlaybookRunner
    session_dir: Path

    def finished(self, step_id: str) -> Any:
        found = [e for e in self.events if e.type == "step_finished" and e.step_id == step_id]
        assert found, f"no step_finished for {step_id}: {[e.type for e in self.events]}"
        return found[-1]

    def stdout(self, step_id: str, host: str = "localhost") -> str:
        return "".join(e.text for e in self.events
                       if e.type == "output" and e.step_id == step_id and e.host == host and e.stream == "stdout")

    def of_type(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]


def make_runner(path: Path, session_dir: Path, *, extra_vars: dict[str, Any] | None = None,
                inventory: Inventory | None = None, extra_names: tuple[str, ...] = ()) -> tuple[PlaybookRunner, ListSink]:
    """An engine with a SessionLog in ``session_dir`` and a ListSink; ``extra_names`` are inventory vars."""
    playbook = load_playbook(path, extra_names=[*(extra_vars or {}), *extra_names])
    sink = ListSink()
    session_dir.mkdir(parents=True, exist_ok=True)
    engine = compose_runner(playbook, inventory=inventory or Inventory(), sinks=[SessionLog(session_dir), sink],
                    # unique: the remote workdir (~/.orchestrator/sessions/<id>) is shared by concurrent test runs
                    options=RunnerOptions(extra_vars=extra_vars or {},
                                          session_id=f"{session_dir.name}-{uuid.uuid4().hex[:8]}",
                                          session_dir=session_dir))
    return engine, sink


@pytest.fixture
def run_playbook(tmp_path: Path, write_playbook: Callable[[str, str], Path]) -> Callable[..., Any]:
    """``await run_playbook(yaml_text)`` -> EngineRun (events in memory and a real session log on disk)."""
    counter = iter(range(1000))

    async def run(text: str, **kwargs: Any) -> EngineRun:
        n = next(counter)
        path = write_playbook(text, f"pb{n}.yaml")
        session_dir = tmp_path / f"session{n}"
        engine, sink = make_runner(path, session_dir, **kwargs)
        outcome = await engine.run()
        return EngineRun(outcome=outcome, events=sink.events, engine=engine, session_dir=session_dir)

    return run


def marker_pids(marker: str) -> list[int]:
    """Pids whose command line contains ``marker`` (never this test process)."""
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split() if int(p) != os.getpid()]


def wait_for_pids(marker: str, *, present: bool, timeout: float = 10.0) -> list[int]:
    """The marker's pids once some are there (``present``) or none are (not ``present``), or when time is up."""
    wait_until(lambda: bool(marker_pids(marker)) == present, timeout)
    return marker_pids(marker)


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique sleep duration: `sleep {marker}` puts it in argv, so `pgrep -f` finds exactly our children.

    Whatever a failed test leaves behind is killed afterwards, by pid (only processes carrying the marker).
    """
    value = f"3000.{random.randrange(10**8, 10**9)}"
    yield value
    for pid in marker_pids(value):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
