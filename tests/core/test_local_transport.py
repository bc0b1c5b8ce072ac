"""LocalTransport on its own: streaming, stdin, env, argv without a shell, UTF-8 across reads, user mistakes
as exit codes (as a shell over SSH would report them), timeout and cancel killing the whole group."""

from __future__ import annotations

import asyncio
import asyncio.base_events
import asyncio.base_subprocess
import gc
from pathlib import Path
from typing import Any

import pytest

from orchestrator.transport.local import LocalTransport
from tests.core.conftest import marker_pids, wait_for_pids
from tests.waiting import wait_until_async


@pytest.fixture
def local() -> LocalTransport:
    return LocalTransport("localhost", session_id="t")


async def test_streams_both_outputs_and_returns_them(local: LocalTransport) -> None:
    chunks: list[tuple[str, str]] = []
    result = await local.run("echo out; echo err >&2; exit 4", on_output=lambda s, t: chunks.append((s, t)))
    assert (result.exit_code, result.stdout, result.stderr) == (4, "out\n", "err\n")
    assert sorted(chunks) == [("stderr", "err\n"), ("stdout", "out\n")]


async def test_stdin_env_cwd_and_argv(local: LocalTransport, tmp_path: Path) -> None:
    assert (await local.run("cat", stdin="fed")).stdout == "fed"
    env = await local.run('printf "%s" "$X"', env={"X": "a b $(c)"})
    assert env.stdout == "a b $(c)"
    assert (await local.run("pwd", cwd=str(tmp_path))).stdout.strip() == str(tmp_path.resolve())
    argv = await local.run(["printf", "%s|", "$HOME", "*", "a b"])
    assert argv.stdout == "$HOME|*|a b|"


async def test_multibyte_characters_split_across_reads_survive(local: LocalTransport) -> None:
    # 65535 ASCII bytes then a 3-byte character: the first read ends inside it.
    result = await local.run("python3 -c \"import sys; sys.stdout.write('a' * 65535 + '✓' * 3)\"")
    assert result.stdout == "a" * 65535 + "✓✓✓"


async def test_user_mistakes_are_exit_codes_not_exceptions(local: LocalTransport, tmp_path: Path) -> None:
    missing_cwd = await local.run("pwd", cwd=str(tmp_path / "nope"))
    assert missing_cwd.exit_code == 1 and "nope" in missing_cwd.stderr
    missing_program = await local.run(["no-such-program-4711"])
    assert missing_program.exit_code == 127 and "no-such-program-4711" in missing_program.stderr
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")  # not executable
    not_executable = await local.run([str(script)])
    assert not_executable.exit_code == 126


async def test_timeout_kills_the_group(local: LocalTransport, marker: str) -> None:
    with pytest.raises(asyncio.TimeoutError):
        await local.run(f"sleep {marker} & sleep {marker}; wait", timeout=0.5)
    assert wait_for_pids(marker, present=False, timeout=3) == []


async def test_cancel_kills_the_group_even_when_term_is_ignored(local: LocalTransport, marker: str) -> None:
    task = asyncio.create_task(local.run(f"trap '' TERM; sleep {marker} & sleep {marker}; wait"))
    assert await wait_until_async(lambda: len(marker_pids(marker)) >= 2, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert wait_for_pids(marker, present=False, timeout=5) == []


async def test_timeout_closes_the_pipes_a_process_outside_the_group_still_holds(
        local: LocalTransport, marker: str) -> None:
    # setsid takes the sleep out of the group, our stdout with it: the KILL cannot end it nor close the pipe.
    with pytest.raises(asyncio.TimeoutError):
        await local.run(f"setsid sleep {marker} & echo started", timeout=0.5)
    assert marker_pids(marker), "the sleep outside the group is meant to outlive the run"
    still_open = [t for t in gc.get_objects()
                  if isinstance(t, asyncio.base_subprocess.BaseSubprocessTransport) and not t.is_closing()]
    assert still_open == []


@pytest.fixture
def slow_pipes(monkeypatch: pytest.MonkeyPatch) -> None:
    """asyncio connects a new process' pipes a second after the fork, as it may on a loaded machine."""
    connect = asyncio.base_events.BaseEventLoop.connect_read_pipe

    async def slow(self: asyncio.AbstractEventLoop, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.5)  # the slowness is the subject: a delay injected, not a wait
        return await connect(self, *args, **kwargs)

    monkeypatch.setattr(asyncio.base_events.BaseEventLoop, "connect_read_pipe", slow)


async def test_cancel_while_the_pipes_are_connected_kills_the_group(
        local: LocalTransport, marker: str, slow_pipes: None) -> None:
    # asyncio's own answer to this cancel kills the leader alone, then waits for ever for the children's pipes.
    task = asyncio.create_task(local.run(f"sleep {marker} & sleep {marker}; wait"))
    await wait_until_async(lambda: len(marker_pids(marker)) >= 2, 10, interval=0.01)
    assert len(marker_pids(marker)) >= 2 and not task.done(), "the children must run before the spawn returns"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 15)
    assert wait_for_pids(marker, present=False, timeout=5) == []


async def test_a_command_that_removes_its_own_workdir_is_awaited(tmp_path: Path, slow_pipes: None) -> None:
    # The `rm -rf` is done before the pidfile for it can be written: that must not leave the process unawaited.
    local = LocalTransport("localhost", session_id="gone", state_dir=str(tmp_path))
    await local.workdir()
    await local.remove_workdir()
    assert not (tmp_path / "sessions" / "gone").exists()
