"""SshTransport: one asyncssh connection per host, reused for the session.

Three things plain asyncssh does not do for us, and why they are here:

* **Channel limit.** OpenSSH refuses channels past ``MaxSessions`` (10 by default) and asyncssh fails
  instead of queueing, so every channel and SFTP operation goes through a per-connection semaphore
  (``max_channels``, default 8). One more channel is the guardian (below) and one is kept for kills.
* **Killing what we started.** Closing a channel without a pty leaves the remote command running.
  sshd starts every session's shell with ``setsid()``, so the login shell's PID is the process group
  of everything the command starts; the command prints that PGID on stderr behind a per-connection
  token before running anything, and cancel/timeout sends TERM then KILL to the group on another
  channel — the LocalTransport semantics.
* **Connection loss.** A guardian process per connection reads, on its stdin, the PGIDs of the
  commands in flight; when the connection dies its stdin closes and it kills those groups, so a
  dropped connection leaves no orphans either.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shlex
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from orchestrator.debuglog import clip
from orchestrator.errors import HostUnreachable, TransportError
from orchestrator.transport.agent import LINE_LIMIT, AgentChannel
from orchestrator.transport.asyncssh_quiet import asyncssh
from orchestrator.transport.base import (
    Command,
    OutputCallback,
    OutputCapture,
    RunResult,
    Transport,
    env_prefix,
    term_kill_script,
    to_shell,
)
from orchestrator.transport.disk_space import explain_copy_failure
from orchestrator.transport.known_hosts import (
    connect_kwargs,
    load_known_hosts,
    refusal,
    resolve_target,
    target_address,
)
from orchestrator.transport.spec import ConnectionSpec

KILL_GRACE = 2.0
OPEN_RETRIES = 4  # 10+20+40+80 ms: covers sshd's slot-release lag, not a real oversubscription
PGID_WAIT = 5.0  # how long an aborted run waits for its PGID line before giving up on the kill
UNTRACK_DELAY = 0.05  # how long a "-PGID" line for the guardian may wait to share a packet
debug = logging.getLogger("orchestrator.ssh")  # --debug: connections, commands, pushes (orchestrator.debuglog)
PUT_CONCURRENCY = 16  # files in flight at once on one SFTP session (OpenSSH's sftp-server allows 512 handles)

# Reads "+PGID" / "-PGID" lines; at EOF (the connection is gone, or we closed it) kills what is left.
GUARDIAN = r"""
exec 2>/dev/null; trap '' HUP PIPE INT  # stdout stays: sshd may share it with stdin
declare -A live
while IFS= read -r line; do
  id=${line#?}; case $id in ''|*[!0-9]*|0|1) continue;; esac
  case $line in +*) live[$id]=1;; -*) unset "live[$id]";; esac
done
[ ${#live[@]} -eq 0 ] && exit 0
""" + term_kill_script('"${!live[@]}"', KILL_GRACE) + "\n"

# Run once per connection: is the login shell bash, and is it its own process-group leader?
PROBE = 'printf "%s|%s|" "$$" "${BASH_VERSION:-}"; cat /proc/$$/stat 2>/dev/null || ps -o pgid= -p $$'


def _remote_path(path: str) -> str:
    """SFTP paths are relative to the login directory; accept the ~/ and $HOME/ forms shells use."""
    for prefix in ("~/", "$HOME/", "${HOME}/"):
        if path.startswith(prefix):
            return path[len(prefix):]
    return path


class _Client(asyncssh.SSHClient):
    def __init__(self, owner: SshTransport) -> None:
        self.owner = owner
        self.conn: asyncssh.SSHClientConnection | None = None

    def connection_made(self, conn: asyncssh.SSHClientConnection) -> None:
        self.conn = conn

    def connection_lost(self, exc: Exception | None) -> None:
        if self.owner._conn is self.conn:  # a replaced connection closing late must not mark the new one lost
            self.owner._lost = str(exc) if exc else "connection closed"


class _RunSession(asyncssh.SSHClientSession[str]):
    """One command's channel: streams output, pulls the PGID line out of stderr, records the exit."""

    def __init__(self, marker: str, out: OutputCapture, err: OutputCapture, on_pgid: Callable[[int], None]) -> None:
        self.marker = marker
        self.on_pgid = on_pgid
        self.out, self.err = out, err
        self.pgid: int | None = None
        self.pgid_seen = asyncio.Event()
        self.exit_code: int | None = None
        self.done: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()
        self._pending = ""  # stderr held back until the PGID line has gone by

    def data_received(self, data: str, datatype: asyncssh.DataType) -> None:
        if datatype != asyncssh.EXTENDED_DATA_STDERR:
            self.out.feed(data)
        elif self.pgid_seen.is_set():
            self.err.feed(data)
        else:
            self._scan(data)

    def _scan(self, data: str) -> None:
        self._pending += data
        at = self._pending.find(self.marker)
        end = self._pending.find("\n", at) if at >= 0 else -1
        if end < 0:
            if len(self._pending) > 65536:  # no marker coming (odd shell): stop holding output back
                self._release(self._pending)
            return
        value = self._pending[at + len(self.marker):end].strip()
        self.pgid = int(value) if value.isdigit() else None
        if self.pgid:
            self.on_pgid(self.pgid)
        self._release(self._pending[:at] + self._pending[end + 1:])

    def _release(self, text: str) -> None:
        self._pending = ""
        self.pgid_seen.set()
        if text:
            self.err.feed(text)

    def eof_received(self) -> bool:
        """The command's output ended. True: no EOF of ours in answer (asyncssh would send one, a packet per
        command that nothing needs: sshd closes the channel when the command has exited, and its stdin had its
        EOF or is /dev/null already)."""
        return True

    def exit_status_received(self, status: int) -> None:
        self.exit_code = status

    def exit_signal_received(self, signal_name: str, core_dumped: bool, msg: str, lang: str) -> None:
        number = getattr(signal, f"SIG{signal_name}", None)
        self.exit_code = -int(number) if number is not None else -1

    def connection_lost(self, exc: Exception | None) -> None:
        if self._pending:
            self._release(self._pending)
        self.pgid_seen.set()
        if not self.done.done():
            self.done.set_result(exc)


class _SshAgentChannel(AgentChannel):
    """The agent on its own channel. Without a pty, closing the channel only gives the agent EOF, which is all it
    needs to stop its calls and exit; the guardian covers a connection that dies with the agent stuck."""

    def __init__(self, host: str, process: asyncssh.SSHClientProcess[bytes], release: Callable[[], None],
                 marker: str) -> None:
        self.host = host
        self.process = process
        self._release: Callable[[], None] | None = release
        self._marker = marker
        self.stderr_tail = ""
        self._stderr = asyncio.create_task(self._keep_stderr())

    async def _keep_stderr(self) -> None:
        # Read all along: stderr shares the channel's flow-control window with the agent's answers.
        with contextlib.suppress(asyncssh.Error, OSError):
            while chunk := await self.process.stderr.read(65536):
                text = chunk.decode("utf-8", "replace")
                text = "".join(line for line in text.splitlines(keepends=True) if self._marker not in line)
                self.stderr_tail = (self.stderr_tail + text)[-2000:]

    async def readline(self) -> bytes:
        try:
            line = await self.process.stdout.readline()
        except asyncssh.Error as exc:
            raise ConnectionResetError(f"{self.host}: {exc}") from None
        if len(line) > LINE_LIMIT:
            raise ValueError(f"an agent line of {len(line)} bytes")
        return line

    def write(self, data: bytes) -> None:
        try:
            self.process.stdin.write(data)
        except (asyncssh.Error, BrokenPipeError) as exc:
            raise ConnectionResetError(f"{self.host}: {exc}") from None

    async def close(self) -> None:
        try:
            with contextlib.suppress(asyncssh.Error, OSError):
                self.process.stdin.write_eof()
            try:
                await asyncio.wait_for(asyncio.shield(self.process.wait_closed()), KILL_GRACE + 3)
            except asyncio.TimeoutError:
                self.process.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stderr, 1)
        finally:
            release, self._release = self._release, None
            if release is not None:  # the slot goes back exactly once
                release()

    def end_reason(self) -> str:
        tail = self.stderr_tail.strip()
        signal_info = self.process.exit_signal
        status = self.process.exit_status
        if signal_info:
            said = f"killed by SIG{signal_info[0]}"
        elif status is not None and status >= 0:
            said = f"exit {status}"
        else:
            said = "no exit status (the channel or connection closed)"
        return said + (f": {tail[-500:]}" if tail else "")


class SshTransport(Transport):
    """A host reached over SSH. Raises HostUnreachable / HostKeyError from ``connect`` and ``run``."""

    supports_agent = True

    def __init__(self, spec: ConnectionSpec, *, session_id: str) -> None:
        super().__init__(spec.name, state_dir=spec.state_dir, session_id=session_id, env=spec.env, agent=spec.agent)
        self.spec = spec
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lost: str | None = None
        self._connect_lock = asyncio.Lock()
        self._channels = asyncio.Semaphore(spec.max_channels)
        self._kill_channel = asyncio.Semaphore(1)  # outside the pool, so cancelling 8 runs cannot deadlock
        self._guardian: asyncssh.SSHClientChannel[str] | None = None
        self._untracked: list[str] = []  # "-PGID" lines waiting to share a packet (see _track)
        self._untrack_timer: asyncio.TimerHandle | None = None
        self._marker = f"__orch_pgid_{secrets.token_hex(6)}__ "
        self._shell_is_bash = True
        self._shell_leads_group = True

    # -- connection -----------------------------------------------------------------------
    async def connect(self) -> None:
        async with self._connect_lock:
            if self._conn is not None and self._lost is None:
                return
            debug.debug("%s: connecting (%s)", self.host, "reconnect" if self._lost is not None else "first")
            self._conn, self._lost = await self._open(), None
            try:
                await self._inspect_shell()
                await self._start_guardian()
            except BaseException:
                self._conn.close()
                self._conn = None
                raise

    async def _open(self) -> asyncssh.SSHClientConnection:
        host, port = target_address(self.spec)
        # The one host-key check: asyncssh matches the server (key or @cert-authority certificate) against
        # these files, parsed by us so a bad line is named; the same object then explains a refusal.
        target = await resolve_target(self.spec)
        known = load_known_hosts(target.files)
        try:
            return await asyncssh.connect(host, port, client_factory=lambda: _Client(self), known_hosts=known,
                                          **connect_kwargs(self.spec))
        except asyncssh.HostKeyNotVerifiable as exc:
            raise refusal(self.spec, target, str(exc), known) from None
        except asyncssh.PermissionDenied as exc:
            raise HostUnreachable(
                f"{self.host}: authentication failed for {target} ({exc.reason}); check `user` and `key` "
                f"in the inventory or User/IdentityFile in ~/.ssh/config"
            ) from None
        except (OSError, asyncio.TimeoutError, asyncssh.Error, ValueError) as exc:
            reason = str(exc) or type(exc).__name__
            if isinstance(exc, asyncio.TimeoutError):
                reason = f"no answer within {self.spec.connect_timeout:g}s"
            raise HostUnreachable(f"{self.host}: cannot connect to {host}{f':{port}' if port else ''}: {reason}") from None

    async def _inspect_shell(self) -> None:
        """Learn how commands must be wrapped on this host (done once, ~1 round trip)."""
        assert self._conn is not None
        try:
            result = await self._conn.run(PROBE, check=False, timeout=self.spec.connect_timeout)
        except (asyncssh.Error, OSError, asyncio.TimeoutError) as exc:
            raise HostUnreachable(f"{self.host}: connected, but cannot run a command: {exc or type(exc).__name__}") from None
        pid, bash, stat = (str(result.stdout or "").split("|", 2) + ["", ""])[:3]
        self._shell_is_bash = bool(bash)
        fields = stat.rsplit(")", 1)[-1].split() if ")" in stat else stat.split()
        pgid = fields[2] if ")" in stat and len(fields) > 2 else (fields[0] if fields else "")
        self._shell_leads_group = pid.strip().isdigit() and pgid == pid.strip()

    async def _start_guardian(self) -> None:
        assert self._conn is not None
        try:
            channel, _ = await self._conn.create_session(asyncssh.SSHClientSession, f"bash -c {shlex.quote(GUARDIAN)}")
        except asyncssh.Error:
            return  # no guardian (e.g. a restricted server): cancel and timeout still kill, connection loss cannot
        self._guardian = channel

    def track_group(self, sign: Literal["+", "-"], pgid: int | None) -> None:
        self._track(sign, pgid)

    def _track(self, sign: str, pgid: int | None) -> None:
        """Tell the guardian. A "+" goes at once (the group must be covered while it runs); a "-" waits up to
        UNTRACK_DELAY to share the next "+"'s packet: in a run of short steps that halves the guardian's packets
        (one per step, not two). Until it is sent the guardian may kill a group that already ended, which is
        harmless unless its number is reused by a new group within those milliseconds."""
        if not pgid or self._guardian is None or self._lost is not None:
            return
        if sign == "-":
            self._untracked.append(f"-{pgid}\n")
            if self._untrack_timer is None:
                self._untrack_timer = asyncio.get_running_loop().call_later(UNTRACK_DELAY, self._flush_untracked)
            return
        self._guardian_write("".join(self._untracked) + f"{sign}{pgid}\n")
        self._untracked.clear()

    def _flush_untracked(self) -> None:
        self._untrack_timer = None
        if self._untracked and self._guardian is not None and self._lost is None:
            self._guardian_write("".join(self._untracked))
        self._untracked.clear()

    def _guardian_write(self, text: str) -> None:
        assert self._guardian is not None
        # A guardian whose channel broke cannot be told anything; the connection's loss is seen by every run.
        with contextlib.suppress(asyncssh.Error, OSError):
            self._guardian.write(text)

    async def _connection(self) -> asyncssh.SSHClientConnection:
        if self._conn is None or self._lost is not None:
            await self.connect()
        assert self._conn is not None
        return self._conn

    async def close(self) -> None:
        # The agents first, while the connection can still carry their EOF: each then stops its own calls.
        agents_failed: TransportError | None = None
        try:
            await self.stop_agents()
        except TransportError as exc:  # the connection must still be closed; the failure is raised after
            agents_failed = exc
        await self._close_connection()
        if agents_failed is not None:
            raise agents_failed

    async def _close_connection(self) -> None:
        if self._untrack_timer is not None:
            self._untrack_timer.cancel()
        self._flush_untracked()  # else the guardian, told EOF below, would kill groups that ended already
        if self._guardian is not None:
            with contextlib.suppress(Exception):
                self._guardian.write_eof()
            self._guardian = None
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), 5)

    def _unreachable(self, during: str, exc: BaseException | str | None) -> HostUnreachable:
        reason = self._lost or (str(exc) if exc else "") or "connection closed"
        return HostUnreachable(f"{self.host}: connection lost {during}: {reason}")

    # -- commands ---------------------------------------------------------------------------
    def wrap(self, command: Command, *, env: Mapping[str, Any] | None = None, cwd: str | None = None,
             no_stdin: bool = False) -> str:
        """The remote command line: PGID line on stderr, exports, cd, then the command under bash. ``no_stdin``:
        its stdin is /dev/null, so the caller need not send the channel's EOF (one packet less per command: what
        a run of short steps costs most is packets)."""
        inner = env_prefix({**self.base_env, **(env or {})})
        if cwd:
            inner += f"cd {shlex.quote(cwd)} || exit 1; "
        inner += to_shell(command)
        announce = f"printf '%s%s\\n' {shlex.quote(self._marker)} \"$$\" >&2"
        redirect = " </dev/null" if no_stdin else ""
        if not self._shell_leads_group:
            return f"exec setsid -w bash -c {shlex.quote(announce + chr(10) + inner)}{redirect}"
        if not self._shell_is_bash:
            return f"{announce}; exec bash -c {shlex.quote(inner)}{redirect}"
        return f"{'exec </dev/null' + chr(10) if no_stdin else ''}{announce}\n{inner}"

    async def run(
        self,
        command: Command,
        *,
        env: Mapping[str, Any] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: str | None = None,
        on_output: OutputCallback | None = None,
    ) -> RunResult:
        conn = await self._connection()
        remote = self.wrap(command, env=env, cwd=cwd, no_stdin=stdin is None)
        out, err = OutputCapture("stdout", on_output), OutputCapture("stderr", on_output)
        started = time.monotonic()
        if debug.isEnabledFor(logging.DEBUG):
            debug.debug("%s: run %s (cwd %s, stdin %s)", self.host, clip(to_shell(command)), cwd,
                        "none" if stdin is None else f"{len(stdin)} characters")
        channel: asyncssh.SSHClientChannel[str] | None = None
        session: _RunSession | None = None
        try:
            async with self._channels:
                channel, session = await self._open_session(
                    conn, lambda: _RunSession(self._marker, out, err, lambda pgid: self._track("+", pgid)), remote)
                if stdin is not None:
                    channel.write(stdin)
                    channel.write_eof()
                wait = asyncio.shield(session.done)
                lost = await (asyncio.wait_for(wait, timeout) if timeout is not None else wait)
        except BaseException:
            # Timeout, cancel or a crash: kill the remote group before we return or raise.
            if session is not None and not session.done.done():
                await asyncio.shield(self._abort(channel, session))
            raise
        finally:
            if session is not None:
                self._track("-", session.pgid)
        if session.exit_code is None and (lost is not None or self._lost is not None):
            debug.debug("%s: run lost the link after %.3fs", self.host, time.monotonic() - started)
            raise self._unreachable("while running a command", lost)
        if debug.isEnabledFor(logging.DEBUG):
            debug.debug("%s: exit %s after %.3fs (stdout %d, stderr %d characters)", self.host, session.exit_code,
                        time.monotonic() - started, out.size, err.size)
        return RunResult(
            exit_code=session.exit_code, stdout=out.text(), stderr=err.text(),
            duration=time.monotonic() - started, truncated=out.truncated or err.truncated,
        )

    async def open_agent_channel(self, command: Command, *, env: Mapping[str, Any] | None = None,
                                 cwd: str | None = None) -> AgentChannel:
        """The agent on a channel of the connection we hold. It keeps one of the ``max_channels`` slots for its
        life (sshd counts it against MaxSessions like any other), so commands get one fewer."""
        conn = await self._connection()
        remote = self.wrap(command, env=env, cwd=cwd)
        await self._channels.acquire()
        try:
            process = await self._open_channel(lambda: conn.create_process(remote, encoding=None))
        except BaseException:
            self._channels.release()
            raise
        return _SshAgentChannel(self.host, process, self._channels.release, self._marker)

    async def _open_session(self, conn: asyncssh.SSHClientConnection, factory: Any, remote: str) -> Any:
        return await self._open_channel(
            lambda: conn.create_session(factory, remote, encoding="utf-8", errors="replace"))

    async def _open_channel(self, opener: Callable[[], Awaitable[Any]]) -> Any:
        """Open a channel and start a command. sshd frees a session slot a moment after it closes the
        channel, so a refusal right after a close is retried briefly; a sustained refusal is an error."""
        for attempt in range(OPEN_RETRIES + 1):
            try:
                return await opener()
            except asyncssh.ChannelOpenError as exc:
                if self._lost is not None:
                    raise self._unreachable("opening a channel", exc) from None
                if attempt == OPEN_RETRIES:
                    raise TransportError(
                        f"{self.host}: cannot open a channel: {exc.reason} (the server allows fewer sessions than "
                        f"max_channels={self.spec.max_channels}; lower it in the inventory)"
                    ) from None
                await asyncio.sleep(0.01 * 2**attempt)
            except (asyncssh.Error, OSError) as exc:
                raise self._unreachable("opening a channel", exc) from None
        raise AssertionError("unreachable")

    async def _abort(self, channel: asyncssh.SSHClientChannel[str] | None, session: _RunSession) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(session.pgid_seen.wait(), PGID_WAIT)
        if session.pgid and session.pgid > 1 and self._lost is None and self._conn is not None:
            await self.signal_group(session.pgid)
        if channel is not None:
            channel.close()

    async def signal_group(self, pgid: int, *, grace: float = KILL_GRACE) -> None:
        """TERM the group, KILL it after ``grace`` seconds; on its own channel, outside the pool."""
        if pgid <= 1 or self._conn is None:
            return
        script = f"bash -c {shlex.quote(term_kill_script([pgid], grace))}"
        async with self._kill_channel:
            with contextlib.suppress(asyncssh.Error, OSError, asyncio.TimeoutError):
                await self._conn.run(script, check=False, timeout=grace + 15)

    # -- files -----------------------------------------------------------------------------
    async def put(self, local_path: Path, remote_path: str, *, mode: int = 0o600) -> None:
        await self.put_files([(Path(local_path), remote_path)], mode=mode)

    async def put_files(self, pairs: Sequence[tuple[Path, str]], *, mode: int = 0o600) -> None:
        """All the files over one SFTP session, PUT_CONCURRENCY at a time: a session costs round trips to set up
        (channel, subsystem, version), so at 30 ms RTT one per file made pushing the 26 probe files take seconds."""
        if debug.isEnabledFor(logging.DEBUG):
            debug.debug("%s: put %d file(s): %s", self.host, len(pairs), clip(", ".join(r for _, r in pairs), 500))
        for local, _ in pairs:
            if not Path(local).is_file():
                raise TransportError(f"{self.host}: cannot copy {local}: no such file")
        conn = await self._connection()
        failed: list[tuple[Path, str, str, Exception]] = []  # (local, sftp path, path as given, why)

        async def one(sftp: asyncssh.SFTPClient, limit: asyncio.Semaphore, local: Path, shown: str) -> None:
            remote = _remote_path(shown)
            async with limit:
                try:
                    await sftp.put(os.fspath(local), remote)
                    await sftp.chmod(remote, mode)
                except (asyncssh.Error, OSError) as exc:  # every copy ends before the session closes
                    failed.append((local, remote, shown, exc))

        try:
            async with self._channels, conn.start_sftp_client() as sftp:
                limit = asyncio.Semaphore(PUT_CONCURRENCY)
                await asyncio.gather(*(one(sftp, limit, Path(local), shown) for local, shown in pairs))
        except (asyncssh.SFTPError, asyncssh.ChannelOpenError, OSError) as exc:
            if self._lost is not None:
                raise self._unreachable("copying a file", exc) from None
            raise TransportError(f"{self.host}: cannot copy {pairs[0][0]} to {pairs[0][1]}: {exc}") from None
        except asyncssh.Error as exc:
            raise self._unreachable("copying a file", exc) from None
        if not failed:
            return
        local, remote, shown, error = failed[0]
        if self._lost is not None or (isinstance(error, asyncssh.Error) and not isinstance(error, asyncssh.SFTPError)):
            raise self._unreachable("copying a file", error)
        why = None
        if isinstance(error, asyncssh.SFTPError):  # (else an OSError: reading the local file)
            # SFTP v3 says only "Failure" for a full disk: ask the host what ran out (and remove the partial copies)
            why = await explain_copy_failure(self, remote, size=local.stat().st_size,
                                             also_remove=[f[1] for f in failed])
        more = f" (and {len(failed) - 1} more of the {len(pairs)} files)" if len(failed) > 1 else ""
        raise TransportError(f"{self.host}: cannot copy {local} to {shown}: {why or error}{more}")
