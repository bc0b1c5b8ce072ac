"""LocalTransport: commands run as subprocesses of this machine, each in its own process group."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.errors import TransportError
from orchestrator.transport.agent import LINE_LIMIT, AgentChannel, AgentUnavailable
from orchestrator.transport.base import (
    Command,
    OutputCallback,
    OutputCapture,
    ProcessHandle,
    RunResult,
    Transport,
    to_shell,
)

KILL_GRACE = 2.0


async def _pump(stream: asyncio.StreamReader, capture: OutputCapture) -> None:
    decoder_buffer = b""
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            break
        data = decoder_buffer + chunk
        # Hold back an incomplete UTF-8 sequence at the end so characters are never split.
        cut = len(data)
        for back in range(1, min(4, len(data)) + 1):
            byte = data[-back]
            if byte & 0xC0 == 0x80:
                continue
            if byte & 0x80:
                need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4
                if back < need:
                    cut = len(data) - back
            break
        decoder_buffer = data[cut:]
        if cut:
            capture.feed(data[:cut].decode("utf-8", errors="replace"))
    if decoder_buffer:
        capture.feed(decoder_buffer.decode("utf-8", errors="replace"))


class _Child:
    """A started command: asyncio's Process (its streams, ``wait``) and the transport under it, kept so that
    ``terminate`` can close it when waiting cannot finish."""

    def __init__(self, transport: asyncio.SubprocessTransport,
                 protocol: asyncio.subprocess.SubprocessStreamProtocol) -> None:
        self.transport = transport
        self.proc = asyncio.subprocess.Process(transport, protocol, asyncio.get_running_loop())

    async def terminate(self) -> None:
        """The whole group goes, TERM first, then KILL; the transport is closed whatever happens.

        A process that left the group (``setsid``) may hold our pipes open past the KILL: asyncio then
        keeps the transport open, reading for nobody (and a ``wait`` begun before the exit returns only
        once the pipes close). Closing it here means none is collected after the event loop closed."""
        pid = self.proc.pid
        _kill_group(pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(self.proc.wait()), KILL_GRACE)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            pass
        _kill_group(pid, signal.SIGKILL)
        try:
            await asyncio.wait_for(asyncio.shield(self.proc.wait()), KILL_GRACE)
        except asyncio.TimeoutError:
            self.transport.close()  # drops our ends of the pipes; wait() can finish now
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.proc.wait()), KILL_GRACE)
        finally:
            self.transport.close()


async def _spawn(argv: list[str], *, limit: int = 2**16, **kwargs: Any) -> _Child:
    """``create_subprocess_exec`` that a cancel cannot cut in half.

    asyncio answers a cancel that arrives after the fork but while it still connects the pipes by killing
    the leader alone: the children it already started (same group, same pipes) live on, and asyncio's own
    cleanup then waits for those pipes to close, i.e. until the children end. So the spawn is shielded;
    on cancel it is let finish, the whole group is stopped as on any other cancel, and the cancel goes on.
    """
    loop = asyncio.get_running_loop()

    def protocol() -> asyncio.subprocess.SubprocessStreamProtocol:
        return asyncio.subprocess.SubprocessStreamProtocol(limit=limit, loop=loop)  # default: asyncio's

    spawn = asyncio.ensure_future(loop.subprocess_exec(protocol, *argv, **kwargs))
    try:
        return _Child(*await asyncio.shield(spawn))
    except asyncio.CancelledError:
        while not spawn.done():  # a few milliseconds; a second cancel meanwhile changes nothing
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([spawn])
        if not spawn.cancelled() and spawn.exception() is None:
            await _Child(*spawn.result()).terminate()
        raise


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class _LocalAgentChannel(AgentChannel):
    """The agent as our child, in its own session; its stdin is a pipe from us, so should we die (even by
    SIGKILL) it reads EOF and stops what it started."""

    def __init__(self, child: _Child) -> None:
        self.child = child
        self.stderr_tail = ""
        stderr = child.proc.stderr
        assert stderr is not None
        self._stderr = asyncio.create_task(self._keep_stderr(stderr))

    async def _keep_stderr(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            self.stderr_tail = (self.stderr_tail + chunk.decode("utf-8", "replace"))[-2000:]

    async def readline(self) -> bytes:
        assert self.child.proc.stdout is not None
        return await self.child.proc.stdout.readline()

    def write(self, data: bytes) -> None:
        stdin = self.child.proc.stdin
        if stdin is None or stdin.is_closing():
            raise ConnectionResetError("the agent's stdin is closed")
        stdin.write(data)

    async def close(self) -> None:
        stdin = self.child.proc.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()
        try:  # EOF makes it stop its calls (TERM, KILL after 2 s) and exit
            await asyncio.wait_for(asyncio.shield(self.child.proc.wait()), KILL_GRACE + 3)
        except asyncio.TimeoutError:
            await self.child.terminate()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stderr, 1)
        self.child.transport.close()

    def end_reason(self) -> str:
        code = self.child.proc.returncode
        status = "still running" if code is None else f"killed by signal {-code}" if code < 0 else f"exit {code}"
        tail = self.stderr_tail.strip()
        return status + (f": {tail[-500:]}" if tail else "")


class LocalTransport(Transport):
    """This machine. ``run`` starts ``bash -c`` (or the argv) in a new session so cancel kills it all."""

    supports_agent = True

    async def open_agent_channel(self, command: Command, *, env: Mapping[str, Any] | None = None,
                                 cwd: str | None = None) -> AgentChannel:
        full_env = {**os.environ, **self.base_env, **{k: str(v) for k, v in (env or {}).items()}}
        argv = ["bash", "-c", command] if isinstance(command, str) else [str(part) for part in command]
        try:
            child = await _spawn(argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                 stderr=asyncio.subprocess.PIPE, cwd=os.path.expanduser(cwd) if cwd else None,
                                 env=full_env, start_new_session=True, limit=LINE_LIMIT)
        except OSError as exc:
            raise AgentUnavailable(f"{self.host}: cannot start the agent: {exc}") from None
        return _LocalAgentChannel(child)

    async def close(self) -> None:
        await self.stop_agents()

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
        full_env = dict(os.environ)
        full_env.update(self.base_env)
        full_env.update({k: str(v) for k, v in (env or {}).items()})
        if isinstance(command, str):
            argv = ["bash", "-c", command]
        else:
            argv = [str(part) for part in command]
        started = time.monotonic()
        try:
            child = await _spawn(
                argv,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=os.path.expanduser(cwd) if cwd else None,
                env=full_env,
                start_new_session=True,  # its own process group: we can kill every child on cancel
            )
        except OSError as exc:
            # A missing cwd or program is the user's mistake, not ours: report it as a shell on an SSH
            # host would (exit 1 for `cd`, 127 not found, 126 not executable), so both transports agree.
            missing_cwd = bool(cwd) and not os.path.isdir(os.path.expanduser(cwd or ""))
            code = 1 if missing_cwd else 126 if isinstance(exc, PermissionError) else 127
            message = f"{cwd if missing_cwd else exc.filename or argv[0]}: {exc.strerror or exc}\n"
            if on_output is not None:
                on_output("stderr", message)
            return RunResult(exit_code=code, stdout="", stderr=message, duration=time.monotonic() - started)
        proc = child.proc
        out, err = OutputCapture("stdout", on_output), OutputCapture("stderr", on_output)
        stdout_pipe, stderr_pipe = proc.stdout, proc.stderr
        assert stdout_pipe is not None and stderr_pipe is not None

        async def communicate() -> int:
            if stdin is not None and proc.stdin is not None:
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    proc.stdin.write(stdin.encode())
                    await proc.stdin.drain()
                    proc.stdin.close()
            await asyncio.gather(_pump(stdout_pipe, out), _pump(stderr_pipe, err))
            return await proc.wait()

        record: Path | None = None
        try:  # from here on every way out waits for the process: none is left to the garbage collector
            record = self._record_command(proc.pid, command)
            if timeout is not None:
                code = await asyncio.wait_for(communicate(), timeout)
            else:
                code = await communicate()
        except BaseException:
            # Timeout, cancel or crash: the whole group goes, TERM first, then KILL.
            await child.terminate()
            raise
        finally:
            if record is not None:
                with contextlib.suppress(OSError):
                    record.unlink()
        return RunResult(
            exit_code=code, stdout=out.text(), stderr=err.text(),
            duration=time.monotonic() - started, truncated=out.truncated or err.truncated,
        )

    def _record_command(self, pid: int, command: Command) -> Path | None:
        """A pidfile for the running command's group, so `orchestrator cleanup` can stop it should this
        process be SIGKILLed (its own session keeps it alive past our death). Removed when it ends.

        None when the record's directory is gone: the session's workdir is being removed (nothing else removes
        ``procs/``), by this very command perhaps (``remove_workdir``'s does, and it runs before its record is
        written), and a command whose session is being tidied away needs no record there."""
        workdir = Path(os.path.expandvars(os.path.expanduser(self.state_dir))) / "sessions" / self.session_id
        if self._workdir is None:  # the same layout workdir() makes, without a round trip
            for sub in ("procs", "files", "logs"):
                (workdir / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(workdir, 0o700)
            self._workdir = str(workdir.resolve())
        path = workdir / "procs" / f"run-{pid}.json"
        handle = ProcessHandle(
            host=self.host, name=f"run-{pid}", pid=pid, pgid=pid, log_path="", pidfile=str(path), exit_file="",
            command=to_shell(command)[:500], session_id=self.session_id,
            meta={"kind": "command", "controller_pid": os.getpid(), "controller_host": socket.gethostname()},
        )
        try:
            path.write_text(handle.to_json() + "\n", encoding="utf-8")
        except FileNotFoundError:
            if path.parent.is_dir():
                raise  # the directory is there: the failure is another one, and said
            return None
        except OSError as exc:  # a full disk: the user's to fix, said as such (not an internal error)
            with contextlib.suppress(OSError):
                path.unlink()
            raise TransportError(f"{self.host}: cannot record the command's process for `orchestrator cleanup` in "
                                 f"{path}: {exc.strerror or exc}") from None
        return path

    async def remove_pushed_tree(self, remote_dir: str) -> None:
        """In-process: no command to start (whose record a full disk could not hold either)."""
        target = Path(os.path.expandvars(os.path.expanduser(remote_dir)))
        try:
            shutil.rmtree(target)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise TransportError(f"removing the partial copy {target} failed too: {exc.strerror or exc}") from None

    async def put(self, local_path: Path, remote_path: str, *, mode: int = 0o600) -> None:
        if not Path(local_path).is_file():
            raise TransportError(f"{self.host}: cannot copy {local_path}: no such file")
        target = Path(os.path.expandvars(os.path.expanduser(remote_path)))
        try:
            shutil.copyfile(local_path, target)
            os.chmod(target, mode)
        except OSError as exc:  # a full disk, a missing directory: the user's to fix, not an internal error
            with contextlib.suppress(OSError):
                if target.is_file():
                    target.unlink()  # no half-written file that a later run could take for the whole one
            raise TransportError(f"{self.host}: cannot copy {local_path} to {target}: {exc.strerror or exc}") from None
