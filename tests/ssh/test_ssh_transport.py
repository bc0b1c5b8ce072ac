"""SshTransport against a real sshd: commands, streams, env, files, channels, killing remote groups."""

from __future__ import annotations

import asyncio
import os
import stat
import uuid
from pathlib import Path

import pytest
from sshd_fixture import SshdServer, start_sshd

from orchestrator.errors import HostUnreachable, TransportError
from orchestrator.inventory import HostSpec
from orchestrator.transport.ssh import SshTransport
from tests.ssh.conftest import pgrep, wait_until


def marker() -> str:
    """A unique ``sleep`` duration: it shows in the process's own argv, so ``pgrep -f`` finds the very
    process (a ``# comment`` would not survive bash exec'ing a lone command)."""
    return f"{300 + uuid.uuid4().int % 10**6 / 10**6:.6f}"


async def test_run_exit_codes_and_streams(transport: SshTransport) -> None:
    chunks: list[tuple[str, str]] = []
    result = await transport.run("echo out1; echo err1 >&2; echo out2; exit 3", on_output=lambda s, t: chunks.append((s, t)))
    assert result.exit_code == 3 and not result.ok
    assert result.stdout == "out1\nout2\n"
    assert result.stderr == "err1\n"  # the PGID line is never shown
    assert "".join(t for s, t in chunks if s == "stdout") == "out1\nout2\n"
    assert "".join(t for s, t in chunks if s == "stderr") == "err1\n"
    assert (await transport.run("true")).exit_code == 0
    killed = await transport.run("kill -KILL $$")
    assert killed.exit_code == -9
    with pytest.raises(TransportError, match="exit 7"):
        await transport.check("exit 7")


async def test_streaming_arrives_before_the_end(transport: SshTransport) -> None:
    seen = asyncio.Event()
    task = asyncio.ensure_future(transport.run("echo first; sleep 2; echo last", on_output=lambda s, t: seen.set()))
    await asyncio.wait_for(seen.wait(), 1.5)  # the first line is streamed long before the command ends
    assert not task.done()
    assert (await task).stdout == "first\nlast\n"


async def test_stdin_env_quoting_cwd_and_argv(transport: SshTransport, tmp_path: Path) -> None:
    nasty = "it's $(touch /tmp/pwned) `id` \"q\" \n; rm -rf /nothing"
    result = await transport.run('printf "%s" "$NASTY"', env={"NASTY": nasty})
    assert result.stdout == nasty
    echoed = await transport.run("cat; echo; cat /dev/null", stdin="line one\nline two")
    assert echoed.stdout == "line one\nline two\n"
    assert (await transport.run("cat")).stdout == ""  # no stdin given: EOF at once, nothing hangs
    spaced = tmp_path / "dir with space"
    spaced.mkdir()
    assert (await transport.run("pwd", cwd=str(spaced))).stdout.strip() == str(spaced)
    argv = await transport.run(["printf", "[%s]", "a b", "$(id)", "c'd"])
    assert argv.stdout == "[a b][$(id)][c'd]"
    with pytest.raises(TransportError, match="invalid environment variable name"):
        await transport.run("true", env={"A;B": "x"})


async def test_host_env_is_exported_without_accept_env(sshd_server: SshdServer) -> None:
    spec = HostSpec(**sshd_server.host_spec("h2", env={"ORCH_HOST_VAR": "a b'c"}))
    t = SshTransport(spec, session_id="env")
    try:
        result = await t.run('printf "%s" "$ORCH_HOST_VAR"', env={"OTHER": "1"})
        assert result.stdout == "a b'c"
        overridden = await t.run('printf "%s" "$ORCH_HOST_VAR"', env={"ORCH_HOST_VAR": "step"})
        assert overridden.stdout == "step"  # a step's env wins over the host's
    finally:
        await t.close()


async def test_put_and_put_cached_push_once(sshd_server: SshdServer, tmp_path: Path) -> None:
    class Counting(SshTransport):
        puts = 0

        async def put(self, local_path: Path, remote_path: str, *, mode: int = 0o600) -> None:
            Counting.puts += 1
            await super().put(local_path, remote_path, mode=mode)

    t = Counting(HostSpec(**sshd_server.host_spec("h2")), session_id=f"put-{uuid.uuid4().hex[:6]}")
    try:
        local = tmp_path / "probe.py"
        payload = "print('hi')\n" + "x" * 200_000
        local.write_text(payload)
        first = await t.put_cached(local)
        second = await t.put_cached(local)
        assert first == second and Counting.puts == 1
        assert Path(first).read_text() == payload  # the "remote" is this machine
        assert stat.S_IMODE(os.stat(first).st_mode) == 0o600
        workdir = await t.workdir()
        assert stat.S_IMODE(os.stat(workdir).st_mode) == 0o700
        await t.put(local, f"{workdir}/plain.txt", mode=0o640)
        assert stat.S_IMODE(os.stat(f"{workdir}/plain.txt").st_mode) == 0o640
        with pytest.raises(TransportError, match="cannot copy"):
            await t.put(local, "/nonexistent-dir/x")
        with pytest.raises(TransportError, match="no such file"):
            await t.put(tmp_path / "missing", f"{workdir}/y")
        await t.remove_workdir()
        assert not Path(workdir).exists()
    finally:
        await t.close()


async def test_fifty_concurrent_runs_on_default_max_sessions(tmp_path: Path) -> None:
    """OpenSSH's default MaxSessions 10: 50 concurrent runs queue on the semaphore instead of failing."""
    server = start_sshd(tmp_path / "sshd10", hosts=1, max_sessions=10)
    try:
        t = SshTransport(HostSpec(**server.host_spec("h")), session_id="fifty")
        results = await asyncio.gather(*(t.run(f"sleep 0.05; echo {i}") for i in range(50)))
        assert [r.stdout.strip() for r in results] == [str(i) for i in range(50)]
        await t.close()
        # The control: without the limit the same server refuses channels, so the semaphore is what helps.
        unlimited = SshTransport(HostSpec(**server.host_spec("h", max_channels=30)), session_id="fifty")
        outcomes = await asyncio.gather(*(unlimited.run("sleep 0.3") for _ in range(30)), return_exceptions=True)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        assert errors and all(isinstance(e, TransportError) and "cannot open a channel" in str(e) for e in errors)
        await unlimited.close()
    finally:
        server.stop()


async def test_timeout_kills_the_remote_group(transport: SshTransport) -> None:
    mark = marker()
    with pytest.raises(asyncio.TimeoutError):
        await transport.run(f"bash -c 'sleep {mark}1' & sleep {mark}2", timeout=0.5)
    assert wait_until(lambda: not pgrep(mark), timeout=5), pgrep(mark)
    assert (await transport.run("echo still usable")).stdout == "still usable\n"


async def test_cancel_kills_the_remote_group(transport: SshTransport) -> None:
    mark = marker()
    task = asyncio.ensure_future(transport.run(f"(sleep {mark}1) & trap '' TERM; sleep {mark}2"))
    assert await asyncio.to_thread(wait_until, lambda: len(pgrep(mark)) >= 2, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # TERM is ignored by the shell: the KILL after the grace period must still take the whole group.
    assert not pgrep(mark), pgrep(mark)


async def test_spawn_detached_survives_the_connection_then_kill_group(sshd_server: SshdServer) -> None:
    mark = marker()
    session = f"det-{uuid.uuid4().hex[:6]}"
    spec = HostSpec(**sshd_server.host_spec("h3", address=sshd_server.addresses[1]))
    first = SshTransport(spec, session_id=session)
    # (one command: base.spawn_detached prefixes `exec`, so a `a; b` script would stop after `a`)
    handle = await first.spawn_detached(["bash", "-c", f"echo started $A; sleep {mark}"], name="sleeper", env={"A": "b c"})
    assert handle.pgid > 1 and await first.is_running(handle)
    await first.close()
    assert pgrep(mark), "a detached process must outlive the connection that started it"
    second = SshTransport(spec, session_id=session)
    try:
        listed = await second.list_processes()
        assert [h.pgid for h in listed if h.name == "sleeper" and h.session_id == session] == [handle.pgid]
        assert "started b c" in await second.read_file_tail(handle.log_path)
        assert await second.kill_group(handle, grace=1)
        assert not pgrep(mark)
        assert not await second.is_running(handle)
        assert not [h for h in await second.list_processes() if h.session_id == session]
    finally:
        await second.close()


async def test_connection_lost_mid_command_is_unreachable_and_leaves_no_orphan(private_sshd: SshdServer) -> None:
    mark = marker()
    t = SshTransport(HostSpec(**private_sshd.host_spec("h")), session_id="lost")
    await t.connect()
    task = asyncio.ensure_future(t.run(f"sleep {mark}"))
    assert await asyncio.to_thread(wait_until, lambda: bool(pgrep(mark)), 10)
    private_sshd.kill_hard()
    with pytest.raises(HostUnreachable, match="connection lost"):
        await asyncio.wait_for(task, 30)
    assert await asyncio.to_thread(wait_until, lambda: not pgrep(mark), 10), pgrep(mark)
    with pytest.raises(HostUnreachable, match="cannot connect"):
        await t.run("true")  # reconnecting to a dead host fails fast and clearly
    await t.close()


async def test_down_host_is_unreachable(sshd_server: SshdServer) -> None:
    t = SshTransport(HostSpec(**sshd_server.host_spec("down", address=sshd_server.down_address)), session_id="x")
    with pytest.raises(HostUnreachable, match="cannot connect"):
        await t.connect()


async def test_wrong_key_is_an_auth_failure(sshd_server: SshdServer, tmp_path: Path) -> None:
    import asyncssh

    other = tmp_path / "other_key"
    other.write_bytes(asyncssh.generate_private_key("ssh-ed25519").export_private_key("openssh"))
    t = SshTransport(HostSpec(**sshd_server.host_spec("h2", key=str(other))), session_id="x")
    with pytest.raises(HostUnreachable, match="authentication failed"):
        await t.connect()
