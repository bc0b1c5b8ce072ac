"""One flagship run on a class lab (orchestrator/lab/building/class_lab.py: the Qwen3 and the Kimi-K2.5-class labs),
shared by the tests of a file: the lab of this worker built from the package's shipped models, the flagship run once
through the CLI's runner with the session log and reports."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.hypotheses.board import HypothesisBoard
from orchestrator.session.reader import LoadedSession

REPO = Path(__file__).resolve().parents[2]
FLAGSHIP = REPO / "playbooks" / "eagle3.yaml"
READS = "SGLang: which target layers are captured for the draft"
CLASS_STEP = "Which class runs the target, and where it captures the draft's hidden states"


@dataclass
class Run:
    root: Path
    directory: Path
    status: str
    seconds: float
    session: LoadedSession
    board: HypothesisBoard

    def results(self, name: str) -> list[dict[str, Any]]:
        return [r.result for e in self.session.events if getattr(e, "name", "") == name
                for r in getattr(e, "results", [])]

    def states(self) -> dict[str, str]:
        return {hid: e.state for hid, e in self.board.entries.items()}

    def verdict(self) -> str:
        report = (self.directory / "report.md").read_text()
        return report.split("## Verdict", 1)[1].split("\n## ", 1)[0]


def class_lab(target_class: str) -> Path:
    """The class lab of this worker: the package's shipped models, copied (tests/lab/test_class_shipped.py holds
    them to the recipe; tests/lab/test_training_recipe.py trains the recipe at a reduced size)."""
    from orchestrator.lab.building.build import cache_dir
    from orchestrator.lab.building.builder import build_lab

    root = cache_dir() / f"lab-{target_class}-test-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
    build_lab("seed-wiring", root=root, target_class=target_class)
    return root


def flagship_once(root: Path, sessions: Callable[[], Path], *, real_host: bool = True) -> Callable[[], Awaitable[Run]]:
    """``await run()``: the flagship on the lab at ``root``'s seed-wiring scenario, run on the first call only;
    ``real_host``: as a real host looks (no lab-only fixed flags), else as ``orchestrator run`` on the lab does (the
    lab's simulated engine change verifies a root cause no flag can fix)."""
    from orchestrator.lab.building.inventory import lab_inventory
    from orchestrator.playbook.loader import load_playbook
    from orchestrator.session.reader import read_session
    from orchestrator.session.recording import build_runner, run_with_signals, write_reports

    runs: list[Run] = []

    async def run() -> Run:
        if not runs:
            inventory = lab_inventory("seed-wiring", root=root, real_host=real_host)
            playbook = load_playbook(FLAGSHIP, extra_names=inventory.host_vars("lab"))
            engine, directory = build_runner(playbook, inventory, sinks=[], sessions_dir=sessions())
            started = time.monotonic()
            outcome = await run_with_signals(engine)
            seconds = round(time.monotonic() - started, 1)
            write_reports(directory)
            session = read_session(directory)
            runs.append(Run(root, directory, outcome.status, seconds, session,
                            HypothesisBoard.from_events(session.events)))
        return runs[0]

    return run
