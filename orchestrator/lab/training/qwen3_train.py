"""The lab's Qwen3 target and its EAGLE-3 drafts (orchestrator/lab/building/class_lab.py says why and builds the lab
from them): their recipes, trained by train.py's own loops with the Qwen3 class (``target_class="qwen3"``) in
train_job's pinned child process. ``QWEN3_TRAINING_VERSION`` is in the Qwen3 models' cache keys beside the default
lab's RECIPE_VERSION: bump it when a change alters what the Qwen3 training produces (tests/lab/test_training_recipe.py
catches a forgotten bump). Until the recipe key held no source text, this module repeated train.py's two loops so that
train.py would not be touched; they are train.py's again, and the reduced-size fingerprints show the same models.

Public API: ``Qwen3Recipe``, ``QWEN3_DRAFT``, ``train_qwen3_target(...)``, ``train_qwen3_draft(...)``,
and the jobs run by train_job.run_job with ``target_class: qwen3``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.lab.training.train import DraftRecipe, ProgressFn, train_draft, train_target

#: the version of this module's training (the loops): in the Qwen3 models' cache keys
QWEN3_TRAINING_VERSION = 1


@dataclass(frozen=True)
class Qwen3Recipe:
    """The default lab's target recipe at a reduced size (8 layers instead of 12, fewer steps, half the corpus):
    deep enough that [embed, mid, last] and [2, N//2, N-3] are different wirings, quick enough to build on demand."""

    vocab_size: int = 1024
    hidden_size: int = 128
    num_layers: int = 8
    num_heads: int = 4
    head_dim: int = 32
    intermediate_size: int = 320
    corpus_bytes: int = 2_000_000
    steps: int = 420
    batch: int = 16
    seq_len: int = 64
    lr: float = 4e-3
    # one thread, not the default lab's two: on a busy 2-core machine two OpenMP threads that wait for each other
    # cost ten times over (orchestrator/lab/building/inventory.py LAB_THREADS); the on-demand build must not take an hour
    threads: int = 1


#: the default lab's draft recipe, fewer steps and aux chunks (the target is smaller), at one thread
QWEN3_DRAFT = DraftRecipe(steps=300, chunks=768, threads=1)


def train_qwen3_target(out_dir: Path, *, seed: int = 0, progress: ProgressFn | None = None,
                       recipe: Qwen3Recipe = Qwen3Recipe(), numerics: dict[str, Any] | None = None) -> Path:
    """train.train_target with a Qwen3 model (q/k norms, explicit head_dim): same corpus, tokenizer and schedule."""
    return train_target(out_dir, seed=seed, progress=progress, recipe=recipe, numerics=numerics, target_class="qwen3")


def train_qwen3_draft(target_dir: Path, out_dir: Path, *, wiring: list[int], seed: int = 0,
                      progress: ProgressFn | None = None, recipe: DraftRecipe = QWEN3_DRAFT,
                      numerics: dict[str, Any] | None = None) -> Path:
    """train.train_draft against the Qwen3 target: the same one-layer EAGLE-3 draft, SpecForge layout.

    :raises ValueError: a wiring outside 0..N for the target.
    """
    return train_draft(target_dir, out_dir, wiring=wiring, seed=seed, progress=progress, recipe=recipe,
                       numerics=numerics, target_class="qwen3")
