"""The shipped Qwen3 lab models (orchestrator/data/lab-qwen3): the very cache entries this recipe and training code
make (a change to either without shipping again fails here), intact, and what a new Qwen3 lab installs instead of
training; a damaged copy is an error that says so, and ``--from-scratch`` trains over a shipped copy. The training
itself, at a reduced size: tests/lab/test_training_recipe.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.errors import OrchestratorError
from orchestrator.lab.building import qwen3_lab, qwen3_shipped
from orchestrator.lab.building.build import seed_wiring

RESHIP = "orchestrator lab build --target-class qwen3 --from-scratch --ship --dir <empty dir>"


def _manifest() -> qwen3_shipped.Qwen3Manifest:
    manifest = qwen3_shipped.read_manifest()
    assert manifest is not None, f"no shipped Qwen3 models under {qwen3_shipped.SHIPPED_QWEN3}"
    return manifest


def test_the_shipped_qwen3_models_are_this_recipes() -> None:
    manifest = _manifest()
    wanted = {f"{p.parent.name}/{p.name}" for p in qwen3_lab.shipped_entries()}
    assert set(manifest.models) == wanted, (
        f"the Qwen3 lab's recipe or training code changed (it makes {sorted(wanted)}) but the package ships "
        f"{sorted(manifest.models)}: ship them again with `{RESHIP}` and commit orchestrator/data/lab-qwen3")
    root = qwen3_shipped.SHIPPED_QWEN3
    on_disk = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} - {"manifest.json"}
    assert on_disk == {f"{name}/{rel}" for name, files in manifest.models.items() for rel in files}  # nothing else


def test_a_new_qwen3_entry_is_the_shipped_copy_and_from_scratch_trains_over_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRATOR_CACHE_DIR", str(tmp_path / "cache"))
    trained: list[dict] = []

    def train(job: dict, progress: object) -> Path:  # what a training would be asked to make (not made: minutes)
        trained.append(job)
        Path(job["out"]).mkdir(parents=True)
        return Path(job["out"])

    monkeypatch.setattr(qwen3_lab, "run_job", train)
    target = qwen3_lab.cached_qwen3_target()
    assert trained == [] and qwen3_lab.is_shipped_copy(target)
    assert json.loads((target / "config.json").read_text())["architectures"] == ["Qwen3ForCausalLM"]
    n = json.loads((target / "config.json").read_text())["num_hidden_layers"]
    draft = qwen3_lab.cached_qwen3_draft(target, wiring=seed_wiring(n))
    assert trained == [] and (draft / "model.safetensors").is_file()
    qwen3_lab.cached_qwen3_target(from_scratch=True)  # the shipped copy is no training: this one trains
    assert [job["kind"] for job in trained] == ["target"]


def test_a_damaged_shipped_model_is_an_error_that_names_it(tmp_path: Path) -> None:
    manifest = _manifest()
    name = next(iter(manifest.models))
    root = tmp_path / "shipped"
    (root / name).parent.mkdir(parents=True)
    (root / name).symlink_to(qwen3_shipped.SHIPPED_QWEN3 / name, target_is_directory=True)
    damaged = dict(manifest.models[name], **{"config.json": "0" * 64})
    (root / "manifest.json").write_text(manifest.model_copy(update={"models": {name: damaged}}).model_dump_json())
    with pytest.raises(OrchestratorError, match="damaged.*config.json"):
        qwen3_shipped.install(name, tmp_path / "dest", root=root)
    assert not qwen3_shipped.install("qwen3-other/target", tmp_path / "dest", root=root)  # another recipe: trains
