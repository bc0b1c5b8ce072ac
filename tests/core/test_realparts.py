"""tests/realparts.py: a missing real part skips a test here and fails it under CI (in-test, fixture, module level)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

IN_TESTS = """
import pytest
from tests import realparts

@pytest.fixture
def sshd():
    realparts.missing("no sshd here")

def test_fixture(sshd):
    pass

def test_require():
    realparts.require(False, "tmux is not installed")

def test_require_met():
    realparts.require("/usr/bin/tmux", "tmux is not installed")

def test_import_present():
    assert realparts.importorskip("json").dumps(1) == "1"

def test_import_missing():
    realparts.importorskip("surely_not_a_module_xyz", reason="the reference is not installed")
"""

AT_MODULE_LEVEL = """
from tests import realparts

realparts.importorskip("surely_not_a_module_xyz")

def test_never_collected():
    pass
"""


def _pytest(tmp_path: Path, name: str, text: str, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(PYTHONPATH=str(REPO), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", name],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("ci", [None, "false"])
def test_without_ci_a_missing_part_skips(tmp_path: Path, ci: str | None) -> None:
    run = _pytest(tmp_path, "test_parts.py", IN_TESTS, ci)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed, 3 skipped" in run.stdout, run.stdout
    assert "no sshd here" in run.stdout and "the reference is not installed" in run.stdout
    assert "realparts.py" not in run.stdout  # each skip names the test's own line


@pytest.mark.parametrize("ci", ["true"])
def test_under_ci_a_missing_part_fails(tmp_path: Path, ci: str) -> None:
    run = _pytest(tmp_path, "test_parts.py", IN_TESTS, ci)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "2 failed, 2 passed, 1 error" in run.stdout, run.stdout  # the fixture's failure is an error
    assert "skipped" not in run.stdout
    for reason in ("no sshd here", "tmux is not installed", "the reference is not installed"):
        assert reason in run.stdout


def test_module_level_import_skips_the_module_or_fails_collection_under_ci(tmp_path: Path) -> None:
    skipped = _pytest(tmp_path, "test_mod.py", AT_MODULE_LEVEL, None)
    assert skipped.returncode in (0, 5) and "1 skipped" in skipped.stdout, skipped.stdout + skipped.stderr
    assert "test_mod.py:4" in skipped.stdout  # the report names the caller, not tests/realparts.py
    failed = _pytest(tmp_path, "test_mod.py", AT_MODULE_LEVEL, "1")
    assert failed.returncode == 2, failed.stdout + failed.stderr  # a collection error: pytest stops, loudly
    assert "surely_not_a_module_xyz" in failed.stdout and "skipped" not in failed.stdout
