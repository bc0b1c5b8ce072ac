"""kill -9 of a real `orchestrator run` at random moments (issue 19), three windows per run of the suite: early
(quick steps), middle (a listener up, its step about to time out), late (the second listener up). After
`orchestrator cleanup`: 0 processes, 0 ports; the log parses up to at most a torn last line; `orchestrator
report` renders it marked incomplete. bench/reliability.py crash repeats this 20 times (RELIABILITY.md)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.reliability.crash import LabRun, kill_and_clean

pytestmark = pytest.mark.slow


# (earliest, latest, counted from): the start of the run, the first listener up, the second listener up
WINDOWS = {"early": (0.2, 1.2, None), "middle": (0.0, 1.0, 0), "late": (0.0, 0.5, 1)}


@pytest.mark.parametrize("window", list(WINDOWS))
def test_kill_9_then_cleanup_leaves_nothing(tmp_path: Path, window: str) -> None:
    earliest, latest, after = WINDOWS[window]
    rng = random.Random(window)  # reproducible moments; the bench draws fresh ones
    trial = kill_and_clean(tmp_path, rng=rng, earliest=earliest, latest=latest, after_listener=after)
    assert trial.left_processes == [], f"processes left after cleanup: {trial}"
    assert trial.left_ports == [], f"ports still listening after cleanup: {trial}"
    assert trial.problems == [], trial
    assert trial.torn_lines <= 1 and trial.report_marked_incomplete, trial
    if window == "late":  # the second listener was up: the kill orphaned it, and cleanup stopped it
        assert trial.orphans_before_cleanup >= 1 and trial.ports_before_cleanup == 1, trial


@pytest.mark.lab
def test_kill_9_of_the_flagship_with_a_server_up_then_cleanup_leaves_nothing(lab, tmp_path: Path) -> None:  # noqa: ANN001
    """The flagship itself (playbooks/eagle3.yaml on the lab), killed within 3 s of its first server answering:
    cleanup stops that server (a detached process group the kill orphaned) and frees its port."""
    trial = kill_and_clean(tmp_path, rng=random.Random("flagship"), earliest=0.0, latest=3.0, after_listener=0,
                           lab=LabRun("eagle3.yaml", "seed-wiring", lab.root))
    assert trial.left_processes == [] and trial.left_ports == [], trial
    assert trial.problems == [], trial
    assert trial.torn_lines <= 1 and trial.report_marked_incomplete, trial
    assert trial.orphans_before_cleanup >= 1 and trial.ports_before_cleanup >= 1, trial
