"""The calibration loop's escalation, with its two expensive steps (train + check a draft, retrain the target)
replaced by cheap ones that answer from the target seed: retraining the draft first, then the target with the next
seed and every draft on it, bounded, every rejected target recorded in lab.json. (The real steps run in every
lab build: tests/lab/test_calibration.py; bench/lab_seeds.py builds labs whose first target is rejected.)"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import OrchestratorError
from orchestrator.lab.building.build import read_state, write_state
from orchestrator.lab.building.calibrate import (
    DRAFT_ATTEMPTS,
    TARGET_ATTEMPTS,
    TARGET_SEED_STRIDE,
    CalibrationFailed,
    CalibrationSteps,
    FlagshipSample,
    calibrate_lab,
    draft_identity,
)


def _model(path: Path, **recipe: Any) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "lab_recipe.json").write_text(json.dumps(recipe))
    (path / ".complete").write_text("ok\n")


def _lab(root: Path, drafts: tuple[str, ...] = ("seed-wiring", "healthy", "off-by-one")) -> dict[str, Any]:
    _model(root / "target", seed=0)
    for kind in drafts:
        _model(root / "drafts" / kind, seed=0)
    state: dict[str, Any] = {"format": 1, "target_seed": 0}
    write_state(root, state)
    return state


class FakeSteps:
    """Draft ``kind`` is clear once the target seed reaches ``clear_from[kind]``."""

    def __init__(self, clear_from: dict[str, int]) -> None:
        self.clear_from = clear_from
        self.calls: list[tuple[Any, ...]] = []

    def target_seed(self, base: Path) -> int:
        return int(json.loads((base / "target" / "lab_recipe.json").read_text())["seed"])

    def calibrate_draft(self, base: Path, kind: str, report: Any) -> dict[str, Any]:
        seed = self.target_seed(base)
        self.calls.append(("draft", kind, seed))
        passed = seed >= self.clear_from[kind]
        attempts = [{"seed": seed + a, "target_seed": seed, "passed": passed and a == 0,
                     "checks": [{"scenario": kind, "kind": "draft_test", "passed": passed, "margin": 1.2 if passed
                                 else 0.7, "detail": f"margin on target {seed}"}]}
                    for a in range(1 if passed else DRAFT_ATTEMPTS)]
        return {"passed": passed, "attempts": attempts, "identity": f"target {seed}", "sample": {}}

    def retrain_target(self, base: Path, seed: int, report: Any) -> None:
        self.calls.append(("target", seed))
        kinds = [p.name for p in (base / "drafts").iterdir()]
        _model(base / "target", seed=seed)
        for kind in kinds:
            _model(base / "drafts" / kind, seed=seed)

    def steps(self) -> CalibrationSteps:
        return CalibrationSteps(self.calibrate_draft, self.retrain_target)


def _quiet(stage: str, message: str, fraction: float) -> None:
    pass


def test_a_target_that_leaves_a_fault_unclear_is_retrained_with_the_next_seed(tmp_path: Path) -> None:
    state = _lab(tmp_path)
    fake = FakeSteps({"seed-wiring": 1, "healthy": 0})
    nxt = TARGET_SEED_STRIDE
    said: list[str] = []
    calibrate_lab(tmp_path, state, lambda s, m, f: said.append(m), fake.steps())
    # seed-wiring fails on target 0 (the healthy draft is not even checked there), the target is retrained, and
    # every draft is checked again on target 1
    assert fake.calls == [("draft", "seed-wiring", 0), ("target", nxt), ("draft", "seed-wiring", nxt),
                          ("draft", "healthy", nxt)]
    saved = read_state(tmp_path)
    assert saved["target_seed"] == nxt
    assert [(r["seed"], r["draft"]) for r in saved["targets_rejected"]] == [(0, "seed-wiring")]
    assert len(saved["targets_rejected"][0]["attempts"]) == DRAFT_ATTEMPTS
    assert {k: r["passed"] for k, r in saved["calibration"].items()} == {"seed-wiring": True, "healthy": True}
    assert any(f"retraining the target with seed {nxt}" in m for m in said)


def test_escalation_is_bounded_and_says_which_targets_were_tried(tmp_path: Path) -> None:
    state = _lab(tmp_path)
    fake = FakeSteps({"seed-wiring": 10**9, "healthy": 0})
    with pytest.raises(CalibrationFailed) as caught:
        calibrate_lab(tmp_path, state, _quiet, fake.steps())
    assert isinstance(caught.value, OrchestratorError)  # the CLI shows it as a located error, not a traceback
    seeds = [i * TARGET_SEED_STRIDE for i in range(TARGET_ATTEMPTS)]
    assert [c for c in fake.calls if c[0] == "target"] == [("target", s) for s in seeds[1:]]
    assert caught.value.targets == seeds
    assert f"on each of {TARGET_ATTEMPTS} targets" in str(caught.value)
    assert f"margin on target {seeds[-1]}" in str(caught.value)
    assert [r["seed"] for r in read_state(tmp_path)["targets_rejected"]] == seeds


def test_a_calibrated_lab_is_not_checked_again(tmp_path: Path) -> None:
    state = _lab(tmp_path)
    fake = FakeSteps({"seed-wiring": 0, "healthy": 0})
    calibrate_lab(tmp_path, state, _quiet, fake.steps())
    assert len(fake.calls) == 2
    # a record holds only for the same weights and sample: give the fake's records the real ones
    for kind, record in state["calibration"].items():
        record["identity"], record["sample"] = draft_identity(tmp_path, kind), asdict(FlagshipSample())
    fake.calls.clear()
    calibrate_lab(tmp_path, state, _quiet, fake.steps())
    assert fake.calls == []


def test_only_the_drafts_the_lab_has_are_calibrated(tmp_path: Path) -> None:
    state = _lab(tmp_path, drafts=("healthy",))
    fake = FakeSteps({"seed-wiring": 0, "healthy": 0})
    calibrate_lab(tmp_path, state, _quiet, fake.steps())
    assert fake.calls == [("draft", "healthy", 0)]
