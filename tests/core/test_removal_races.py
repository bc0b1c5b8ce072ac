"""Removals that race with other writers and removers (issue 28): a fresh machine's CI run reported "removing the
remote workdir failed: FileNotFoundError: .../procs/run-NNNNN.json" beside the failure a test had planted. Each race
is driven here at its exact point, by a real other process (``rm``, a writer in a loop) or a hook at that point,
never by a sleep; and a removal that really fails (a file nobody may remove) is still reported."""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import TransportError
from orchestrator.transport.local import LocalTransport
from orchestrator.tree_removal import RemovalError, remove_tree
from tests.waiting import wait_until

PLAYBOOK = "name: race\nhosts: localhost\nsteps:\n  - {name: hello, shell: \"echo hello\"}\n"


def other_process_removes(path: Path) -> None:
    """Another process (not this one, not a thread of it) removes ``path``, and is done when this returns."""
    subprocess.run(["rm", "-rf", "--", str(path)], check=True, timeout=30)


@pytest.fixture
def undeletable() -> Iterator[Callable[[Path], None]]:
    """``undeletable(file)``: a file no remover may take (immutable for root, a read-only directory otherwise)."""
    made: list[tuple[str, Path]] = []

    def make(path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("stays\n")
        if os.geteuid() == 0:
            subprocess.run(["chattr", "+i", str(path)], check=True, capture_output=True)
            made.append(("chattr", path))
        else:
            path.parent.chmod(0o500)
            made.append(("chmod", path.parent))

    yield make
    for how, path in made:
        if how == "chattr":
            subprocess.run(["chattr", "-i", str(path)], capture_output=True)
        else:
            path.chmod(0o700)


def start_writer(procs: Path) -> subprocess.Popen[bytes]:
    """A process that writes files into ``procs`` as fast as it can; exit 3 once its path is gone."""
    writer = subprocess.Popen(["bash", "-c", 'i=0; while :; do : > "$0/w$i.exit" || exit 3; i=$((i+1)); done',
                               str(procs)], stderr=subprocess.DEVNULL)
    assert wait_until(lambda: any(procs.glob("w*.exit")), 30), "the writer never wrote"
    return writer


def leftovers(state: Path) -> list[str]:
    return sorted(p.name for p in (state / "sessions").iterdir()) if (state / "sessions").is_dir() else []


# -- the race of the report: the removal's own record, written while the removal runs -----------------------------
async def test_a_command_whose_record_dir_was_removed_meanwhile_runs_without_a_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state the CI run met: procs/ already removed by the workdir's removal, the workdir itself not yet."""
    local = LocalTransport("localhost", session_id="rec", state_dir=str(tmp_path))
    workdir = Path(await local.workdir())
    original = LocalTransport._record_command

    def removed_first(self: LocalTransport, pid: int, command: Any) -> Path | None:
        other_process_removes(workdir / "procs")  # between the spawn and the record: the exact point
        return original(self, pid, command)

    monkeypatch.setattr(LocalTransport, "_record_command", removed_first)
    result = await local.run("echo still here")
    assert (result.exit_code, result.stdout) == (0, "still here\n")
    assert workdir.is_dir() and not (workdir / "procs").exists()


async def test_the_session_end_whose_removal_races_its_own_record_reports_only_what_failed(
        run_playbook: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """End to end: the removal command's record is written only once the removal has taken the workdir away."""
    original = LocalTransport._record_command
    state = tmp_path / "state"
    seen: list[str] = []

    def after_the_removal_began(self: LocalTransport, pid: int, command: Any) -> Path | None:
        if ".removing-" in str(command) and self._workdir is not None:
            procs = Path(self._workdir) / "procs"
            seen.append(str(procs))
            assert wait_until(lambda: not procs.exists(), 30), "the removal never took procs/ away"
        return original(self, pid, command)

    monkeypatch.setattr(LocalTransport, "_record_command", after_the_removal_began)
    from orchestrator.inventory import Inventory

    inventory = Inventory(hosts={"localhost": {"state_dir": str(state)}})
    run = await run_playbook(PLAYBOOK, inventory=inventory)
    assert seen, "the hook never saw the workdir's removal"
    assert run.outcome.status == "ok" and run.outcome.problems == []
    assert leftovers(state) == []


async def test_a_writer_adding_files_during_the_removal_cannot_keep_the_workdir(tmp_path: Path) -> None:
    """A real process writes into procs/ as fast as it can (as a detached wrapper's exit status does) while the
    workdir goes: before, ``rm -rf`` met a file added after its listing ("Directory not empty") and the workdir
    stayed, unsaid. The rename first leaves the writer no path to write to."""
    for n in range(5):
        local = LocalTransport("localhost", session_id=f"writer{n}", state_dir=str(tmp_path))
        workdir = Path(await local.workdir())
        writer = start_writer(workdir / "procs")
        try:
            await local.remove_workdir()
            assert writer.wait(timeout=30) == 3  # it stopped because its path was gone
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait()
        assert not workdir.exists()
    assert leftovers(tmp_path) == []


async def test_a_workdir_another_process_removed_already_is_no_failure(tmp_path: Path) -> None:
    local = LocalTransport("localhost", session_id="gone", state_dir=str(tmp_path))
    workdir = Path(await local.workdir())
    other_process_removes(workdir)
    await local.remove_workdir()
    assert leftovers(tmp_path) == []


async def test_two_removers_of_one_workdir_at_once_both_succeed(tmp_path: Path) -> None:
    """Two transports of one session on one host (two srun clients, two cleanups once shared one)."""
    for n in range(5):
        first = LocalTransport("localhost", session_id=f"both{n}", state_dir=str(tmp_path))
        second = LocalTransport("localhost", session_id=f"both{n}", state_dir=str(tmp_path))
        assert await first.workdir() == await second.workdir()
        await asyncio.gather(first.remove_workdir(), second.remove_workdir())
    assert leftovers(tmp_path) == []


async def test_a_workdir_that_cannot_be_removed_is_reported(tmp_path: Path, undeletable: Any) -> None:
    local = LocalTransport("localhost", session_id="stuck", state_dir=str(tmp_path))
    workdir = Path(await local.workdir())
    undeletable(workdir / "files" / "locked" / "f")
    with pytest.raises(TransportError, match=r"cannot remove the workdir .*stuck.*(not permitted|Permission denied)"):
        await local.remove_workdir()


async def test_the_session_end_reports_a_workdir_it_could_not_remove(
        run_playbook: Any, tmp_path: Path, undeletable: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.inventory import Inventory

    state = tmp_path / "state"
    inventory = Inventory(hosts={"localhost": {"state_dir": str(state)}})
    original = LocalTransport._record_command

    def lock_at_the_first_step(self: LocalTransport, pid: int, command: Any) -> Path | None:
        record = original(self, pid, command)  # the first command's record makes the workdir
        if command == "echo hello" and self._workdir is not None:
            undeletable(Path(self._workdir) / "files" / "locked" / "f")
        return record

    monkeypatch.setattr(LocalTransport, "_record_command", lock_at_the_first_step)
    run = await run_playbook(PLAYBOOK, inventory=inventory)
    assert run.outcome.status == "ok"
    [problem] = run.outcome.problems
    assert "host localhost: removing the remote workdir" in problem and "cannot remove the workdir" in problem


# -- remove_tree: the lab's and the caches' trees -------------------------------------------------------------
def test_remove_tree_takes_an_entry_another_process_removed_between_listing_and_unlinking(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tmp_path / "lab"
    for name in ("a", "b", "c"):
        (tree / "sub" / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / "sub" / name).write_text(name)
    real_unlink = os.unlink
    raced: list[str] = []

    def unlink(path: Any, *, dir_fd: int | None = None) -> None:
        full = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path) if dir_fd is not None else str(path)
        if not raced:  # the first file: listed already, now removed by someone else before our unlink
            raced.append(full)
            other_process_removes(Path(full))
        real_unlink(path, dir_fd=dir_fd)

    monkeypatch.setattr(os, "unlink", unlink)
    remove_tree(tree)
    monkeypatch.undo()
    assert raced and not tree.exists()


def test_remove_tree_says_what_it_could_not_remove(tmp_path: Path, undeletable: Any) -> None:
    tree = tmp_path / "lab"
    undeletable(tree / "drafts" / "x" / "model.safetensors")
    with pytest.raises(RemovalError, match=r"cannot remove .*lab: .*model.safetensors: (Operation not permitted|"
                                           r"Permission denied)"):
        remove_tree(tree)


def test_remove_tree_of_nothing_or_a_link(tmp_path: Path) -> None:
    remove_tree(tmp_path / "never-there")
    target = tmp_path / "target"
    target.mkdir()
    (target / "kept").write_text("x")
    (tmp_path / "link").symlink_to(target, target_is_directory=True)
    remove_tree(tmp_path / "link")
    assert not (tmp_path / "link").exists() and (target / "kept").exists()  # unlinked, never followed


# -- the agent's file ops ---------------------------------------------------------------------------------------
def test_agent_stat_of_a_file_removed_between_its_stat_and_its_read_says_it_is_gone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from remote_probes.agent import agent as _agent

    path = tmp_path / "probe.py"
    path.write_text("x" * 1000)
    real_open = open

    def removed_then_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if str(file) == str(path):
            other_process_removes(path)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(_agent, "open", removed_then_open, raising=False)
    assert _agent.stat(str(path)) == {"exists": False}


def test_agent_put_keeps_its_own_error_when_the_temp_vanishes_after_the_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The temp goes (its workdir tidied away) between the failed write and the agent's tidying of it: the error
    said is the write's, not a FileNotFoundError from the tidying."""
    import base64

    from remote_probes.agent import agent as _agent

    target = tmp_path / "files" / "x.py"
    target.parent.mkdir()
    temp = Path(f"{target}.tmp-{os.getpid()}")

    def full_disk(_src: Any, _dst: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    real_exists = os.path.exists

    def exists_then_gone(path: Any) -> bool:  # the old look-then-unlink, raced at its exact point
        there = real_exists(path)
        if str(path) == str(temp) and there:
            other_process_removes(temp)
        return there

    monkeypatch.setattr(_agent.os, "replace", full_disk)
    monkeypatch.setattr(_agent.os.path, "exists", exists_then_gone)
    with pytest.raises(OSError, match="No space left") as raised:
        _agent.put({"path": str(target), "data": base64.b64encode(b"data").decode()})
    assert not isinstance(raised.value, FileNotFoundError)
    monkeypatch.undo()
    assert not temp.exists() and not target.exists()


# -- the session directory, exported while a live session writes its report ----------------------------------------
def test_export_skips_a_file_that_went_between_listing_and_reading(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.session.share import export_session

    session = tmp_path / "sessions" / "20260101T000000Z-live"
    (session / "outputs").mkdir(parents=True)
    (session / "events.jsonl").write_text(
        '{"schema_version":1,"seq":1,"ts":1.0,"type":"session_started","session_id":"s","playbook":"p"}\n')
    (session / "outputs" / "s1.txt").write_text("out\n")
    going = session / "outputs" / "s2.txt"
    going.write_text("renamed away by the live session\n")
    real_read = Path.read_bytes

    def gone_before_the_read(self: Path) -> bytes:
        if self == going:
            other_process_removes(going)  # listed and found a file, then gone before it is read
        return real_read(self)

    monkeypatch.setattr(Path, "read_bytes", gone_before_the_read)
    (session / "report.md.part").write_text("half a report")
    summary = export_session(session, tmp_path / "s.tar.gz")
    monkeypatch.undo()
    import tarfile

    names = tarfile.open(tmp_path / "s.tar.gz").getnames()
    assert f"{session.name}/outputs/s1.txt" in names
    assert not any(n.endswith(("s2.txt", ".part")) for n in names), names
    assert summary.files >= 2
    shutil.rmtree(tmp_path / "sessions")


# -- directories that were shared by accident: each remover now has its own ---------------------------------------
def test_two_controllers_starting_one_playbook_in_the_same_second_get_different_workdirs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The session id names the workdir on every host; two test workers (or two machines) with their own sessions
    dirs made the same id from the same stamp and playbook, and the first to end removed the other's workdir."""
    from orchestrator.playbook.models import Playbook
    from orchestrator.runner import RunnerOptions
    from orchestrator.session import log as session_log
    from orchestrator.session.recording import prepare_session

    monkeypatch.setattr(session_log, "session_stamp", lambda now=None: "20260101T000000Z")
    playbook = Playbook(name="flagship", steps=[])
    (one, first), (two, second) = prepare_session(playbook, tmp_path / "a"), prepare_session(playbook, tmp_path / "b")
    assert one.name == two.name and first != second and first.startswith(one.name)
    assert RunnerOptions().session_id != RunnerOptions().session_id


def test_each_slurm_node_has_its_own_srun_client_dir() -> None:
    from orchestrator.inventory import HostSpec
    from orchestrator.transport.srun import SrunTransport

    clients = [SrunTransport(HostSpec(name=n, transport="srun", slurm_job=7, slurm_node=n), session_id="s")._client
               for n in ("n1", "n2")]
    assert clients[0].session_id != clients[1].session_id


async def test_two_cleanups_at_once_neither_removes_the_others_workdir(tmp_path: Path) -> None:
    from orchestrator.cli.cleanup import _cleanup_all
    from orchestrator.inventory import Inventory

    inventory = Inventory(hosts={"localhost": {"state_dir": str(tmp_path)}})
    both = await asyncio.gather(*(_cleanup_all(inventory, ["localhost"], dry_run=True, everything=False)
                                  for _ in range(4)))
    assert both == [[]] * 4  # none lists another's commands as leftovers, none fails
    assert leftovers(tmp_path) == []


def waiting_for_lock(path: Path) -> bool:
    """Someone is blocked on ``path``'s flock (a ``->`` line of /proc/locks names its inode)."""
    inode = f":{os.stat(path).st_ino} "
    return any(line.split(":", 1)[-1].strip().startswith("->") and inode in line
               for line in Path("/proc/locks").read_text().splitlines())


def test_lab_clean_waits_for_a_build_of_the_same_lab_dir(tmp_path: Path) -> None:
    """Two first runs (or a run and `lab clean`) on one lab dir used to copy into, and remove, the same .tmp trees
    under each other; now the second waits for the first. The build here is another process holding the lock."""
    import threading

    from orchestrator.lab.building.build import clean, lab_lock

    lab = tmp_path / "lab"
    (lab / "target").mkdir(parents=True)
    (lab / "lab.json").write_text("{}")
    with lab_lock(lab):
        pass  # makes the lock file
    lock = lab.with_name(f".{lab.name}.lock")
    builder = subprocess.Popen(["flock", str(lock), "-c", "echo held; read _"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert builder.stdout is not None and builder.stdout.readline() == "held\n"
        cleaner = threading.Thread(target=clean, args=(lab,))
        cleaner.start()
        assert wait_until(lambda: waiting_for_lock(lock), 30), "clean never waited for the lock"
        assert (lab / "target").is_dir()  # nothing removed under the build
    finally:
        builder.communicate("\n", timeout=30)  # the build ends: its lock goes
    cleaner.join(30)
    assert not cleaner.is_alive() and not lab.exists()
