"""Build-once cache of the lab's tiny models: ``<cache>/lab-models/<recipe hash>/{target, draft-<hash>}``.

The cache root is ``$ORCHESTRATOR_CACHE_DIR`` (default ``~/.cache/orchestrator``) unless a directory is given.
The hash covers every recipe field, the seed, the Python and torch versions (the corpus is the running
Python's stdlib), the pinned numerics (orchestrator.lab.training.train_job) and ``RECIPE_VERSION`` (bump it when training
code changes what it produces). Training runs in a pinned child process (train_job.run_job). Builds go to a
temporary directory renamed into place, under a file lock, so concurrent test workers build once.

``RECIPE_VERSION`` is the training code's version: bump it when a change alters what training produces
(tests/lab/test_training_recipe.py catches a forgotten bump by training at a reduced size); orchestrator.lab.building.recipe
hashes it with the rest of the recipe (``recipe_hash()``). No source text or file path is in any key.

Public API: ``cached_target(...) -> Path``, ``cached_draft(target_dir, *, wiring, ...) -> Path``,
``cache_root(cache_dir=None) -> Path``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from orchestrator.lab.training.draft_io import DraftLayout
from orchestrator.lab.training.filelock import file_lock
from orchestrator.lab.training.train import DraftRecipe, ProgressFn, TargetRecipe
from orchestrator.lab.training.train_job import pinned_env, run_job
from orchestrator.tree_removal import remove_tree

RECIPE_VERSION = 3


def cache_root(cache_dir: Path | str | None = None) -> Path:
    base = cache_dir or os.environ.get("ORCHESTRATOR_CACHE_DIR") or Path.home() / ".cache" / "orchestrator"
    return Path(base) / "lab-models"


#: the libraries whose code trains the lab's models or writes them (the tokenizer, the weights, the configs)
TRAINING_LIBRARIES = ("torch", "transformers", "tokenizers", "safetensors")


def training_libraries() -> dict[str, str]:
    """Each training library's version, without a local build tag (torch 2.13.0+cpu is torch 2.13.0)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in TRAINING_LIBRARIES:
        try:
            out[name] = version(name).split("+")[0]
        except PackageNotFoundError:
            out[name] = "absent"
    return out


def _digest(payload: dict) -> str:
    payload = dict(payload, python=sys.version.split()[0], libraries=training_libraries(), version=RECIPE_VERSION,
                   numerics={k: v for k, v in pinned_env(1).items() if "THREADS" not in k})
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=list).encode()).hexdigest()[:16]


def _build_once(final: Path, build: Callable[[Path], Path]) -> Path:
    marker = final / ".complete"
    if marker.exists():
        return final
    with file_lock(final.parent / (final.name + ".lock")):
        if marker.exists():  # another process built it while we waited
            return final
        tmp = final.parent / (final.name + ".tmp")
        remove_tree(tmp)
        remove_tree(final)
        build(tmp)
        (tmp / ".complete").write_text("ok\n")
        tmp.rename(final)
    return final


def cached_target(*, seed: int = 0, recipe: TargetRecipe = TargetRecipe(), cache_dir: Path | str | None = None,
                  progress: ProgressFn | None = None) -> Path:
    """The tiny target's HF directory, trained on first use (about 100-130 s on 2 cores)."""
    key = _digest({"target": asdict(recipe), "seed": seed})
    final = cache_root(cache_dir) / key / "target"
    job = {"kind": "target", "seed": seed, "recipe": asdict(recipe)}
    return _build_once(final, lambda tmp: run_job({**job, "out": str(tmp)}, progress))


def cached_draft(target_dir: Path, *, wiring: list[int], seed: int = 0, steps: int | None = None,
                 layout: DraftLayout = DraftLayout(), recipe: DraftRecipe = DraftRecipe(),
                 progress: ProgressFn | None = None) -> Path:
    """A draft trained on ``wiring`` for the cached ``target_dir``, stored beside it (about 55-70 s)."""
    target_dir = Path(target_dir)
    key = _digest({"wiring": list(wiring), "seed": seed, "steps": steps, "layout": asdict(layout),
                   "recipe": asdict(recipe), "target": target_dir.parent.name})
    final = target_dir.parent / ("draft-" + key)
    job = {"kind": "draft", "target_dir": str(target_dir), "wiring": list(wiring), "seed": seed, "steps": steps,
           "layout": asdict(layout), "recipe": asdict(recipe)}
    return _build_once(final, lambda tmp: run_job({**job, "out": str(tmp)}, progress))
