"""The shipped lab of a category the draft never learned (orchestrator/lab/building/unseen_lab.py): its models
are the ones its manifest lists, made by the recipe the code holds now; a change to the recipe fails here until the
models are trained and shipped again (``python -m orchestrator.lab.building.unseen_lab --ship --out DIR``)."""

from __future__ import annotations

import json

import pytest

from orchestrator.errors import OrchestratorError


def test_the_shipped_models_are_the_recipes_and_their_manifests() -> None:
    from orchestrator.lab.building.unseen_lab import RECIPE, UNSEEN, shipped

    lab = shipped()
    manifest = json.loads((UNSEEN / "manifest.json").read_text())
    assert manifest["recipe"] == json.loads(json.dumps(RECIPE)), "retrain and ship the unseen-category lab"
    for model in (lab.target, lab.both, lab.plain):
        assert (model / "config.json").is_file() and (model / "model.safetensors").is_file()
    drafts = [json.loads((d / "config.json").read_text()) for d in (lab.both, lab.plain)]
    assert all(d["architectures"] == ["LlamaForCausalLMEagle3"] for d in drafts), drafts


def test_a_changed_shipped_file_is_refused_by_name(tmp_path, monkeypatch) -> None:
    import shutil

    from orchestrator.lab.building import unseen_lab

    copy = tmp_path / "lab-unseen"
    shutil.copytree(unseen_lab.UNSEEN, copy)
    monkeypatch.setattr(unseen_lab, "UNSEEN", copy)
    (copy / "drafts" / "plain" / "config.json").write_text("{}")
    with pytest.raises(OrchestratorError, match="differ from their manifest"):
        unseen_lab.shipped()
