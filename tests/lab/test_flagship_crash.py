"""kill -9 of the flagship itself (playbooks/eagle3.yaml on the lab) with a server up, then `orchestrator cleanup`
(issue 19; bench/reliability.py crash --lab-playbook eagle3.yaml repeats it 20 times at random moments)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from orchestrator.lab.building.build import LabPaths
from tests.reliability.crash import LabRun, kill_and_clean

pytestmark = [pytest.mark.slow, pytest.mark.torch]


@pytest.mark.lab
def test_kill_9_of_the_flagship_with_a_server_up_then_cleanup_leaves_nothing(lab: LabPaths, tmp_path: Path) -> None:
    """The flagship itself (playbooks/eagle3.yaml on the lab), killed within 3 s of its first server answering:
    cleanup stops that server (a detached process group the kill orphaned) and frees its port."""
    trial = kill_and_clean(tmp_path, rng=random.Random("flagship"), earliest=0.0, latest=3.0, after_listener=0,
                           lab=LabRun("eagle3.yaml", "seed-wiring", lab.root))
    assert trial.left_processes == [] and trial.left_ports == [], trial
    assert trial.problems == [], trial
    assert trial.torn_lines <= 1 and trial.report_marked_incomplete, trial
    assert trial.orphans_before_cleanup >= 1 and trial.ports_before_cleanup >= 1, trial
