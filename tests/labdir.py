"""Where the tests' lab lives: one lab directory per pytest-xdist worker (``$ORCHESTRATOR_CACHE_DIR/lab-test-gw0``...),
so two workers' flagships never write the same corrected draft (draft_fix writes ``<draft>.orchestrator-fix/`` beside
the draft) or link the same sglang tree at once. Each is the shipped models, installed under the build's lock in
seconds; the model cache and the sglang/vllm source trees stay shared (file-locked)."""

from __future__ import annotations

import os
from pathlib import Path


def test_lab_root() -> Path:
    from orchestrator.lab.building.build import cache_dir

    return cache_dir() / f"lab-test-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"


test_lab_root.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test
