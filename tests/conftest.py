"""Fixtures shared by every test directory: the real sglang source trees (pip --no-deps --target, cached)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests import realparts

if TYPE_CHECKING:
    from orchestrator.lab.sglang_host.host import SglangHost

# One OpenMP thread per process the suite starts, unless the caller chose. The suite runs two xdist workers on two
# cores (the README's `-n 2`), and a process's second thread then spins against the other worker: the lab's draft
# test took 32 s at one thread and 339 s at two at load 8.8 (orchestrator/lab/building/inventory.py LAB_THREADS, which the
# lab host sets itself). This gives the same to what the lab host's environment does not reach: the real-vLLM host's
# probes (its draft test took 102.8 s and its reconcile 64.2 s in CI at two threads), the probes the tests run as
# subprocesses, torch in the test processes. vLLM's own workers already serve at one thread ("Reducing Torch threads
# from 2 to 1 for serving", tests/servers/data/vllm-0.32.0-start-ok.log). Set before any test module imports torch.
for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

SGLANG_VERSIONS = ("0.5.12.post1", "0.5.23")
LAB_FIXTURES = {"lab", "lab_models"}  # fixtures that build the lab or train its models
#: Every test that talks to a real vLLM (its fixture closure holds the built host) runs in one group, on one worker:
#: its session-scoped servers and flagship runs (tests/lab/vllm_real_fixtures.py, test_lab_vs_vllm.py) are made
#: once per run instead of once per worker, and never two real servers at once — on 2 cores two vLLM servers' OpenMP
#: threads thrash each other (CI measured a real-vLLM flagship at 606 s beside another real server, ~108 s alone).
REAL_VLLM_FIXTURE, REAL_VLLM_GROUP = "vllm_host", "real-vllm"
#: the real SGLang host's tests join that group: a real SGLang server beside a real vLLM one thrashes the same way
REAL_SGLANG_FIXTURE = "sglang_host"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads xdist_group marks to name the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``-n 2 --dist loadgroup``, the README's test command) the tests that need the lab or its
    models run a file at a time (group ``lab:<file>``), in file order, and the files spread over both workers: the lab
    is the shipped models, installed once under the build's file lock (seconds), so no worker waits for a training
    while the other idles. The real-vLLM tests are one group of their own (``real-vllm``); xdist hands out the
    groups with the most tests first, so that long chain starts at once while the other worker takes the rest."""
    del config
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if REAL_VLLM_FIXTURE in fixtures or REAL_SGLANG_FIXTURE in fixtures:
            item.add_marker(pytest.mark.xdist_group(REAL_VLLM_GROUP))
        # the `lab` marker, or the lab's models through a fixture (tests/servers' lab_models)
        elif item.get_closest_marker("lab") or LAB_FIXTURES & fixtures:
            item.add_marker(pytest.mark.xdist_group("lab:" + item.nodeid.split("::", 1)[0]))


def install_sglang_tree(version: str) -> Path:
    """The product's cached install of one sglang version; skips (fails under CI) with pip's reason, e.g. offline."""
    from orchestrator.lab.building.build import cached_sglang_tree

    return install_tree(lambda: cached_sglang_tree(version, timeout=600))


def install_vllm_tree(version: str) -> Path:
    """The product's cached install of one vllm source tree (read, never imported); skips (fails under CI) with
    pip's reason."""
    from orchestrator.lab.building.build import cached_vllm_tree

    return install_tree(lambda: cached_vllm_tree(version))


def install_tree(install: Callable[[], Path]) -> Path:
    """Only pip's own failure (offline, a stalled index: OrchestratorError) is a missing real part; any other
    exception is a bug, and fails the test as one."""
    from orchestrator.errors import OrchestratorError

    try:
        return install()
    except OrchestratorError as exc:
        reason = f"{exc.message} (offline?)"
    realparts.missing(reason)  # outside the except: the report shows pip's reason, not a chained traceback


@pytest.fixture(scope="session")
def sglang_trees() -> Callable[[str], Path]:
    """``sglang_trees("0.5.23")`` -> directory to put on sys.path (installed on first use in this session)."""
    made: dict[str, Path] = {}
    failed: dict[str, str] = {}  # one failed install per session is enough: later tests skip (fail) at once

    def get(version: str) -> Path:
        if version in failed:
            realparts.missing(failed[version])
        if version not in made:
            try:
                made[version] = install_sglang_tree(version)
            except (pytest.skip.Exception, pytest.fail.Exception) as exc:
                failed[version] = str(exc)
                raise
        return made[version]

    return get


@pytest.fixture(scope="session")
def sglang_host() -> SglangHost:
    """The real SGLang host built by ``orchestrator lab sglang-host`` (``$ORCH_TEST_SGLANG_HOST`` names a host
    directory built elsewhere, else the default under ``$ORCHESTRATOR_CACHE_DIR``). A host that is not built skips
    the test, and fails it under CI (tests/realparts.py): ``.ci/run`` builds it before the tests."""
    from orchestrator.lab.sglang_host.host import ensure_sglang_host, host_dir, is_built

    where = os.environ.get("ORCH_TEST_SGLANG_HOST") or None
    realparts.require(is_built(where), f"no real SGLang host is built at {host_dir(where)}: run `orchestrator lab "
                                       "sglang-host` (.ci/run does), or set ORCH_TEST_SGLANG_HOST to a built one")
    return ensure_sglang_host(where)  # complete: returns at once


@pytest.fixture(scope="session", autouse=True)
def socket_dirs_removed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Real vLLM servers of this session got short IPC socket directories under /tmp (a pytest tmp_path is too deep
    for a socket path: orchestrator.lab.vllm_host.host.socket_tmpdir); they go with the session's own temp tree."""
    yield
    from orchestrator.lab.vllm_host.host import remove_socket_tmpdirs

    remove_socket_tmpdirs(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session", autouse=True)
def no_planted_secret_leaks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The one place the planted secrets are checked (issue 19): after every test has run, every artifact of
    every test session (logs, outputs, reports, screenshots, exports, the committed snapshots) is scanned for
    the values in tests/planted_secrets.py. A leak fails the run, at the teardown of its last test."""
    yield
    from tests.planted_secrets import scan_everything

    leaks, _counts = scan_everything(tmp_path_factory.getbasetemp())
    assert not leaks, "planted secrets leaked into test-session artifacts:\n" + "\n".join(map(str, leaks[:20]))
