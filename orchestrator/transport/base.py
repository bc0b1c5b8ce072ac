"""The Transport interface.

A transport implements four primitives — ``connect``, ``close``, ``run`` and ``put`` — and gets the
rest (the per-session workdir, cached pushes, detached processes, killing process groups) from this
base class, which builds those out of shell commands. That keeps local and SSH behaviour identical:
the same scripts run in both places, so what the lab proves holds on a real GPU host.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import os
import secrets
import shlex
import signal
import socket
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from orchestrator.errors import HostUnreachable, TransportError
from orchestrator.transport.agent import AgentChannel, AgentPool
from orchestrator.transport.commands import (
    MAX_CAPTURE,
    TERM_KILL,
    Command,
    OutputCallback,
    OutputCapture,
    ProcessHandle,
    RunResult,
    env_prefix,
    term_kill_script,
    to_shell,
)

# Re-exported: the command types were defined here first, and every transport and step imports them from here.
__all__ = ["MAX_CAPTURE", "TERM_KILL", "Command", "OutputCallback", "OutputCapture", "ProcessHandle", "RunResult",
           "Transport", "env_prefix", "remove_workdir_script", "term_kill_script", "to_shell"]

def _tree_stamp(local_dir: Path, pattern: str) -> tuple[tuple[str, int, int], ...]:
    """(relative path, mtime, size) of the tree's files whose names match ``pattern``, by path, as ``Path.rglob``
    picks them (no hidden files or directories, no ``__pycache__``, case-sensitive): scandir, not a glob and a stat
    per path."""
    found = []
    pending = [(local_dir, "")]
    while pending:
        directory, prefix = pending.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.startswith(".") or entry.name == "__pycache__":
                    continue
                if entry.is_dir():
                    pending.append((Path(entry.path), f"{prefix}{entry.name}/"))
                elif fnmatch.fnmatchcase(entry.name, pattern) and entry.is_file():
                    info = entry.stat()
                    found.append((prefix + entry.name, info.st_mtime_ns, info.st_size))
    return tuple(sorted(found))


class Transport(ABC):
    """One host. Subclasses implement connect/close/run/put; everything else is shared."""

    #: capability flags, Harlequin-style
    supports_detached = True
    supports_agent = False  #: ``open_agent_channel`` works: probe calls can go through a per-session agent

    def __init__(
        self,
        host: str,
        *,
        state_dir: str = "$HOME/.orchestrator",
        session_id: str = "adhoc",
        env: Mapping[str, str] | None = None,
        agent: bool = True,
    ) -> None:
        self.host = host
        self.use_agent = agent  # the inventory's `agent: false` sends every probe one-shot
        self.agents = AgentPool(self)
        self.base_env: dict[str, str] = dict(env or {})  # exported for every command on this host
        self.state_dir = state_dir
        self.session_id = session_id
        self._workdir: str | None = None
        self._workdir_lock = asyncio.Lock()
        self._pushed: dict[str, str] = {}  # content hash -> remote path
        # (local dir, pattern) -> (each file's name, mtime and size; the tree's content hash): a probe call asks for
        # the pushed tree each time, and re-reading and hashing every probe file was most of a source read's cost
        # on the orchestrator's side once the agent took the host's Python start away.
        self._tree_digests: dict[tuple[str, str], tuple[tuple[tuple[str, int, int], ...], str]] = {}

    # -- primitives -------------------------------------------------------------------------
    async def connect(self) -> None:  # noqa: B027 - optional for transports with nothing to open
        """Open the connection (no-op for local). Raises HostUnreachable."""

    async def close(self) -> None:  # noqa: B027
        """Close the connection; remote processes started detached keep running."""

    @abstractmethod
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
        """Run to completion, streaming output. On cancel or timeout the command's whole process group
        is killed before this returns/raises. Raises HostUnreachable, asyncio.TimeoutError, CancelledError."""

    @abstractmethod
    async def put(self, local_path: Path, remote_path: str, *, mode: int = 0o600) -> None:
        """Copy one file to the host (parent directory must exist). Raises TransportError."""

    async def open_agent_channel(self, command: Command, *, env: Mapping[str, Any] | None = None,
                                 cwd: str | None = None) -> AgentChannel:
        """Start ``command`` with pipes both ways that stay open, for the remote agent (``supports_agent``).
        Raises TransportError where the transport has no such channel, HostUnreachable."""
        raise TransportError(f"{self.host}: {type(self).__name__} cannot hold an agent channel")

    def track_group(self, sign: Literal["+", "-"], pgid: int | None) -> None:  # noqa: B027 - optional, as connect
        """A process group started on the host outside ``run`` (the agent, its calls) begins (+) or ends (-): a
        transport whose connection can drop kills the live ones when it does (SSH: the guardian)."""

    async def stop_agents(self) -> None:
        """Stop this host's agents (each kills what it still runs). Part of ``close`` and ``remove_workdir``."""
        await self.agents.close()

    # -- shared behaviour -------------------------------------------------------------------
    async def check(self, command: Command, **kwargs: Any) -> RunResult:
        """``run`` that raises TransportError with the output tail when the exit code is not 0."""
        result = await self.run(command, **kwargs)
        if result.exit_code != 0:
            tail = (result.stderr or result.stdout)[-2000:]
            raise TransportError(f"{self.host}: command failed with exit {result.exit_code}: {tail.strip()}")
        return result

    async def workdir(self) -> str:
        """The per-session directory on the host (mode 0700), created on first use; absolute path."""
        async with self._workdir_lock:
            if self._workdir is None:
                path = f"{self.state_dir}/sessions/{self.session_id}"
                script = f'umask 077; mkdir -p "{path}/procs" "{path}/files" "{path}/logs" && chmod 700 "{path}" && cd "{path}" && pwd -P'
                result = await self.check(script)
                self._workdir = result.stdout.strip().splitlines()[-1]
            return self._workdir

    async def put_cached(self, local_path: Path) -> str:
        """Push a file once per session, keyed by content hash; returns its remote path."""
        data = Path(local_path).read_bytes()
        digest = hashlib.sha256(data).hexdigest()[:16]
        if digest in self._pushed:
            return self._pushed[digest]
        workdir = await self.workdir()
        remote = f"{workdir}/files/{digest}-{Path(local_path).name}"
        await self.put(Path(local_path), remote, mode=0o600)
        self._pushed[digest] = remote
        return remote

    async def put_tree(self, local_dir: Path, *, pattern: str = "*.py") -> str:
        """Push a package's tree (the probes: ``remote_probes/`` and its sub-packages) into one content-addressed
        remote dir, as ``<remote dir>/<its name>/...``: the remote dir is the root to put on ``sys.path``, and the
        package imports there as it does here. The content hash is computed again only when a file's path, mtime or
        size changed."""
        local_dir = Path(local_dir)
        stamp = _tree_stamp(local_dir, pattern)
        files = [(local_dir / rel, rel) for rel, _, _ in stamp]
        cached = self._tree_digests.get((str(local_dir), pattern))
        if cached is not None and cached[0] == stamp:
            digest = cached[1]
        else:
            digest = hashlib.sha256(b"".join(rel.encode() + b"\0" + path.read_bytes() for path, rel in files)
                                    ).hexdigest()[:16]
            self._tree_digests[(str(local_dir), pattern)] = (stamp, digest)
        key = f"tree:{digest}"
        if key in self._pushed:
            return self._pushed[key]
        workdir = await self.workdir()
        remote_dir = f"{workdir}/files/{local_dir.name}-{digest}"
        directories = sorted({f"{remote_dir}/{local_dir.name}/{rel}".rsplit("/", 1)[0] for _, rel in files})
        await self.check("mkdir -p " + " ".join(shlex.quote(d) for d in directories or [remote_dir]))
        try:
            await self.put_files([(path, f"{remote_dir}/{local_dir.name}/{rel}") for path, rel in files], mode=0o600)
        except TransportError as failed:
            # all or nothing: the files copied before the one that failed would only hold the room a full disk
            # lacks (the `always:` steps after it need some) and look like a tree a later push could trust. Not
            # over a link that is gone: nothing reaches the host, and the error says the host is unreachable
            # (a later push to this content-addressed dir writes every file again: it is not in _pushed)
            if isinstance(failed, HostUnreachable):
                raise
            try:
                await self.remove_pushed_tree(remote_dir)
            except (TransportError, OSError) as cleanup:  # said beside the push's error, never instead of it
                raise TransportError(f"{failed.message}; and {getattr(cleanup, 'message', cleanup)}") from None
            raise
        self._pushed[key] = remote_dir
        return remote_dir

    async def remove_pushed_tree(self, remote_dir: str) -> None:
        """Remove a tree ``put_tree`` made and could not finish. :raises TransportError: it could not."""
        result = await self.run(["rm", "-rf", remote_dir], timeout=60)
        if result.exit_code != 0:
            raise TransportError(f"removing the partial copy {remote_dir} failed too: {result.stderr.strip()[:300]}")

    async def put_files(self, pairs: Sequence[tuple[Path, str]], *, mode: int = 0o600) -> None:
        """Copy several (local, remote) files; one at a time here, transports with a cheaper batch override it.

        :raises TransportError: a file could not be copied (what was copied of it is removed).
        """
        for local, remote in pairs:
            await self.put(local, remote, mode=mode)

    async def spawn_detached(
        self,
        command: Command,
        *,
        name: str,
        env: Mapping[str, Any] | None = None,
        cwd: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> ProcessHandle:
        """Start a long-lived process in its own session (``setsid -w``) and record it in a pidfile.

        The process survives the channel that started it; only ``kill_group`` (or cleanup) stops it.
        """
        if not name.replace("-", "").replace("_", "").isalnum():
            raise TransportError(f"invalid process name {name!r}")
        workdir = await self.workdir()
        pidfile = f"{workdir}/procs/{name}.json"
        log_path = f"{workdir}/logs/{name}.log"
        exit_file = f"{workdir}/procs/{name}.exit"
        pid_tmp = f"{workdir}/procs/{name}.pid"
        # A script runs under its own bash (exec'ing its first word would drop the rest); an argv is exec'd as is.
        program = f"bash -c {shlex.quote(command)}" if isinstance(command, str) else to_shell(command)
        inner = env_prefix({**self.base_env, **(env or {})}) + (f"cd {shlex.quote(cwd)} && " if cwd else "") + "exec " + program
        # setsid makes the child a session and group leader, so its pid is the PGID; -w keeps the
        # wrapper around to record the exit status for post-mortems.
        leader = f"echo $$ > {shlex.quote(pid_tmp)}; {inner}"
        wrapper = (
            f"setsid -w bash -c {shlex.quote(leader)} > {shlex.quote(log_path)} 2>&1 < /dev/null; "
            f"echo $? > {shlex.quote(exit_file)}"
        )
        script = (
            f"rm -f {shlex.quote(pid_tmp)} {shlex.quote(exit_file)}; "
            f"nohup bash -c {shlex.quote(wrapper)} > /dev/null 2>&1 < /dev/null & "
            f"for i in $(seq 1 200); do [ -s {shlex.quote(pid_tmp)} ] && break; sleep 0.01; done; "
            f"cat {shlex.quote(pid_tmp)}"
        )
        result = await self.check(script)
        try:
            pid = int(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError) as exc:
            raise TransportError(f"{self.host}: could not start {name}: no pid recorded") from exc
        handle = ProcessHandle(
            host=self.host, name=name, pid=pid, pgid=pid, log_path=log_path, pidfile=pidfile,
            exit_file=exit_file, command=to_shell(command), session_id=self.session_id, meta=dict(meta or {}),
        )
        await self.check(f"umask 077; printf '%s\\n' {shlex.quote(handle.to_json())} > {shlex.quote(pidfile)}")
        return handle

    async def is_running(self, handle: ProcessHandle) -> bool:
        result = await self.run(f"kill -0 -- -{int(handle.pgid)} 2>/dev/null")
        return result.exit_code == 0

    async def exit_status(self, handle: ProcessHandle) -> int | None:
        result = await self.run(f"cat {shlex.quote(handle.exit_file)} 2>/dev/null")
        text = result.stdout.strip()
        return int(text) if text.lstrip("-").isdigit() else None

    async def kill_group(self, handle: ProcessHandle, *, grace: float = 5.0, sig: int = signal.SIGTERM) -> bool:
        """Signal the whole process group, then SIGKILL it after ``grace`` seconds; True when it is gone.

        The pidfile is removed once the group is gone, so ``cleanup`` does not find it again.
        """
        pgid = int(handle.pgid)
        if pgid <= 1:
            raise TransportError(f"refusing to signal process group {pgid}")
        script = (term_kill_script([pgid], grace, sig=sig)
                  + f" && {{ rm -f {shlex.quote(handle.pidfile)}; echo gone; }} || echo alive")
        result = await self.run(script, timeout=grace + 30)
        return result.stdout.strip().endswith("gone")

    async def list_processes(self, *, all_sessions: bool = True) -> list[ProcessHandle]:
        """Pidfiles of detached processes under the state dir (this session's, or every session's)."""
        pattern = f"{self.state_dir}/sessions/*/procs/*.json" if all_sessions else f"{await self.workdir()}/procs/*.json"
        # a pidfile removed between the glob and the cat (its process ended, its session tidied up) is skipped
        result = await self.run(f"for f in {pattern}; do cat \"$f\" 2>/dev/null; done; true")
        handles = []
        for line in result.stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    handle = ProcessHandle.from_json(line)
                except (ValueError, TypeError):
                    continue
                if handle.name.startswith("run-") and (handle.session_id == self.session_id or _ours(handle)):
                    continue  # our own commands in flight (this listing among them, another session of this process)
                handles.append(handle)
        return handles

    async def read_file_tail(self, path: str, *, lines: int = 40) -> str:
        result = await self.run(f"tail -n {int(lines)} {shlex.quote(path)} 2>/dev/null")
        return result.stdout

    async def remove_workdir(self) -> None:
        """Delete this session's workdir unless a detached process of ours still runs in it.

        Others write into it while it goes (the recorded command doing the removal, a detached wrapper's exit
        status, another transport of the session) and others remove it too (a second transport on the same
        host): so it is first renamed out of the way, atomically, and only then removed. A writer then finds its
        path gone instead of adding to a directory being emptied, and a file that vanishes under the removal is
        what the removal wanted. What still fails (permission denied, a busy mount) raises.

        :raises TransportError: the workdir could not be removed, with the remover's own message.
        """
        await self.stop_agents()  # they run from files in it
        if self._workdir is None:
            return
        try:
            result = await self.run(remove_workdir_script(self._workdir, secrets.token_hex(4)))
            if result.exit_code != 0:
                tail = (result.stderr or result.stdout).strip()[-1000:]
                raise TransportError(f"{self.host}: cannot remove the workdir {self._workdir}: {tail}")
        finally:
            self._workdir = None
            self._pushed.clear()
            await self.stop_agents()


def _ours(handle: ProcessHandle) -> bool:
    """Recorded by this very process (a command of another session it runs, such as a second cleanup's)."""
    meta = handle.meta or {}
    return meta.get("controller_pid") == os.getpid() and meta.get("controller_host") == socket.gethostname()


def remove_workdir_script(workdir: str, token: str) -> str:
    """The shell side of ``remove_workdir``: keep the dir while a detached process's pidfile is in it (pidfiles
    named run-* belong to plain commands, this one included: they do not keep it), else rename it to a hidden
    name beside it (never listed as a session) and remove that; exit 0 when the workdir is gone or kept."""
    q = shlex.quote(workdir)
    return (
        f"d={q}; "
        "ls \"$d\"/procs/*.json 2>/dev/null | grep -v '/run-[0-9]*\\.json$' | grep -q . && exit 0; "
        f't="$(dirname -- "$d")/.removing-$(basename -- "$d")-{token}"; '
        # a rename that fails because the dir is gone already (another remover won) leaves nothing to do
        'mv -- "$d" "$t" 2>/dev/null || { [ -e "$d" ] || exit 0; t=$d; }; '
        # rm -f is silent about entries gone meanwhile; a retry covers one added by a writer whose cwd is in it
        'for i in 1 2; do rm -rf -- "$t" 2>/dev/null && [ ! -e "$t" ] && exit 0; done; '
        'rm -rf -- "$t" && [ ! -e "$t" ]'
    )
