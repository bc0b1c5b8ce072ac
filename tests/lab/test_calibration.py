"""The lab checks itself: the built lab records a passing calibration for each trained draft, the calibration
samples are the flagship's own, and a draft that does not behave as its scenario needs is caught."""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from orchestrator.lab.build import LabPaths, read_state, scenarios, seed_wiring
from orchestrator.lab.calibrate import CLEAR, FlagshipSample, calibrate_draft

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


def test_a_draft_that_does_not_prefer_its_own_wiring_fails_calibration(lab: LabPaths, tmp_path: Path) -> None:
    """Swap the seed-wiring draft in as the 'healthy' one: the healthy checks must fail (mismatch, not fine)."""
    root = tmp_path / "lab"
    (root / "drafts").mkdir(parents=True)
    (root / "target").symlink_to(lab.target, target_is_directory=True)
    shutil.copytree(lab.root / "drafts" / "seed-wiring", root / "drafts" / "healthy")
    checks = calibrate_draft("healthy", root, scenarios(root, lab.num_layers))
    by = {(c.scenario, c.kind): c for c in checks}
    dt = by[("healthy", "draft_test")]
    assert not dt.passed and dt.figures["decision"] == "mismatch"
    assert dt.figures["best_tier"] and seed_wiring(lab.num_layers) in dt.figures["best_tier"]
