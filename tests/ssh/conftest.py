"""Fixtures for the SSH tests: a real sshd on loopback (from tests/sshd_fixture.py) and helpers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from sshd_fixture import SshdServer, sshd_missing_reason, sshd_server, start_sshd  # noqa: E402,F401

from orchestrator.inventory import HostSpec  # noqa: E402
from orchestrator.transport.ssh import SshTransport  # noqa: E402
from tests import realparts, waiting  # noqa: E402

pytestmark = pytest.mark.ssh


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/ssh/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.ssh)


def pgrep(marker: str) -> list[str]:
    """Processes on this machine (= the 'remote' host) whose command line holds ``marker``."""
    found = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout
    return [line for line in found.splitlines() if "pgrep" not in line]


wait_until = waiting.wait_until  # the ssh tests import it from here


@pytest.fixture
def spec(sshd_server: SshdServer) -> HostSpec:  # noqa: F811 - the imported fixture
    return HostSpec(**sshd_server.host_spec("h2"))


@pytest.fixture
async def transport(spec: HostSpec):  # noqa: ANN201
    t = SshTransport(spec, session_id="test")
    await t.connect()
    try:
        yield t
    finally:
        await t.close()


@pytest.fixture
def private_sshd(tmp_path: Path):  # noqa: ANN201
    """A sshd of this test's own, which the test may kill."""
    reason = sshd_missing_reason()
    if reason:
        realparts.missing(reason)
    server = start_sshd(tmp_path / "sshd", hosts=1)
    try:
        yield server
    finally:
        server.stop()
