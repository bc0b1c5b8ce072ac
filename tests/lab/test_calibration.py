"""The lab checks itself: the built lab records a passing calibration for each trained draft, the calibration
samples are the flagship's own, and a draft that does not behave as its scenario needs is caught."""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from orchestrator.lab.building.build import LabPaths, read_state, scenarios, seed_wiring, sglang_wiring
from orchestrator.lab.building.calibrate import (
    CLEAR,
    FlagshipSample,
    calibrate_draft,
    check_draft_test,
    run_draft_test,
)

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_calibration_uses_the_flagships_own_sample_sizes() -> None:
    playbook_vars = YAML(typ="safe").load((REPO / "playbooks" / "eagle3.yaml").read_text())["vars"]
    assert {k: playbook_vars[k] for k in asdict(FlagshipSample())} == asdict(FlagshipSample())


def test_the_built_lab_records_a_clear_calibration_for_each_trained_draft(lab: LabPaths) -> None:
    records = read_state(lab.root)["calibration"]
    assert set(records) == {"seed-wiring", "healthy"}
    for kind, record in records.items():
        last = record["attempts"][-1]
        assert record["passed"] and last["passed"], (kind, last)
        assert {c["scenario"] for c in last["checks"]} >= ({"seed-wiring", "off-by-one"} if kind == "seed-wiring"
                                                           else {"healthy", "topk-override", "eagle-not-eagle3"})
        for check in last["checks"]:
            assert check["passed"] and check["margin"] >= CLEAR, check


def test_the_checks_on_two_cores_give_the_recorded_figures(lab: LabPaths, tmp_path: Path) -> None:
    """calibrate_draft runs the draft test in its own process while it measures the fixes: each experiment at one
    thread, deterministic, so the margins are the ones lab.json records for this CPU (adopted bits or its own). On
    a copy of the lab without the off-by-one copy (its fix check would double the cost)."""
    for part in ("target", "drafts/seed-wiring"):
        shutil.copytree(lab.root / part, tmp_path / part)
    recorded = read_state(lab.root)["calibration"]["seed-wiring"]["attempts"][-1]["checks"]
    checks = calibrate_draft("seed-wiring", tmp_path, scenarios(tmp_path, lab.num_layers))
    assert [(c.scenario, c.kind, c.margin) for c in checks] == [(c["scenario"], c["kind"], c["margin"])
                                                                for c in recorded if c["scenario"] != "off-by-one"]
    assert len(checks) == 2 and all(c.passed for c in checks)


def test_a_draft_that_does_not_prefer_its_own_wiring_fails_calibration(lab: LabPaths) -> None:
    """The seed-wiring draft, checked as if it were the healthy one: its draft test says mismatch, not fine."""
    n = lab.num_layers
    result = run_draft_test(lab.target, lab.root / "drafts" / "seed-wiring", FlagshipSample())
    check = check_draft_test("healthy", result, "fine", sglang_wiring(n), FlagshipSample().wiring_margin)
    assert not check.passed and check.figures["decision"] == "mismatch"
    assert seed_wiring(n) in check.figures["best_tier"] and check.figures["own_tier"] != 1
    assert check_draft_test("seed-wiring", result, "mismatch", seed_wiring(n), FlagshipSample().wiring_margin).passed
