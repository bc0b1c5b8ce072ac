"""A full disk on the host during a push (issue 19): the host's state dir (where probes are pushed) is a real 64 KiB
tmpfs, the probe tree is 380 kB. Over SSH (a real sshd on loopback) and on localhost, the probe step fails with a
clear error that says the disk is full, no half-written file is left for a later run to trust, `always:` still
runs, and once there is room (the tmpfs grown in place) the same playbook runs."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from sshd_fixture import SshdServer, sshd_missing_reason, start_sshd  # noqa: E402

from orchestrator.inventory import Inventory  # noqa: E402
from orchestrator.playbook.loader import load_playbook_text  # noqa: E402
from orchestrator.probes.invoke import probes_dir  # noqa: E402
from orchestrator.runner.playbook_runner import RunnerOptions  # noqa: E402
from orchestrator.runner.sinks import ListSink  # noqa: E402
from orchestrator.session.compose import compose_runner  # noqa: E402
from tests import realparts  # noqa: E402

PLAYBOOK = """name: remote disk full
hosts: target
steps:
  - name: env
    probe: env_info
always:
  - name: tidy
    shell: echo tidy
"""


@pytest.fixture
def tiny_state_dir(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "state"
    mount.mkdir()
    if os.geteuid() != 0:
        realparts.missing("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True, text=True)
    realparts.require(done.returncode == 0, f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def loopback_sshd(tmp_path: Path) -> Iterator[SshdServer]:
    reason = sshd_missing_reason()
    if reason:
        realparts.missing(reason)
    server = start_sshd(tmp_path / "sshd", hosts=1)
    try:
        yield server
    finally:
        server.stop()


def _inventory(request: pytest.FixtureRequest, kind: str, state: Path) -> Inventory:
    if kind == "localhost":
        return Inventory.model_validate({"hosts": {"localhost": {"state_dir": str(state)}},
                                         "groups": {"target": {"hosts": ["localhost"]}}})
    server: SshdServer = request.getfixturevalue("loopback_sshd")
    spec = server.host_spec("far", state_dir=str(state))
    spec.pop("name")
    return Inventory.model_validate({"hosts": {"far": spec}, "groups": {"target": {"hosts": ["far"]}}})


async def _run(inventory: Inventory) -> tuple[str, ListSink, str]:
    sink = ListSink()
    session = f"df-{uuid.uuid4().hex[:8]}"
    engine = compose_runner(load_playbook_text(PLAYBOOK), inventory=inventory, sinks=[sink],
                    options=RunnerOptions(session_id=session, keep_remote=True))
    return (await engine.run()).status, sink, session


@pytest.mark.parametrize("kind", ["ssh", "localhost"])
async def test_full_disk_during_a_push_is_a_clear_error(kind: str, request: pytest.FixtureRequest,
                                                        tiny_state_dir: Path) -> None:
    inventory = _inventory(request, kind, tiny_state_dir)
    status, sink, session = await _run(inventory)
    env, tidy = sink.of_type("step_finished")
    assert status == "failed" and env.status == "failed"
    error = env.results[0].error or ""
    assert "cannot copy" in error and "internal error" not in error and "Traceback" not in error
    if kind == "ssh":  # SFTP only says "Failure": the transport asked the host why
        assert "the remote disk is full" in error and "KiB free on" in error, error
    else:
        assert "No space left on device" in error, error
    assert tidy.status == "ok"  # always: still ran (a shell needs no room)

    # No half-written file: whatever was pushed is whole (keep_remote kept the session's workdir to look at), and
    # no partial probe tree: the push is all or nothing (its files would hold the room `always:` needs)
    pushed = [p for p in (tiny_state_dir / "sessions" / session / "files").rglob("*") if p.is_file()]
    source = probes_dir()
    for path in pushed:
        assert path.read_bytes() == (source / path.name).read_bytes(), f"{path} is a partial copy"
    assert not list((tiny_state_dir / "sessions" / session / "files").glob(f"{source.name}-*")), pushed

    # Room made on the same mount: the same playbook now runs.
    await asyncio.to_thread(subprocess.run, ["mount", "-o", "remount,size=8m", str(tiny_state_dir)], check=True)
    status, sink, _ = await _run(inventory)
    assert status == "ok", [o.error for f in sink.of_type("step_finished") for o in f.results]


@pytest.mark.parametrize(("blocks", "inodes", "needed", "said"), [
    ("tmpfs 64 44 20 69% /srv/state", "tmpfs 2000 10 1990 1% /srv/state", 29_000,
     "the remote disk is full: 20 KiB free on /srv/state (tmpfs), f.py needs 29 KiB"),
    ("tmpfs 64 44 20 69% /srv/state", "tmpfs 2000 10 1990 1% /srv/state", 20_480, None),  # it fits: something else
    ("/dev/sda1 100 1 99 1% /mnt/my disk", "/dev/sda1 50 50 0 100% /mnt/my disk", 10,
     "the remote file system is out of inodes (no file can be created on /mnt/my disk)"),
    ("/dev/sdb 100 1 99 1% /data", "/dev/sdb 0 0 0 - /data", 10, None),  # btrfs: 0 of 0 inodes means no limit
    ("df: /x: No such file or directory", "", 10, None),
])
def test_describe_full_disk(blocks: str, inodes: str, needed: int, said: str | None) -> None:
    from orchestrator.transport.disk_space import describe_full_disk

    assert describe_full_disk(blocks, inodes, needed=needed, name="f.py") == said
