"""Lab servers fork from the session's warm interpreter (orchestrator/lab/stand_in/warm_start.py): the second start
is forked, not imported; whoever dies first (the server's stand-in, the warm interpreter, the session), nothing is
left; a server whose environment differs starts cold and says why. Real lab servers over the local transport,
checked in the process table (/proc) and on the ports."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.servers.base import LaunchSpec
from orchestrator.servers.manager import ServerManager, ServerRecord
from orchestrator.servers.registry import get_adapter
from orchestrator.transport.local import LocalTransport
from tests.servers.conftest import REPO, listening, processes_with, run_playbook
from tests.waiting import wait_until, wait_until_async

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def _alive(pid: int) -> bool:
    """Running: not gone and not a zombie. A process reaped between the open and the read of its stat file raises
    ESRCH (ProcessLookupError) from the read, not FileNotFoundError from the open: both mean gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _forked_pid(log_text: str) -> int:
    found = re.search(r"warm start: forked from the warm interpreter \(pid \d+\) as pid (\d+)", log_text)
    assert found, log_text[-2000:]
    return int(found.group(1))


def test_second_start_is_forked_and_the_session_leaves_nothing(lab_inventory, tmp_path: Path, marker: str) -> None:
    ran = run_playbook(f"""
name: warm starts
steps:
  - server: {{name: one, model: "{{{{ target }}}}", env: {{MARK: {marker}}}}}
    register: one
  - server: {{name: two, model: "{{{{ target }}}}", env: {{MARK: {marker}}}}}
    register: two
  - bench: {{server: two, n: 2, max_new_tokens: 8}}
    register: b
""", lab_inventory, tmp_path / "sessions")
    assert ran.status == "ok", [e.get("error") for e in ran.of_type("step_finished")]
    one, two, bench = (ran.result(s)["result"] for s in ("s1", "s2", "s3"))
    for server in (one, two):
        assert server["warm_start"].startswith("forked from the warm interpreter"), server["warm_start"]
    assert bench["completed"] == 2 and bench["errors"] == []
    ready = ran.of_type("server_ready")
    assert all("(forked from the session's warm interpreter)" in e["detail"] for e in ready), ready
    # the first start waited for the warm interpreter's imports, the second found it ready
    said = {sid: "".join(e["text"] for e in ran.of_type("output") if e.get("step_id") == sid) for sid in ("s1", "s2")}
    waits = [float(re.search(r"warm start: forked .* in ([\d.]+) s;", said[sid]).group(1)) for sid in ("s1", "s2")]
    assert waits[1] < waits[0], waits
    # the session's end stopped both servers and the warm interpreter: nothing with the marker, no port, no pidfile
    assert processes_with(marker) == []
    assert not listening(one["port"]) and not listening(two["port"])
    assert list((tmp_path / "state").glob("sessions/*/procs/*")) == []


@pytest.fixture
def reaped(marker: str) -> Iterator[str]:
    """The marker, and after the test a SIGKILL for anything still carrying it (so a failure leaves nothing)."""
    yield marker
    for pid in processes_with(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def transport(tmp_path: Path) -> LocalTransport:
    return LocalTransport("localhost", session_id="warm-start", state_dir=str(tmp_path / "state"),
                          env={"PYTHONPATH": str(REPO)})


def _spec(lab_models: dict[str, str], marker: str, **env: str) -> LaunchSpec:
    return LaunchSpec(model=lab_models["target"], flags={}, port=0, python=sys.executable,
                      env={"MARK": marker, **env})


async def _start(manager: ServerManager, transport: LocalTransport, name: str, spec: LaunchSpec) -> ServerRecord:
    return await manager.start(name=name, host="localhost", transport=transport, adapter=get_adapter("lab"),
                               spec=spec, client_python=sys.executable, auto_port=True, ready_timeout=240)


async def _log(transport: LocalTransport, record: ServerRecord) -> str:
    assert record.handle is not None
    return await transport.read_file_tail(record.handle.log_path, lines=200)


async def test_whoever_dies_first_the_forked_server_goes_too(transport: LocalTransport, lab_models: dict[str, str],
                                                         reaped: str) -> None:
    manager = ServerManager()
    first = await _start(manager, transport, "first", _spec(lab_models, reaped))
    child = _forked_pid(await _log(transport, first))
    assert first.handle is not None and child != first.handle.pid and _alive(child)

    # The stand-in SIGKILLed with its group (as cleanup's last resort does): its server dies with it.
    os.killpg(first.handle.pgid, signal.SIGKILL)
    assert wait_until(lambda: not _alive(child), 30), "the forked server outlived its stand-in"
    assert wait_until(lambda: not listening(first.spec.port), 30)

    # The warm interpreter SIGKILLed: its server dies with it (PR_SET_PDEATHSIG), the stand-in exits 137.
    second = await _start(manager, transport, "second", _spec(lab_models, reaped))
    assert second.warm_start and second.warm_start.startswith("forked"), second.warm_start
    grandchild = _forked_pid(await _log(transport, second))
    (warm,) = manager.warm.values()
    os.kill(warm.handle.pid, signal.SIGKILL)
    assert wait_until(lambda: not _alive(grandchild), 30), "the forked server outlived its warm interpreter"
    assert second.handle is not None
    assert wait_until(lambda: not _alive(second.handle.pid), 30)
    assert await transport.exit_status(second.handle) == 137
    log_text = await _log(transport, second)
    assert "the warm interpreter (pid" in log_text and "ended before the server" in log_text

    # Once it has ended, a start says so and is cold (not another wait for an interpreter that fails again).
    third = await _start(manager, transport, "third", _spec(lab_models, reaped))
    assert third.warm_start and third.warm_start.startswith("cold: the session's warm interpreter ended"), \
        third.warm_start
    await manager.stop_all()
    assert processes_with(reaped) == []


async def test_another_environment_starts_cold_and_says_why(transport: LocalTransport, lab_models: dict[str, str],
                                                        reaped: str) -> None:
    manager = ServerManager()
    first = await _start(manager, transport, "first", _spec(lab_models, reaped))
    assert first.warm_start and first.warm_start.startswith("forked")
    # a second interpreter for another environment: its variables are read when torch loads
    other = await _start(manager, transport, "other", _spec(lab_models, reaped, ORCH_WARM_TEST="other"))
    assert other.warm_start and other.warm_start.startswith("forked")
    assert len(manager.warm) == 2
    # a stand-in whose environment differs from its warm interpreter's is refused, and starts cold
    (warm, _) = manager.warm.values()
    spawned = await transport.spawn_detached(
        [sys.executable, "-m", "orchestrator.lab.stand_in.server", "--model-path", lab_models["target"], "--port", "0"],
        name="server-mismatch", env={"MARK": reaped, "OMP_NUM_THREADS": "2",
                                     "ORCHESTRATOR_LAB_WARM_START": f"{warm.socket}:{warm.handle.pid}"})

    async def said() -> bool:
        return "warm start:" in await transport.read_file_tail(spawned.log_path, lines=50)

    assert await wait_until_async(said, 60)
    text = await transport.read_file_tail(spawned.log_path, lines=50)
    assert "its environment differs from the warm interpreter's in OMP_NUM_THREADS" in text, text
    assert "starting cold" in text
    await transport.kill_group(spawned, grace=5)
    await manager.stop_all()
    assert processes_with(reaped) == []


async def test_a_kept_server_starts_as_its_own_process(transport: LocalTransport, lab_models: dict[str, str],
                                                   reaped: str) -> None:
    """It outlives the session (cleanup keeps it), so it must not hang on the session's warm interpreter."""
    manager = ServerManager()
    record = await manager.start(name="kept", host="localhost", transport=transport, adapter=get_adapter("lab"),
                                 spec=_spec(lab_models, reaped), client_python=sys.executable, auto_port=True,
                                 ready_timeout=240, keep=True)
    assert record.warm_start is None and manager.warm == {}
    assert "warm start:" not in await _log(transport, record)
    await manager.stop_all()
