"""Fixtures for the server tests: a local inventory whose python runs the lab server, the lab's models
(built once, cached), a playbook runner, and a process-table scan by environment marker."""

from __future__ import annotations

import os
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.inventory import Inventory
from tests import realparts

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    return path


@pytest.fixture
def marker() -> str:
    """A value put in every test server's environment, so the process table can be searched for them."""
    return f"orch-test-{uuid.uuid4().hex[:12]}"


def make_inventory(state_dir: Path, **host_vars: Any) -> Inventory:
    host = {"transport": "local", "python": sys.executable, "state_dir": str(state_dir),
            "env": {"PYTHONPATH": str(REPO)}, "vars": {"engine": "lab", **host_vars}}
    return Inventory.model_validate({"hosts": {"localhost": host}, "default_hosts": "localhost"})


@pytest.fixture
def inventory(state_dir: Path) -> Inventory:
    return make_inventory(state_dir)


@pytest.fixture(scope="session")
def lab_models() -> dict[str, str]:
    """The lab's tiny target and its EAGLE-3 draft trained on the embedding-first wiring: the test lab's (the shipped
    models, installed once per run under the build's lock; tests/lab/conftest.py builds the same directory)."""
    override = os.environ.get("ORCH_TEST_LAB_TARGET"), os.environ.get("ORCH_TEST_LAB_DRAFT")
    if all(override):  # models built elsewhere (a CI cache, a developer's lab dir)
        return {"target": str(override[0]), "draft": str(override[1])}
    realparts.importorskip("torch")
    from orchestrator.lab.building.builder import build_lab
    from tests.labdir import test_lab_root

    lab = build_lab("seed-wiring", root=test_lab_root())
    return {"target": str(lab.target), "draft": str(lab.draft)}


@pytest.fixture
def lab_inventory(state_dir: Path, lab_models: dict[str, str]) -> Inventory:
    return make_inventory(state_dir, **lab_models)


@dataclass
class Ran:
    status: str
    directory: Path
    events: list[dict[str, Any]]
    engine: Any

    def step(self, step_id: str) -> dict[str, Any]:
        return next(e for e in self.events if e["type"] == "step_finished" and e["step_id"] == step_id)

    def result(self, step_id: str, host: str = "localhost") -> dict[str, Any]:
        return next(r for r in self.step(step_id)["results"] if r["host"] == host)

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]


def run_playbook(text: str, inventory: Inventory, sessions: Path, sinks: list[Any] | None = None) -> Ran:
    import json

    from orchestrator.playbook.loader import load_playbook_text
    from orchestrator.session.recording import build_runner, run_session

    names = {name for host in inventory.hosts for name in inventory.host_vars(host)}
    playbook = load_playbook_text(text, extra_names=names)
    engine, directory = build_runner(playbook, inventory, sinks=list(sinks or []), sessions_dir=sessions)
    run = run_session(engine, directory)
    events = [json.loads(line) for line in (directory / "events.jsonl").read_text().splitlines() if line.strip()]
    return Ran(status=run.outcome.status, directory=directory, events=events, engine=engine)


def processes_with(marker: str) -> list[int]:
    """PIDs whose environment holds ``marker`` (the test servers'), from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0
