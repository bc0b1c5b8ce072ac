"""The shipped lab models (orchestrator/data/lab): made by the project's own recipe (the recorded recipe hash is the
code's, so a change to the recipe without rebuilding them fails here), intact, installed and confirmed on this CPU on
first use, and a CPU that decodes them otherwise calibrates them itself instead of adopting the recorded margins: what
the run needs first, each other draft when a run first needs it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrator.errors import OrchestratorError
from orchestrator.lab.building import build, builder, shipped
from orchestrator.lab.building.build import TRAINED_DRAFTS, LabPaths, read_state
from orchestrator.lab.building.calibrate import CalibrationSteps, calibrate_lab
from orchestrator.lab.building.recipe import recipe_hash

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
    for other in manifest.other_cpus:  # each recorded CPU: its own bits, its own clear calibration of every check
        assert set(TRAINED_DRAFTS) <= set(other.fingerprint) and other.fingerprint["threads"] == 1
        assert other.fingerprint != manifest.fingerprint
        assert set(other.calibration) == set(TRAINED_DRAFTS)
        for kind, record in other.calibration.items():
            assert record["passed"] and record["sample"] == manifest.calibration[kind]["sample"]
            assert record["scenarios"] == manifest.calibration[kind]["scenarios"]
            assert record["identity"] == manifest.calibration[kind]["identity"]  # the shipped training, not a new one


def test_a_recipe_change_changes_the_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    before = recipe_hash()
    monkeypatch.setattr("orchestrator.lab.training.model_cache.RECIPE_VERSION", 999)
    assert recipe_hash() != before


@pytest.mark.lab
def test_the_test_lab_is_the_shipped_one_confirmed_on_this_cpu(lab: LabPaths) -> None:
    state = read_state(lab.root)
    origin = state["origin"]
    assert origin["kind"] == "shipped" and origin["recipe_hash"] == _manifest().recipe_hash
    confirmed = origin["confirmed"]
    assert confirmed["cpu"] and confirmed["seconds"] >= 0
    if confirmed["passed"]:  # this CPU decodes as a calibrated one: that one's records are the lab's
        assert state["calibration"] == shipped.calibration_confirmed(_manifest(), confirmed)
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
    confirmed = read_state(lab.root)["origin"]["confirmed"]
    recorded = [_manifest().fingerprint, *(o.fingerprint for o in _manifest().other_cpus)]
    assert (here in recorded) == confirmed["passed"]
    if confirmed["passed"]:
        assert recorded.index(here) == confirmed["matched"]


def test_from_scratch_and_ship_say_what_they_need(tmp_path: Path) -> None:
    from orchestrator.cli.lab import lab_app

    out = CliRunner().invoke(lab_app, ["build", "--ship", "--dir", str(tmp_path)], env={"COLUMNS": "300"})
    assert out.exit_code == 2 and "--from-scratch --scenario all" in out.output
    build.write_state(tmp_path, {"format": 1, "origin": {"kind": "shipped"}})
    out = CliRunner().invoke(lab_app, ["build", "--from-scratch", "--dir", str(tmp_path)], env={"COLUMNS": "300"})
    assert out.exit_code == 2 and "holds the shipped models" in out.output


def _other_cpu(manifest: shipped.Manifest, fingerprint: dict[str, Any]) -> shipped.OtherCpu:
    calibration = json.loads(json.dumps(manifest.calibration))
    calibration["healthy"]["attempts"][0]["checks"][0]["margin"] = 1.234  # its own figures, told apart
    return shipped.OtherCpu(cpu="Other CPU", at="2026-12-02T00:00:00Z", built={"capability": "AVX512"},
                            fingerprint=fingerprint, calibration=calibration)


def test_a_cpu_with_the_bits_of_a_recorded_other_cpu_adopts_that_cpus_calibration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = _manifest()
    other_bits = json.loads(json.dumps(manifest.fingerprint))
    other_bits["capability"] = "AVX512"
    with_other = manifest.model_copy(update={"other_cpus": [_other_cpu(manifest, other_bits)]})
    monkeypatch.setattr(shipped, "fingerprint", lambda _base: other_bits)
    record = shipped.confirm(tmp_path, with_other, lambda *_: None)
    assert record["passed"] and record["matched"] == 1 and record["matched_cpu"] == "Other CPU"
    assert record["differs"] == ["capability"]  # against the calibrating machine's bits, still said
    adopted = shipped.calibration_confirmed(with_other, record)
    assert adopted == with_other.other_cpus[0].calibration and adopted != manifest.calibration
    # bits that match neither: nothing adopted, the full calibration runs
    neither = json.loads(json.dumps(other_bits))
    neither["healthy"]["decode"]["accepted"] += 1
    monkeypatch.setattr(shipped, "fingerprint", lambda _base: neither)
    record = shipped.confirm(tmp_path, with_other, lambda *_: None)
    assert not record["passed"] and shipped.calibration_confirmed(with_other, record) is None
    from orchestrator.cli.lab import describe_origin

    line = describe_origin({"kind": "shipped", "confirmed": {"passed": True, "matched": 1, "matched_cpu": "Other CPU",
                                                             "seconds": 2.0, "at": "now"}})
    assert "the same bits as a recorded Other CPU, whose own calibration it adopts" in line


def _calibrated_here(base: Path, manifest: shipped.Manifest) -> dict[str, Any]:
    """A shipped install whose confirmation failed and whose full calibration here passed (records copied)."""
    origin = shipped.install_shipped(base, manifest, lambda *_: None)
    origin["confirmed"] = {"passed": False, "differs": ["capability"], "at": "now", "cpu": "here", "seconds": 1.0}
    return {"format": 1, "origin": origin, "target_seed": manifest.target_seed,
            "calibration": json.loads(json.dumps(manifest.calibration))}


def test_recording_this_cpu_needs_the_shipped_models_calibrated_in_full_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = _manifest()
    dest = tmp_path / "shipped"
    shutil.copytree(shipped.SHIPPED_DIR, dest)
    base = tmp_path / "lab"
    state = _calibrated_here(base, manifest)
    here = json.loads(json.dumps(manifest.fingerprint))
    here["capability"] = "AVX512"
    monkeypatch.setattr(shipped, "fingerprint", lambda _base: here)

    refusals = {
        "confirmed": (lambda st: st["origin"]["confirmed"].update(passed=True), "recorded already"),
        "built": (lambda st: st["origin"].update(kind="built"), "not the shipped models"),
        "unclear": (lambda st: st["calibration"]["healthy"].update(passed=False), "no clear calibration"),
        "few scenarios": (lambda st: st["calibration"]["seed-wiring"].update(scenarios=["seed-wiring"]),
                          "over every scenario"),
    }
    for name, (spoil, said) in refusals.items():
        spoilt = json.loads(json.dumps(state))
        spoil(spoilt)
        with pytest.raises(OrchestratorError, match=said):
            shipped.add_this_cpu(base, spoilt, dest)
        assert shipped.read_manifest(dest) == manifest, name  # nothing written
    retrained = base / "drafts" / "healthy" / "lab_recipe.json"
    kept = retrained.read_text()
    retrained.write_text(kept.replace('"seed": 0', '"seed": 1'))
    with pytest.raises(OrchestratorError, match="retrained the healthy draft"):
        shipped.add_this_cpu(base, state, dest)
    retrained.write_text(kept)

    entry = shipped.add_this_cpu(base, state, dest)
    written = shipped.read_manifest(dest)
    assert written is not None and written.other_cpus[-1] == entry and entry.fingerprint == here
    assert entry.calibration == state["calibration"] and written.files == manifest.files
    assert shipped.check_files(written, root=dest) == []
    assert shipped.confirm(base, written, lambda *_: None)["matched"] == len(written.other_cpus)
    with pytest.raises(OrchestratorError, match="recorded already"):
        shipped.add_this_cpu(base, state, dest)


def test_a_cpu_whose_bits_match_none_calibrates_what_the_run_needs_and_the_rest_when_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The flagship's first use on a new CPU: the draft its scenario serves (seed-wiring) is calibrated here; the
    healthy draft's scenarios are not ready until a run needs them (lab.json and `lab status` say so), and the
    build's last line says what it did and how long it took. The expensive steps are recorders."""
    from dataclasses import asdict

    from orchestrator.lab.building import calibrate

    here = json.loads(json.dumps(_manifest().fingerprint))
    here["capability"] = "a CPU nobody recorded"
    monkeypatch.setattr(shipped, "fingerprint", lambda _base: here)
    checked: list[str] = []

    def calibrate_draft(base: Path, kind: str, _report: Any) -> dict[str, Any]:
        checked.append(kind)
        return {"passed": True, "attempts": [{"checks": [], "passed": True}],
                "identity": calibrate.draft_identity(base, kind), "sample": asdict(calibrate.FlagshipSample())}

    monkeypatch.setattr(calibrate, "_calibrate_draft_until_clear", calibrate_draft)
    root, lines = tmp_path / "lab", []
    builder.build_lab("seed-wiring", root=root, progress=lambda stage, message, _f: lines.append(f"{stage}: {message}"))
    state = read_state(root)
    assert checked == ["seed-wiring"] and set(state["calibration"]) == {"seed-wiring"}
    assert state["calibration_deferred"] == ["healthy"] and "calibrate seed-wiring" in state["timings"]
    assert build.lab_is_built("seed-wiring", root=root) and not build.lab_is_built("topk-override", root=root)
    calibrated = build.status(root)["calibrated"]
    assert calibrated["seed-wiring"] == calibrated["no-lm-head"] == "here"
    assert calibrated["topk-override"] == calibrated["rope-theta"] == "on first use"
    assert lines[-1].startswith("lab: ready in ") and "match no calibrated CPU" in lines[-1]
    assert "calibrated here what scenario seed-wiring needs" in lines[-1]
    assert lines[-1].endswith("left for their first use: draft healthy")

    builder.build_lab("topk-override", root=root)  # a later run of the healthy draft's scenario: that draft, once
    builder.build_lab("eagle-not-eagle3", root=root)
    assert checked == ["seed-wiring", "healthy"] and read_state(root)["calibration_deferred"] == []
    assert build.lab_is_built("topk-override", root=root)
    assert set(build.status(root)["calibrated"].values()) == {"here"}


def test_a_cpu_with_recorded_bits_defers_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Matched bits adopt every recorded margin: the first use says so, and no scenario waits for a calibration.
    The calibrating machine's bits stand for this CPU's (whatever CPU runs the test: the matching itself is
    test_the_fingerprint_is_the_same_twice_and_matches_the_shipped_one_here's)."""
    monkeypatch.setattr(shipped, "fingerprint", lambda _base: json.loads(json.dumps(_manifest().fingerprint)))
    root, lines = tmp_path / "lab", []
    builder.build_lab("seed-wiring", root=root, progress=lambda stage, message, _f: lines.append(f"{stage}: {message}"))
    state = read_state(root)
    assert state["origin"]["confirmed"]["passed"] and state["origin"]["confirmed"]["matched"] == 0, state["origin"]
    assert "calibration_deferred" not in state and set(state["calibration"]) == set(TRAINED_DRAFTS)
    assert lines[-1].startswith("lab: ready in ") and "the same bits as the" in lines[-1]
    assert set(build.status(root)["calibrated"].values()) == {"recorded"}
