"""The shipped class-lab models (orchestrator/data/lab-<class>: the Qwen3 and the Kimi-K2.5-class labs): the very
cache entries each recipe and training code make (a change to either without shipping again fails here), intact, and
what a new class lab installs instead of training; a damaged copy is an error that says so, and ``--from-scratch``
trains over a shipped copy. The training itself, at a reduced size: tests/lab/test_training_recipe.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.errors import OrchestratorError
from orchestrator.lab.building import class_lab, class_shipped
from orchestrator.lab.building.build import seed_wiring

CLASSES = sorted(class_lab.CLASS_LABS)


def _manifest(name: str) -> class_shipped.ShippedManifest:
    manifest = class_shipped.read_manifest(class_shipped.shipped_root(name))
    assert manifest is not None, f"no shipped {name} models under {class_shipped.shipped_root(name)}"
    return manifest


@pytest.mark.parametrize("name", CLASSES)
def test_the_shipped_models_are_this_recipes(name: str) -> None:
    lab = class_lab.CLASS_LABS[name]
    manifest = _manifest(name)
    wanted = {f"{p.parent.name}/{p.name}" for p in class_lab.shipped_entries(lab)}
    assert set(manifest.models) == wanted, (
        f"the {name} lab's recipe or training code changed (it makes {sorted(wanted)}) but the package ships "
        f"{sorted(manifest.models)}: ship them again with `orchestrator lab build --target-class {name} "
        f"--from-scratch --ship --dir <empty dir>` and commit orchestrator/data/lab-{name}")
    root = class_shipped.shipped_root(name)
    on_disk = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} - {"manifest.json"}
    assert on_disk == {f"{entry}/{rel}" for entry, files in manifest.models.items() for rel in files}  # nothing else


@pytest.mark.parametrize("name", CLASSES)
def test_a_new_entry_is_the_shipped_copy_and_from_scratch_trains_over_it(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lab = class_lab.CLASS_LABS[name]
    monkeypatch.setenv("ORCHESTRATOR_CACHE_DIR", str(tmp_path / "cache"))
    trained: list[dict] = []

    def train(job: dict, progress: object) -> Path:  # what a training would be asked to make (not made: minutes)
        trained.append(job)
        Path(job["out"]).mkdir(parents=True)
        return Path(job["out"])

    monkeypatch.setattr(class_lab, "run_job", train)
    target = class_lab.cached_target(lab)
    assert trained == [] and class_lab.is_shipped_copy(target)
    assert json.loads((target / "config.json").read_text())["architectures"] == [lab.architecture]
    n = lab.recipe.num_layers
    draft = class_lab.cached_draft(lab, target, wiring=seed_wiring(n, name))
    assert trained == [] and (draft / "model.safetensors").is_file()
    class_lab.cached_target(lab, from_scratch=True)  # the shipped copy is no training: this one trains
    assert [(job["kind"], job["target_class"]) for job in trained] == [("target", name)]


def test_a_damaged_shipped_model_is_an_error_that_names_it(tmp_path: Path) -> None:
    manifest = _manifest("qwen3")
    name = next(iter(manifest.models))
    root = tmp_path / "shipped"
    (root / name).parent.mkdir(parents=True)
    (root / name).symlink_to(class_shipped.shipped_root("qwen3") / name, target_is_directory=True)
    damaged = dict(manifest.models[name], **{"config.json": "0" * 64})
    (root / "manifest.json").write_text(manifest.model_copy(update={"models": {name: damaged}}).model_dump_json())
    with pytest.raises(OrchestratorError, match="damaged.*config.json.*--target-class qwen3"):
        class_shipped.install(name, tmp_path / "dest", root=root)
    assert not class_shipped.install("qwen3-other/target", tmp_path / "dest", root=root)  # another recipe: trains
