"""The static checks, as part of the suite: ``ruff check .``, ``mypy`` and ``lint-imports`` (the architecture's
import contracts) — all configured in pyproject.toml — are clean.

Each runs from the repository root with this interpreter (``python -m ruff`` / ``python -m mypy``), so the tools of
the ``test`` extra (mypy pinned in constraints.txt) are the ones that judge. A tool that is not installed skips the
test, or fails it under CI (tests/realparts.py). mypy keeps its cache in ``.mypy_cache``: a warm run takes seconds,
a cold one (a fresh checkout, CI) about 80 s of CPU, hence the longer timeout.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests import realparts

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("tool", "args"), [("ruff", ["check", "."]), ("mypy", []), ("importlinter", ["--no-cache"])],
                         ids=["ruff", "mypy", "lint-imports"])
def test_static_check_is_clean(tool: str, args: list[str]) -> None:
    realparts.require(importlib.util.find_spec(tool) is not None,
                      f"{tool} is not installed (pip install -c constraints.txt -e '.[test]')")
    # import-linter has no ``python -m`` entry point: its console script's function, run by this interpreter;
    # --no-cache: its graph cache was seen stale right after an edit, and a fresh graph takes seconds
    argv = ["-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"] \
        if tool == "importlinter" else ["-m", tool]
    proc = subprocess.run([sys.executable, *argv, *args], cwd=ROOT, capture_output=True, text=True, timeout=570)
    command = " ".join(["lint-imports" if tool == "importlinter" else tool, *args])
    assert proc.returncode == 0, f"`{command}` reports problems (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
