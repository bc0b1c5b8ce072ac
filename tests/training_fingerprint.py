"""The behavioural check behind the lab's recipe key (orchestrator/lab/building/recipe.py): what training at a reduced size
produces, recorded per training version in tests/lab/training_fingerprints.json and compared on every run. The key
holds no source text, so a change to the training code that alters what it produces without bumping
RECIPE_VERSION (or QWEN3_TRAINING_VERSION, KIMI_TRAINING_VERSION) would ship stale models under a matching key: this check fails instead.

A fingerprint is a model's structure (its config, its tokenizer, its safetensors header: names, dtypes, shapes),
compared exactly, and its first and last training loss, compared within RELATIVE_LOSS_TOLERANCE: training runs with
pinned numerics (orchestrator/lab/training/train_job.py), and the tolerance absorbs the last bits a CPU's kernels may still
differ in. It is compared only where the corpus (the running Python's stdlib) and the training libraries are the
recorded ones: elsewhere both are in the cache key anyway, and the check says it did not compare.

Record again (after a bump): ``ORCH_RECORD_TRAINING_FINGERPRINT=1 pytest tests/lab/test_training_recipe.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
from pathlib import Path
from typing import Any

RECORDED = Path(__file__).parent / "lab" / "training_fingerprints.json"
#: per loss: the first is one step from pinned initial weights, the last follows hundreds of steps whose last bits a
#: CPU's kernels amplify (the kimi draft on an AMD EPYC Zen 4, 2026-12-05: first 7.3e-4, last 4.0e-3 relative to the
#: Xeon's record); the structure digest stays exact, so only a change that moves the losses alone by less than
#: 1% would pass unseen
RELATIVE_LOSS_TOLERANCE = {"loss_first": 2e-3, "loss_last": 1e-2}
STRUCTURE_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")


def _safetensors_header(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(size))


def fingerprint(model: Path) -> dict[str, Any]:
    """A trained model's structure digest and its losses (lab_recipe.json)."""
    structure = hashlib.sha256()
    for name in STRUCTURE_FILES:
        if (model / name).is_file():
            structure.update(name.encode() + b"\0" + (model / name).read_bytes())
    header = _safetensors_header(model / "model.safetensors")
    structure.update(json.dumps(header, sort_keys=True).encode())
    facts = json.loads((model / "lab_recipe.json").read_text())
    return {"structure": structure.hexdigest()[:16], "loss_first": facts["loss_first"],
            "loss_last": facts["loss_last"]}


def _environment(versions: dict[str, int]) -> dict[str, Any]:
    from orchestrator.lab.training.model_cache import training_libraries

    return {"versions": versions, "python": sys.version.split()[0], "libraries": training_libraries()}


def check(kind: str, versions: dict[str, int], models: dict[str, Path]) -> str:
    """Compare (or, when asked, record) ``models``' fingerprints under ``kind``; returns what it did. Raises
    AssertionError, naming the version to bump, when training produced other models than recorded."""
    recorded = json.loads(RECORDED.read_text()) if RECORDED.is_file() else {}
    env = _environment(versions)
    found = {name: fingerprint(path) for name, path in models.items()}
    if os.environ.get("ORCH_RECORD_TRAINING_FINGERPRINT") == "1":
        recorded[kind] = {**env, "models": found}
        RECORDED.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")
        return "recorded"
    mine = recorded.get(kind)
    assert mine is not None, f"no reduced-size fingerprint recorded for {kind}: record it ({__doc__.split('Record again')[1].strip()})"
    assert mine["versions"] == versions, (
        f"the {kind} training version is {versions}, the fingerprint was recorded for {mine['versions']}: record it "
        "again for this version (ORCH_RECORD_TRAINING_FINGERPRINT=1)")
    if (mine["python"], mine["libraries"]) != (env["python"], env["libraries"]):
        return (f"not compared: recorded on Python {mine['python']} with {mine['libraries']}, this is "
                f"{env['python']} with {env['libraries']} (both are in the cache key)")
    for name, got in found.items():
        want = mine["models"][name]
        drift = [key for key, tolerance in RELATIVE_LOSS_TOLERANCE.items()
                 if abs(got[key] - want[key]) > tolerance * max(abs(want[key]), 1e-9)]
        if got["structure"] != want["structure"]:
            drift.append("structure")
        assert not drift, (
            f"training the {kind} {name} at the reduced size produced other models than {versions} recorded "
            f"({', '.join(drift)}: {got} vs {want}): a change alters what training produces. Bump the version "
            "(RECIPE_VERSION in orchestrator/lab/training/model_cache.py; QWEN3_TRAINING_VERSION in "
            "orchestrator/lab/training/qwen3_train.py; KIMI_TRAINING_VERSION in kimi_train.py), rebuild and ship the models, and record the fingerprint again "
            "(ORCH_RECORD_TRAINING_FINGERPRINT=1)")
    return "matches the recorded fingerprint"
