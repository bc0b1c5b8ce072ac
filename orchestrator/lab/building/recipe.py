"""The lab's recipe key: what its models are a function of, on any machine, declared rather than read off files.

``recipe_hash()`` covers both recipes (their dataclasses), the trained wirings (orchestrator.lab.building.build), the
calibration's retraining policy (orchestrator.lab.building.calibrate), ``RECIPE_VERSION`` and the versions of the libraries
that train and write the models (``training_libraries()``). No file path and no source text is in it: moving or
tidying a module changes no shipped model. What catches a change to what training produces without a version bump is
behavioural: tests/lab/test_training_recipe.py trains at a reduced size and compares what comes out with the
fingerprint recorded for this ``RECIPE_VERSION`` (tests/lab/training_fingerprints.json).

The shipped models (orchestrator.lab.building.shipped) record the hash, and tests/lab/test_shipped_lab.py fails when the code
and the shipped weights drift apart. It sits above the model cache, the scenarios and the calibration, because it
reads all three.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from orchestrator.lab.building import build, calibrate
from orchestrator.lab.training import model_cache
from orchestrator.lab.training.model_cache import training_libraries
from orchestrator.lab.training.train import DraftRecipe, TargetRecipe


def recipe_hash() -> str:
    """What the lab's models are a function of, on any machine: the recipes, the trained wirings, the calibration's
    retraining policy (which seeds and steps an attempt takes), RECIPE_VERSION and the training libraries' versions.
    The machine's part (the Python whose stdlib is the corpus, the CPU's kernels) is recorded beside it, not in it."""
    n = TargetRecipe().num_layers
    payload = {"target": asdict(TargetRecipe()), "draft": asdict(DraftRecipe()),
               "version": model_cache.RECIPE_VERSION,  # read per call: a test sets it
               "libraries": training_libraries(),
               "wirings": {"seed-wiring": build.seed_wiring(n), "healthy": build.sglang_wiring(n)},
               "policy": {"draft_attempts": calibrate.DRAFT_ATTEMPTS, "target_attempts": calibrate.TARGET_ATTEMPTS,
                          "target_seed_stride": calibrate.TARGET_SEED_STRIDE, "clear": calibrate.CLEAR,
                          "sample": asdict(calibrate.FlagshipSample())}}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]
