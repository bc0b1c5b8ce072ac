"""Lab fixtures: one lab per test worker (the shipped models, under $ORCHESTRATOR_CACHE_DIR/lab-test-<worker>:
tests/labdir.py), servers on free loopback ports, in-process model runners for the SGLang-rule tests."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

from tests import realparts  # noqa: E402
from tests.labdir import test_lab_root  # noqa: E402

realparts.importorskip("torch")
realparts.importorskip("transformers")

from orchestrator.lab.building.build import SCENARIO_NAMES, LabPaths  # noqa: E402
from orchestrator.lab.building.builder import build_lab  # noqa: E402
from tests.lab.vllm_real_fixtures import real_vllm_flagship, vllm_host  # noqa: E402,F401 - the real vLLM host


def lab_root() -> Path:
    return test_lab_root()  # per worker: tests/labdir.py


@pytest.fixture(scope="session")
def lab() -> LabPaths:
    """The built lab, every scenario (the two shipped drafts + cheap fault copies): installed and confirmed once per
    worker (seconds), then reused."""
    root = lab_root()
    for name in SCENARIO_NAMES:
        build_lab(name, root=root)
    return build_lab("seed-wiring", root=root)


@pytest.fixture(scope="session")
def prompts(lab: LabPaths) -> list[str]:
    return json.loads((lab.target / "prompts.json").read_text())


@pytest.fixture
def variant(lab: LabPaths, tmp_path: Path) -> Callable[..., Path]:
    """A copy of a lab draft with its config.json edited: ``variant("seed-wiring", drop=[...], set={...})``."""

    def make(base: str, *, drop: list[str] = (), set: dict[str, Any] | None = None) -> Path:  # noqa: A002
        dst = tmp_path / f"variant-{base}"
        shutil.copytree(lab.root / "drafts" / base, dst, dirs_exist_ok=True)
        config = json.loads((dst / "config.json").read_text())
        for key in drop:
            config.pop(key, None)
        config.update(set or {})
        (dst / "config.json").write_text(json.dumps(config))
        return dst

    return make
