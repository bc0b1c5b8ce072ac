"""The lab's recipe hash: what its models are a function of, on any machine.

``recipe_hash()`` covers both recipes, the trained wirings (orchestrator.lab.build), the calibration's retraining
policy (orchestrator.lab.calibrate), ``RECIPE_VERSION``, torch's version and the training code itself
(orchestrator.lab.model_cache ``TRAINING_CODE``, comments and docstrings left out). The shipped models
(orchestrator.lab.shipped) record it, and tests/lab/test_shipped_lab.py fails when the code and the shipped weights
drift apart. It sits above the model cache, the scenarios and the calibration, because it reads all three.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from orchestrator.lab import build, calibrate, model_cache
from orchestrator.lab.model_cache import TRAINING_CODE, _code_digest
from orchestrator.lab.train import DraftRecipe, TargetRecipe


def recipe_hash() -> str:
    """What the lab's models are a function of, on any machine: the recipes, the trained wirings, the calibration's
    retraining policy (which seeds and steps an attempt takes), RECIPE_VERSION, torch's version and the training code.
    The machine's part (the Python whose stdlib is the corpus, the CPU's kernels) is recorded beside it, not in it."""
    import torch

    repo = Path(__file__).resolve().parents[2]  # model_cache.RECIPE_VERSION is read per call: a test sets it
    n = TargetRecipe().num_layers
    payload = {"target": asdict(TargetRecipe()), "draft": asdict(DraftRecipe()), "version": model_cache.RECIPE_VERSION,
               "torch": torch.__version__.split("+")[0],
               "wirings": {"seed-wiring": build.seed_wiring(n), "healthy": build.sglang_wiring(n)},
               "policy": {"draft_attempts": calibrate.DRAFT_ATTEMPTS, "target_attempts": calibrate.TARGET_ATTEMPTS,
                          "target_seed_stride": calibrate.TARGET_SEED_STRIDE, "clear": calibrate.CLEAR,
                          "sample": asdict(calibrate.FlagshipSample())},
               "code": {rel: _code_digest(repo / rel) for rel in TRAINING_CODE}}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]
