"""The real single-machine Slurm cluster (tests/slurm_cluster.py) for every test in this directory: one per
test session and worker, 4 logical nodes, up in well under a second. Skips with the reason when Slurm cannot
run here (not installed, not root), and fails instead under CI (tests/realparts.py)."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from slurm_cluster import SlurmCluster, slurm_missing_reason, start_cluster  # noqa: E402
from sshd_fixture import sshd_server  # noqa: E402,F401 - the loopback sshd for via: ssh

from tests import realparts  # noqa: E402

NODES = 4


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # One worker runs every Slurm test: one cluster, and no two tests' allocations competing for its 4 nodes.
    # A Slurm test that uses the lab stays in tests/conftest.py's "lab:<file>" group (its file runs on one worker)
    # and runs on that worker's own cluster (the fixture is per worker), with its own job ids.
    for item in items:
        if "tests/slurm/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.slurm)
            if not any(m.name == "xdist_group" for m in item.own_markers):
                item.add_marker(pytest.mark.xdist_group("slurm"))


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A running cluster; ``SLURM_CONF`` points every Slurm client of this process and its children at it."""
    reason = slurm_missing_reason()
    if reason:
        realparts.missing(reason)
    try:
        cluster = start_cluster(NODES)
    except RuntimeError as exc:
        realparts.missing(str(exc))
    previous = os.environ.get("SLURM_CONF")
    os.environ.update(cluster.env)
    try:
        yield cluster
    finally:
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        cluster.stop()


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """The cluster, checked idle before the test (a test starts on 4 free nodes) and after it (nothing left)."""
    assert slurm_cluster.wait_idle(15), f"jobs left from an earlier test: {slurm_cluster.jobs()}"
    yield slurm_cluster
    if slurm_cluster.wait_idle(15):  # a finished job shows as COMPLETING for a moment: not left behind
        return
    left = slurm_cluster.jobs()
    for line in left:
        slurm_cluster.run("scancel", line.split()[0])
    raise AssertionError(f"the test left Slurm jobs behind: {left}")


@pytest.fixture
def marker() -> str:
    """Put in every node process's environment (the entry's env), so the process table can be searched for them."""
    return f"orch-slurm-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def lab_root() -> Path:
    """The lab (its healthy scenario) for servers on the cluster's nodes: cached, shared with tests/lab."""
    realparts.importorskip("torch")
    realparts.importorskip("transformers")
    from orchestrator.lab.building.builder import build_lab
    from tests.labdir import test_lab_root

    root = test_lab_root()
    build_lab("healthy", root=root)
    return root
