"""The diagnostic-power suite: the flagship playbook, end to end against every lab scenario, at its own default
sample sizes (the ones the lab calibrates for), must confirm the planted fault and no other (and, on the healthy lab,
no fault at all, with `wiring` refuted) — and the report must name the cause and show its intervals. The check is
tests/lab/planted_fault.py's; seed-wiring's run is command 1's own, made once in tests/lab/test_terminal_hangup.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.lab.building.build import SCENARIO_NAMES, LabPaths
from orchestrator.lab.building.inventory import lab_inventory
from orchestrator.playbook.loader import load_playbook
from orchestrator.session.recording import build_runner, run_with_signals, write_reports
from tests.lab.planted_fault import MUST_REFUTE, assert_names_the_planted_fault

REPO = Path(__file__).resolve().parents[2]
FLAGSHIP = REPO / "playbooks" / "eagle3.yaml"
#: scenarios whose flagship run a test elsewhere makes (and checks with assert_names_the_planted_fault), so that CI
#: runs it once: command 1's own session, in tests/lab/test_terminal_hangup.py
ELSEWHERE = {"seed-wiring": "tests/lab/test_terminal_hangup.py"}
BENCH_ONLY = {"own-embedding", "attention-heads", "rope-theta", "tied-head",
              "eps-config", "no-d2t", "norm-output", "vocab-undeclared",
              "hidden-size", "bf16-extra-keys", "residual-norm", "compiled-prefix", "model-prefix", "short-context"}  # tied-head: test_field_reading_flagship.py


async def _run(scenario: str, lab: LabPaths, sessions: Path) -> tuple[Path, str]:
    inventory = lab_inventory(scenario, root=lab.root)
    playbook = load_playbook(FLAGSHIP, extra_names=inventory.host_vars("lab"))
    engine, directory = build_runner(playbook, inventory, sinks=[], sessions_dir=sessions)
    outcome = await run_with_signals(engine)
    write_reports(directory)
    return directory, outcome.status


@pytest.mark.lab
@pytest.mark.slow
@pytest.mark.parametrize("scenario", [s for s in MUST_REFUTE if s not in ELSEWHERE])
async def test_flagship_names_the_planted_fault(scenario: str, lab: LabPaths, tmp_path: Path) -> None:
    assert set(MUST_REFUTE) | BENCH_ONLY == set(SCENARIO_NAMES)
    assert all("assert_names_the_planted_fault" in (REPO / test).read_text() for test in ELSEWHERE.values())
    directory, status = await _run(scenario, lab, tmp_path / "sessions")
    assert status == "ok"
    assert_names_the_planted_fault(scenario, directory, lab)
