"""Fuzzed playbooks (issue 19): every generated or mutated playbook ends in a located error or a finished run,
never a traceback. The suite runs ``EXAMPLES`` cases; bench/reliability.py fuzz runs 1,000 and RELIABILITY.md
has its counts. The hand-written cases are the hostile shapes a generator rarely reaches."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from orchestrator.errors import OrchestratorError
from orchestrator.playbook.loader import load_playbook_text
from tests.reliability.playbook_fuzz import FILE, judge, playbook_text

EXAMPLES = int(os.environ.get("ORCH_FUZZ_EXAMPLES", "50"))  # ~0.4 s each on 2 busy cores
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])


@FUZZ
@given(text=playbook_text())
def test_generated_playbook_is_a_located_error_or_a_run(text: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    verdict = asyncio.run(judge(text, tmp_path_factory.mktemp("fuzz", numbered=True)))
    assert verdict.kind != "bad", f"{verdict.detail}\n--- playbook ---\n{text[:3000]}"


def test_the_generator_reaches_both_ends() -> None:
    """A fuzzer whose cases are all rejected at the first line tests only the YAML parser. Its own draws, under
    the property test's settings, so it holds whatever ran before it (or nothing): each case is only loaded, which
    is what tells the two ends apart (a located load error, or a playbook that goes on to run)."""
    seen: Counter[str] = Counter()

    @FUZZ
    @given(text=playbook_text())
    def classify(text: str) -> None:
        try:
            load_playbook_text(text, file=FILE)
        except OrchestratorError:
            seen["located"] += 1
        else:
            seen["loads"] += 1

    classify()
    assert sum(seen.values()) >= EXAMPLES, dict(seen)
    assert seen["located"] >= EXAMPLES // 10 and seen["loads"] >= EXAMPLES // 10, dict(seen)


HOSTILE = {
    # billion laughs: nine levels of ten aliases; expanding it would take gigabytes
    "alias bomb": "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8))
        + "name: bomb\nsteps: [{set: {v: *i}}]\n",
    "deep flow nesting": "name: deep\nsteps: [{set: {v: " + "[" * 5000 + "]" * 5000 + "}}]\n",
    "deep block nesting": "name: deep\nvars:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(400))
        + "  " * 401 + "v: 1\nsteps: []\n",
    "recursive alias": "name: r\nvars: &v {self: *v}\nsteps: []\n",
    "huge name": "name: " + "n" * 2_000_000 + "\nsteps: [{shell: 'true'}]\n",
    "nul bytes": "name: \x00\nsteps: []\n",
    "only a BOM": "\ufeff",
    "template bomb": "name: t\nvars: {x: \"{{ range(10**9) | list }}\"}\nsteps: [{shell: 'echo {{ x }}'}]\n",
    "sandbox escape": "name: t\nsteps: [{shell: \"echo {{ ''.__class__.__mro__[1].__subclasses__() }}\"}]\n",
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_playbook_is_a_located_error_or_a_run(case: str, tmp_path: Path) -> None:
    verdict = asyncio.run(judge(HOSTILE[case], tmp_path))
    assert verdict.kind in ("located", "run"), f"{case}: {verdict.kind}: {verdict.detail}"


def test_validate_command_on_a_fuzzed_file_is_never_a_traceback(cli_inproc, tmp_path: Path) -> None:
    """The same through the CLI: `validate` exits 0 or 2 with the place, and never shows a traceback."""
    for n, text in enumerate(sorted(HOSTILE.values(), key=len)[:6]):
        path = tmp_path / f"case{n}.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
        (tmp_path / "inv.yaml").write_text("hosts: {localhost: {}}\n", encoding="utf-8")
        proc = cli_inproc("validate", str(path), "-i", str(tmp_path / "inv.yaml"))
        assert proc.returncode in (0, 2), (text[:200], proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stdout + proc.stderr
        if proc.returncode == 2:
            assert f"{path}:" in proc.stdout + proc.stderr  # located
