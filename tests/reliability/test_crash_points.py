"""kill -9 of a real `orchestrator run` at random moments (issue 19), three windows per run of the suite: early
(quick steps), middle (a listener up, its step about to time out), late (the second listener up). After
`orchestrator cleanup`: 0 processes, 0 ports; the log parses up to at most a torn last line; `orchestrator
report` renders it marked incomplete. bench/reliability.py crash repeats this 20 times (RELIABILITY.md)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.reliability.crash import kill_and_clean

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("earliest", "latest"), [(0.2, 1.2), (1.2, 2.6), (2.6, 4.5)], ids=["early", "middle", "late"])
def test_kill_9_then_cleanup_leaves_nothing(tmp_path: Path, earliest: float, latest: float) -> None:
    rng = random.Random(f"{earliest}-{latest}")  # reproducible moments; the bench draws fresh ones
    trial = kill_and_clean(tmp_path, rng=rng, earliest=earliest, latest=latest)
    assert trial.left_processes == [], f"processes left after cleanup: {trial}"
    assert trial.left_ports == [], f"ports still listening after cleanup: {trial}"
    assert trial.problems == [], trial
    assert trial.torn_lines <= 1 and trial.report_marked_incomplete, trial
    if earliest >= 2.6:  # by then the second listener is up: the kill orphaned it, and cleanup stopped it
        assert trial.orphans_before_cleanup >= 1 and trial.ports_before_cleanup == 1, trial
