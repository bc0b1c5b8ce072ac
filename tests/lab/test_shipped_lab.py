"""The shipped lab models (orchestrator/data/lab): made by the project's own recipe (the recorded recipe hash is the
code's, so a change to the recipe without rebuilding them fails here), intact, installed and confirmed on this CPU on
first use, and a CPU that decodes them otherwise gets the full calibration instead of the recorded margins."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrator.errors import OrchestratorError
from orchestrator.lab import build, builder, shipped
from orchestrator.lab.build import TRAINED_DRAFTS, LabPaths, read_state
from orchestrator.lab.calibrate import CalibrationSteps, calibrate_lab
from orchestrator.lab.recipe import recipe_hash

REBUILD = "orchestrator lab build --from-scratch --scenario all --ship --dir <empty dir>"


def _manifest() -> shipped.Manifest:
    manifest = shipped.read_manifest()
    assert manifest is not None, f"no shipped lab models under {shipped.SHIPPED_DIR}"
    return manifest


def test_the_shipped_models_are_made_by_the_recipe_in_the_code() -> None:
    manifest = _manifest()
    assert manifest.recipe_hash == recipe_hash(), (
        f"the lab's recipe changed (hash {recipe_hash()}) but the shipped models were made by recipe "
        f"{manifest.recipe_hash}: rebuild them with `{REBUILD}` and commit orchestrator/data/lab")
    assert shipped.check_files(manifest) == []
    assert set(manifest.calibration) == set(TRAINED_DRAFTS) and all(r["passed"] for r in manifest.calibration.values())
    shipped_files = {p.relative_to(shipped.SHIPPED_DIR).as_posix() for p in shipped.SHIPPED_DIR.rglob("*")
                     if p.is_file()} - {"manifest.json"}
    assert shipped_files == set(manifest.files)  # nothing unrecorded ships
    assert set(TRAINED_DRAFTS) <= set(manifest.fingerprint) and manifest.fingerprint["threads"] == 1


def test_a_recipe_change_changes_the_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    before = recipe_hash()
    monkeypatch.setattr("orchestrator.lab.model_cache.RECIPE_VERSION", 999)
    assert recipe_hash() != before


@pytest.mark.lab
def test_the_test_lab_is_the_shipped_one_confirmed_on_this_cpu(lab: LabPaths) -> None:
    state = read_state(lab.root)
    origin = state["origin"]
    assert origin["kind"] == "shipped" and origin["recipe_hash"] == _manifest().recipe_hash
    confirmed = origin["confirmed"]
    assert confirmed["cpu"] and confirmed["seconds"] >= 0
    if confirmed["passed"]:  # this CPU decodes as the calibrating one: its records are the lab's
        assert state["calibration"] == _manifest().calibration
    else:  # calibrated here in full: records of its own, every check clear
        assert all(r["passed"] for r in state["calibration"].values())
    from orchestrator.cli.lab import lab_app

    out = CliRunner().invoke(lab_app, ["status", "--dir", str(lab.root)])
    assert out.exit_code == 0, out.output
    assert "models: shipped with the package (recipe " + origin["recipe_hash"] in out.output.replace("\n", " ")
    summary = build.status(lab.root)["origin"]
    assert summary["kind"] == "shipped" and summary["confirmed"]["passed"] == confirmed["passed"]


def test_damaged_shipped_files_are_refused_by_name(tmp_path: Path) -> None:
    manifest = _manifest()
    copy = tmp_path / "shipped"
    shutil.copytree(shipped.SHIPPED_DIR, copy)
    weights = copy / "drafts" / "healthy" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(OrchestratorError, match="drafts/healthy/model.safetensors"):
        shipped.install_shipped(tmp_path / "lab", manifest, lambda *_: None, root=copy)
    assert not (tmp_path / "lab" / "target").exists()


def test_a_cpu_that_decodes_otherwise_gets_the_full_calibration(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The confirmation found other outcomes: the recorded margins are not adopted, so the build's calibration
    checks every trained draft here (its expensive steps replaced by recorders)."""
    base = tmp_path / "lab"
    manifest = _manifest()
    state: dict[str, Any] = {"format": 1, "origin": shipped.install_shipped(base, manifest, lambda *_: None),
                             "target_seed": manifest.target_seed, "calibration": {}}
    monkeypatch.setattr(shipped, "confirm", lambda *_: {"passed": False, "differs": ["fix seed-wiring/candidate"],
                                                        "at": "now", "cpu": "other", "seconds": 0.0})
    builder.confirm_shipped(base, state, lambda *_: None, {})
    assert state["calibration"] == {} and state["origin"]["confirmed"]["passed"] is False
    checked: list[str] = []

    def calibrate_draft(_base: Path, kind: str, _report: Any) -> dict[str, Any]:
        checked.append(kind)
        return {"passed": True, "attempts": [{"checks": [], "passed": True}], "identity": "", "sample": {}}

    calibrate_lab(base, state, lambda *_: None, CalibrationSteps(calibrate_draft, lambda *_: None))
    assert checked == list(TRAINED_DRAFTS)
    assert builder.still_shipped(base)  # calibrated, not retrained: still the shipped models


def test_the_confirmation_compares_the_fingerprint_bit_for_bit(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = _manifest()
    monkeypatch.setattr(shipped, "fingerprint", lambda _base: json.loads(json.dumps(manifest.fingerprint)))
    assert shipped.confirm(tmp_path, manifest, lambda *_: None)["passed"]
    other = json.loads(json.dumps(manifest.fingerprint))
    other["healthy"]["prompt 2"]["draft"] = "0" * 24  # one digest of one draft's logits
    monkeypatch.setattr(shipped, "fingerprint", lambda _base: other)
    record = shipped.confirm(tmp_path, manifest, lambda *_: None)
    assert not record["passed"] and record["differs"] == ["healthy prompt 2 draft"]


@pytest.mark.lab
def test_the_fingerprint_is_the_same_twice_and_matches_the_shipped_one_here(lab: LabPaths) -> None:
    """Deterministic here; equal to the calibrating machine's exactly when the lab's confirmation passed."""
    here = shipped.fingerprint(lab.root)
    assert here == shipped.fingerprint(lab.root)
    passed = read_state(lab.root)["origin"]["confirmed"]["passed"]
    assert (here == _manifest().fingerprint) == passed


def test_from_scratch_and_ship_say_what_they_need(tmp_path: Path) -> None:
    from orchestrator.cli.lab import lab_app

    out = CliRunner().invoke(lab_app, ["build", "--ship", "--dir", str(tmp_path)], env={"COLUMNS": "300"})
    assert out.exit_code == 2 and "--from-scratch --scenario all" in out.output
    build.write_state(tmp_path, {"format": 1, "origin": {"kind": "shipped"}})
    out = CliRunner().invoke(lab_app, ["build", "--from-scratch", "--dir", str(tmp_path)], env={"COLUMNS": "300"})
    assert out.exit_code == 2 and "holds the shipped models" in out.output
