"""ServerManager: the servers one session started, on any host, and their whole lifecycle.

start (port check or auto-pick, detached spawn in its own process group with a pidfile, readiness wait with
the server log streamed into the session, requested-vs-effective diff), stop (TERM the group, KILL after
the grace, verify the port is free), restart, status, stop_all. A server that dies or never becomes ready
fails with its exit code and last log lines, and is killed so nothing is left behind. The session's
finalizer calls ``stop_all`` on success, failure and cancel alike; ``keep: true`` servers survive it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from orchestrator.errors import HostUnreachable, ServerError, TransportError, UserInputError
from orchestrator.events import Output, ServerEvent, ServerEventType
from orchestrator.servers.base import EngineAdapter, Launcher, LaunchSpec
from orchestrator.servers.client import ServerClient
from orchestrator.servers.flags import flag_key
from orchestrator.servers.preflight import Preflight, run_preflight
from orchestrator.servers.ranks import (
    RankHost,
    RankProcess,
    first_dead_worker,
    process_name,
    stop_ranks,
    worker_states,
)
from orchestrator.servers.startlog import StartFailure, analyse_start_failure
from orchestrator.servers.warm import ENV_VAR as WARM_ENV_VAR
from orchestrator.servers.warm import said_in_log, warm_starts_enabled
from orchestrator.transport.base import ProcessHandle, Transport

Emit = Callable[[Any], None]
LOG_TAIL_LINES = 40
#: how much of a failed start's log is read for its error (SGLang's usage text alone runs to hundreds of lines)
FAILURE_LOG_LINES = 2000


class ServerStartError(ServerError):
    """Start-up failed; ``result`` still describes the server (exit code, log tail) for the session."""

    def __init__(self, message: str, result: dict[str, Any]) -> None:
        super().__init__(message)
        self.result = result


@dataclass
class ServerRecord:
    name: str
    host: str
    adapter: EngineAdapter
    transport: Transport
    client: ServerClient
    spec: LaunchSpec
    keep: bool = False
    grace: float | None = None
    handle: ProcessHandle | None = None
    status: str = "new"  # starting | ready | failed | stopped
    argv: list[str] = field(default_factory=list)
    effective: dict[str, Any] = field(default_factory=dict)
    diff: dict[str, Any] = field(default_factory=dict)
    ready_s: float | None = None
    log_tail: str = ""
    exit_code: int | None = None
    step_id: str | None = None
    failure: StartFailure | None = None
    preflight: Preflight | None = None
    check_flags: bool = True  # run the pre-flight check before each start (kept for restarts)
    # a multi-node server (``nodes: N``): every rank in order, rank 0 (this record's host) first; empty for one node
    ranks: list[RankProcess] = field(default_factory=list)
    workers: list[RankHost] = field(default_factory=list)  # kept for restarts
    dist_host: str = "127.0.0.1"  # rank 0's address as the workers reach it
    launcher: Launcher | None = None  # which program was started and why (detected per start, or the step's)
    decisions: dict[str, Any] | None = None  # the engine's start-up decisions (vLLM: servers/vllm_startup.py)
    #: how it started when a warm interpreter was offered (servers/warm.py): what its log said, or why none was
    warm_start: str | None = None
    warm_key: str | None = None  # the warm interpreter it was offered (not stopped while a server of it runs)

    @property
    def nodes(self) -> int:
        return 1 + len(self.workers)

    @property
    def url(self) -> str:
        bind = self.spec.bind if self.spec.bind not in ("0.0.0.0", "::", "") else "127.0.0.1"
        return f"http://{bind}:{self.spec.port}"

    def as_result(self) -> dict[str, Any]:
        """What a ``server`` step registers."""
        return {
            "name": self.name, "engine": self.adapter.name, "host": self.host, "status": self.status,
            "url": self.url, "port": self.spec.port, "model": self.spec.model, "flags": dict(self.spec.flags),
            "pid": self.handle.pid if self.handle else None, "pgid": self.handle.pgid if self.handle else None,
            "log_path": self.handle.log_path if self.handle else None, "command": self.argv,
            "effective": self.diff.get("effective", {}), "overrides": self.diff.get("overrides", []),
            "adjustments": self.diff.get("adjustments", []), "unverified": self.diff.get("unverified", []),
            "ready_s": self.ready_s, "exit_code": self.exit_code, "log_tail": self.log_tail, "keep": self.keep,
            "failure": self.failure.as_dict() if self.failure else None, "warm_start": self.warm_start,
            "preflight": self.preflight.as_dict() if self.preflight else None,
            "nodes": self.nodes, "hosts": [self.host, *(w.host for w in self.workers)],
            "ranks": [r.as_dict() for r in self.ranks],
            "launcher": self.launcher.as_dict() if self.launcher else None,
            "decisions": self.decisions,
        }


@dataclass
class WarmProcess:
    """A warm interpreter this session started on a host (servers/warm.py): its servers fork from it."""

    host: str
    transport: Transport
    handle: ProcessHandle
    socket: str


class ServerManager:
    """One per session (``SessionServices.servers``, orchestrator/session/compose.py)."""

    def __init__(self, *, emit: Emit | None = None, session_id: str = "") -> None:
        self.emit = emit
        self.session_id = session_id
        self.servers: dict[str, ServerRecord] = {}
        self.warm: dict[str, WarmProcess] = {}  # per host, program and environment
        self.warm_starts = warm_starts_enabled()

    # -- lookup ------------------------------------------------------------------------------
    def get(self, name: str) -> ServerRecord:
        if name not in self.servers:
            known = ", ".join(sorted(self.servers)) or "none started in this session"
            raise UserInputError(f"no server named {name!r} (servers: {known})")
        return self.servers[name]

    def running(self) -> list[ServerRecord]:
        return [r for r in self.servers.values() if r.status in ("starting", "ready")]

    # -- start -------------------------------------------------------------------------------
    async def start(
        self, *, name: str, host: str, transport: Transport, adapter: EngineAdapter, spec: LaunchSpec,
        client_python: str, ready_timeout: float | None = None, keep: bool = False, grace: float | None = None,
        step_id: str | None = None, on_log: Callable[[str], None] | None = None, auto_port: bool = False,
        preflight: bool = True, workers: list[RankHost] | None = None, dist_host: str = "127.0.0.1",
    ) -> ServerRecord:
        """Start and wait until ready; with ``preflight`` the installed SGLang's own parser checks the command line
        first (servers/preflight.py) and a refusal fails the start in seconds, before the server is spawned (the
        session's warm interpreter for its engine, if it has one, may have been: later starts use it).

        ``workers``: a multi-node server (servers/ranks.py): ranks 1.. on these hosts, rank 0 on ``host``, which
        the workers reach at ``dist_host`` on a port picked free there. Readiness is rank 0's; a failed start
        stops every rank and says how each worker ended.

        :raises ServerStartError: (refused by the pre-flight check, dies, never ready, port taken), UserInputError.
        """
        old = self.servers.get(name)
        if old is not None and old.status in ("starting", "ready"):
            raise UserInputError(f"server {name!r} is already running on {old.host} (port {old.spec.port}); "
                                 "stop or restart it")
        client = ServerClient(transport, client_python, adapter, **adapter.client_keys(spec.flags))
        record = ServerRecord(name=name, host=host, adapter=adapter, transport=transport, client=client, spec=spec,
                              keep=keep, grace=grace, step_id=step_id, check_flags=preflight,
                              workers=list(workers or []), dist_host=dist_host)
        if auto_port:
            answer = await client.call("port", {"host": spec.bind, "max": adapter.max_auto_port})
            record.spec = spec = replace(spec, port=int(answer["port"]))
        else:
            answer = await client.call("port", {"host": spec.bind, "port": spec.port})
            if not answer["free"]:
                record.status = "failed"
                why = f"port {spec.port} on {host} is already in use"
                record.failure = StartFailure(cause="port_in_use", summary=why, reason="not_started")
                raise ServerStartError(f"{why}; pick another port or `port: auto`", record.as_result())
        launch_spec = spec
        if spec.launcher is None:
            record.launcher = await adapter.detect_launcher(transport, spec)
            if record.launcher is not None:  # record.spec keeps no launcher: a restart checks again
                launch_spec = replace(spec, launcher=record.launcher.argv)
        else:
            record.launcher = Launcher("given", adapter.launcher_argv(spec), "the step's `launcher`")
        record.argv = adapter.build_argv(launch_spec)
        if record.workers:
            dist_port = int((await client.call("port", {"host": dist_host}))["port"])
            dist_init_addr = f"[{dist_host}]:{dist_port}" if ":" in dist_host else f"{dist_host}:{dist_port}"
            hosts = [RankHost(host, transport), *record.workers]
            record.ranks = [RankProcess(rank=i, host=h.host, transport=h.transport,
                                        argv=adapter.rank_argv(replace(spec, python=h.python or spec.python),
                                                               nnodes=len(hosts), rank=i,
                                                               dist_init_addr=dist_init_addr))
                            for i, h in enumerate(hosts)]
            record.argv = record.ranks[0].argv
        # before the check: the warm interpreter is the session's (not this server's), and its imports overlap it
        env = await self._offer_warm_start(record, launch_spec)
        if preflight and adapter.preflight:
            await self._preflight(record)
        meta = {"kind": "server", "engine": adapter.name, "port": spec.port, "bind": spec.bind, "keep": keep,
                "controller_host": socket.gethostname(), "controller_pid": os.getpid(), "started_at": time.time()}
        if record.ranks:
            meta.update(server=name, nnodes=len(record.ranks), rank=0)
        record.handle = await transport.spawn_detached(record.argv, name=f"server-{name}", env=env, meta=meta)
        record.status = "starting"
        self.servers[name] = record  # registered before waiting: cancel or failure still stops it
        if record.ranks:
            record.ranks[0].handle = record.handle
            try:
                await self._spawn_workers(record, meta)
            except BaseException:
                await asyncio.shield(self._abort(record, "a worker rank could not be started"))
                raise
        launched = f" [launcher {record.launcher.name}: {record.launcher.reason}]" if record.launcher else ""
        self._event("server_started", record, detail=" ".join(record.argv) + launched)
        timeout = ready_timeout if ready_timeout is not None else adapter.default_ready_timeout
        started = time.monotonic()
        try:
            wait = await self._wait_ready(record, timeout, on_log)
        except BaseException:
            # Cancelled (Ctrl-C, a step timeout) or the client broke: a half-started server must not linger.
            await asyncio.shield(self._abort(record, "start-up interrupted"))
            raise
        if not wait.get("ready"):
            await self._fail_start(record, wait, timeout)
        record.ready_s = round(time.monotonic() - started, 3)
        await self._read_effective(record)
        record.status = "ready"
        said = (record.decisions or {}).get("summary")
        warm = "" if record.warm_start is None else (
            " (forked from the session's warm interpreter)" if record.warm_start.startswith("forked")
            else f" (started cold: {record.warm_start.removeprefix('cold: ')})")
        self._event("server_ready", record, detail=f"ready in {record.ready_s:.1f}s at {record.url}{warm}"
                    + (f"; vLLM decided: {said}" if said else ""))
        return record

    async def _offer_warm_start(self, record: ServerRecord, spec: LaunchSpec) -> dict[str, str]:
        """The server's environment, with its warm interpreter's address when its engine has one (servers/warm.py):
        started here on first use per host, program and environment, then reused. One that cannot be started, or
        that ended, is said in the record (``warm_start``) and the server starts cold; one that ended is not
        started again (each start would wait for it to fail again)."""
        # a kept server outlives the session, and so its warm interpreter: it starts as its own process
        warm = None if record.ranks or record.keep or not self.warm_starts else record.adapter.warm_start(spec)
        if warm is None:
            return spec.env
        key = json.dumps([record.host, warm.argv(""), sorted(spec.env.items())])
        process = self.warm.get(key)
        if process is not None and not await record.transport.is_running(process.handle):
            status = await record.transport.exit_status(process.handle)
            tail = (await record.transport.read_file_tail(process.handle.log_path, lines=3)).strip()
            record.warm_start = (f"cold: the session's warm interpreter ended (exit status {status})"
                                 + (f": {tail.splitlines()[-1][:300]}" if tail else ""))
            return spec.env
        if process is None:
            digest = hashlib.sha256(f"{self.session_id}\n{os.getpid()}\n{key}".encode()).hexdigest()[:16]
            name = f"orchestrator-warm-{digest}"
            meta = {"kind": "warm_interpreter", "engine": record.adapter.name, "socket": name,
                    "controller_host": socket.gethostname(), "controller_pid": os.getpid(), "started_at": time.time()}
            try:
                handle = await record.transport.spawn_detached(warm.argv(name), name=f"warm-{digest[:12]}",
                                                               env=spec.env, meta=meta)
            except TransportError as exc:
                record.warm_start = f"cold: the warm interpreter could not be started: {exc}"
                return spec.env
            process = self.warm[key] = WarmProcess(record.host, record.transport, handle, name)
        record.warm_key = key
        return {**spec.env, WARM_ENV_VAR: f"{process.socket}:{process.handle.pid}"}

    async def _wait_ready(self, record: ServerRecord, timeout: float,
                          on_log: Callable[[str], None] | None) -> dict[str, Any]:
        """Rank 0's readiness wait; for a multi-node server, also watch the workers: one that exits ends the wait
        at once (``reason: worker_exited``) instead of rank 0 waiting for it until the timeout."""
        assert record.handle is not None
        wait = record.client.call(
            "wait", {"url": record.url, "log": record.handle.log_path, "pgid": record.handle.pgid,
                     "timeout": timeout},
            on_log=on_log, timeout=timeout + 60,
        )
        if not record.ranks:
            return await wait
        waiting = asyncio.ensure_future(wait)
        watching = asyncio.ensure_future(first_dead_worker(record.ranks))
        try:
            await asyncio.wait({waiting, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waiting, watching):
                if not task.done():
                    task.cancel()
            await asyncio.gather(waiting, watching, return_exceptions=True)
        if waiting.done() and not waiting.cancelled() and waiting.exception() is None:
            return waiting.result()
        if watching.cancelled() or watching.exception() is not None:
            return waiting.result()  # raises the wait's own error
        dead = watching.result()
        assert dead.handle is not None
        # confirmed by its exit status (an unreachable host raises here: its allocation ended, say that instead)
        for _ in range(20):  # the setsid wrapper writes the exit status just after the group dies
            dead.exit_code = await dead.transport.exit_status(dead.handle)
            if dead.exit_code is not None:
                break
            await asyncio.sleep(0.1)
        return {"ready": False, "reason": "worker_exited", "rank": dead.rank}

    async def _spawn_workers(self, record: ServerRecord, meta: dict[str, Any]) -> None:
        """Ranks 1.. in parallel (each joins rank 0, which is already listening or retried by the engine)."""

        async def spawn(rank: RankProcess) -> None:
            rank.handle = await rank.transport.spawn_detached(
                rank.argv, name=process_name(record.name, rank.rank), env=record.spec.env,
                meta={**meta, "rank": rank.rank, "rank0_host": record.host})

        results = await asyncio.gather(*(spawn(r) for r in record.ranks[1:]), return_exceptions=True)
        failed = [(r, e) for r, e in zip(record.ranks[1:], results, strict=True) if isinstance(e, BaseException)]
        if failed:
            rank, exc = failed[0]
            if not isinstance(exc, Exception):
                raise exc
            message = exc.message if isinstance(exc, ServerError | HostUnreachable) else str(exc)
            raise ServerError(f"server {record.name!r}: rank {rank.rank} on {rank.host} could not be started: "
                              f"{message}") from exc

    async def _preflight(self, record: ServerRecord) -> None:
        check = record.preflight = await run_preflight(record.transport, record.adapter, record.spec)
        if check.ok:
            return
        failure = record.failure = check.failure()
        record.status, record.exit_code = "failed", check.exit_code
        why = (f"was refused by the pre-flight check (SGLang {check.version}'s own parser, {check.route} route, "
               f"{check.seconds}s); nothing was started")
        self._event("server_failed", record, detail=f"refused by the pre-flight check; {failure.label}: "
                                                   f"{failure.summary}")
        raise ServerStartError(failure_message(record, why, failure), record.as_result())

    async def _fail_start(self, record: ServerRecord, wait: dict[str, Any], timeout: float) -> None:
        assert record.handle is not None
        transport = record.transport
        if wait.get("reason") == "exited":
            for _ in range(20):  # the setsid wrapper writes the exit status just after the group dies
                record.exit_code = await transport.exit_status(record.handle)
                if record.exit_code is not None:
                    break
                await asyncio.sleep(0.1)
            why = f"exited with code {record.exit_code} during start-up"
        elif wait.get("reason") == "worker_exited":
            dead = record.ranks[int(wait["rank"])]
            why = f"lost rank {dead.rank} on {dead.host} during start-up: it exited with code {dead.exit_code}"
        else:
            why = f"did not become ready within {timeout:g}s (/health: {wait.get('health') or 'no answer'})"
        workers_said = ""
        if record.ranks:
            workers_said = await worker_states(record.ranks, lines=10)  # before the stop ends them
            why += f" (rank 0 of a {len(record.ranks)}-node server)"
        await self._kill_all(record, grace=min(record.grace or record.adapter.stop_grace, 5.0))
        log_text = await transport.read_file_tail(record.handle.log_path, lines=FAILURE_LOG_LINES)
        record.log_tail = "\n".join(log_text.rstrip().splitlines()[-LOG_TAIL_LINES:])
        reason, exit_code = str(wait.get("reason") or "timeout"), record.exit_code
        if reason == "worker_exited":  # the cause is in the worker's log, not in rank 0's (still waiting for it)
            dead = record.ranks[int(wait["rank"])]
            assert dead.handle is not None
            log_text = await dead.transport.read_file_tail(dead.handle.log_path, lines=FAILURE_LOG_LINES)
            reason, exit_code = "exited", dead.exit_code
        failure = record.failure = analyse_start_failure(
            log_text, reason=reason, exit_code=exit_code, timeout=timeout,
            draft_path=_draft_path(record.spec.flags))
        # what the server changed before it failed, from its own adjustment lines (SGLang logs the seed's 16 -> 2
        # draft tokens before a CPU backend refuses EAGLE): no /server_info to read, every flag else unverified
        record.diff = record.adapter.compare_args(record.spec, {}, log_text)
        record.status = "failed"
        self._event("server_failed", record, detail=f"{why}; {failure.label}: {failure.summary}")
        message = failure_message(record, why, failure)
        if workers_said:
            message += "\nthe other ranks:\n" + workers_said
        raise ServerStartError(message, record.as_result())

    async def _kill_all(self, record: ServerRecord, *, grace: float) -> bool:
        """Every rank's group (one for a single-node server); True when all are gone."""
        if not record.ranks:
            assert record.handle is not None
            return await record.transport.kill_group(record.handle, grace=grace)
        return not await stop_ranks(record.ranks, grace)

    async def _abort(self, record: ServerRecord, why: str) -> None:
        assert record.handle is not None
        try:
            await self._kill_all(record, grace=min(record.grace or record.adapter.stop_grace, 5.0))
        finally:
            record.status = "failed"
            self._event("server_failed", record, detail=why)

    async def _read_effective(self, record: ServerRecord) -> None:
        info: Any = None
        for path in record.adapter.info_paths:
            status, info = await record.client.get_json(record.url + path)
            if status == 200 and isinstance(info, dict):
                break
            info = None
        assert record.handle is not None
        log_text = await record.transport.read_file_tail(record.handle.log_path, lines=5000)
        record.log_tail = "\n".join(log_text.rstrip().splitlines()[-LOG_TAIL_LINES:])
        record.effective = record.adapter.resolved_args(info, log_text)
        record.diff = record.adapter.compare_args(record.spec, record.effective, log_text)
        record.decisions = record.adapter.start_decisions(log_text, record.effective)
        record.warm_start = said_in_log(log_text) or record.warm_start
        if info is None and record.adapter.info_paths:
            record.diff["unverified"] = sorted(set(record.diff["unverified"]) | {"(no /server_info answer)"})

    # -- stop --------------------------------------------------------------------------------
    async def stop(self, name: str) -> ServerRecord:
        """TERM the group, KILL after the grace, wait for the port to be free. :raises ServerError:"""
        record = self.get(name)
        if record.handle is None or record.status in ("stopped", "failed"):
            return record
        grace = record.grace if record.grace is not None else record.adapter.stop_grace
        gone = await self._kill_all(record, grace=grace)
        record.status = "stopped"
        try:
            record.log_tail = await record.transport.read_file_tail(record.handle.log_path, lines=LOG_TAIL_LINES)
            for rank in record.ranks[1:]:  # the session keeps each worker's last lines (its workdir goes at the end)
                if rank.handle is not None:
                    rank.log_tail = await rank.transport.read_file_tail(rank.handle.log_path, lines=LOG_TAIL_LINES)
            port = await record.client.call("port", {"host": record.spec.bind, "port": record.spec.port, "wait": 5})
        except HostUnreachable as exc:
            if not gone:
                raise
            # its host went away (a Slurm allocation ended): every process went with it, nothing to check there
            self._event("server_stopped", record, detail=f"its host is gone: {exc.message}")
            return record
        alive = [f"rank {r.rank} on {r.host} (group {r.handle.pgid if r.handle else '?'})"
                 for r in record.ranks if not r.gone]
        what = f"STILL ALIVE: {', '.join(alive)}" if alive else "every rank gone" if record.ranks else (
            "gone" if gone else "STILL ALIVE")
        detail = None if gone and port["free"] else (
            f"process group {record.handle.pgid} {what}; "
            f"port {record.spec.port} {'free' if port['free'] else 'STILL IN USE'}")
        self._event("server_stopped", record, detail=detail)
        if detail:
            raise ServerError(f"server {name!r} on {record.host}: {detail}")
        return record

    async def stop_all(self, *, include_kept: bool = True) -> list[str]:
        """Stop every running server (in parallel); returns the names stopped. Errors are collected, then raised."""
        targets = [r for r in self.running() if include_kept or not r.keep]
        results = await asyncio.gather(*(self.stop(r.name) for r in targets), return_exceptions=True)
        problems = [str(r) for r in results if isinstance(r, BaseException)]
        problems += await self._stop_warm()
        if problems:
            raise ServerError("; ".join(problems))
        return [r.name for r in targets]

    async def _stop_warm(self) -> list[str]:
        """Stop the warm interpreters no running server was started from (a kept server's stays with it, for
        ``orchestrator cleanup``); what could not be stopped, said."""
        in_use = {r.warm_key for r in self.running()}
        problems = []
        for key, process in list(self.warm.items()):
            if key in in_use:
                continue
            del self.warm[key]
            try:
                if not await process.transport.kill_group(process.handle, grace=5.0):
                    problems.append(f"the warm interpreter on {process.host} (group {process.handle.pgid}) "
                                    "is STILL ALIVE")
            except HostUnreachable:
                pass  # its host went away (an allocation ended), and it with it
            except TransportError as exc:
                problems.append(f"stopping the warm interpreter on {process.host}: {exc}")
        return problems

    async def restart(self, name: str, *, flags: dict[str, Any] | None = None, replace_flags: bool = False,
                      ready_timeout: float | None = None, step_id: str | None = None,
                      on_log: Callable[[str], None] | None = None) -> ServerRecord:
        """Stop and start again with the same launch spec, flags merged (or replaced) with ``flags``."""
        old = self.get(name)
        await self.stop(name)
        new_flags = dict(flags or {}) if replace_flags else {**old.spec.flags, **(flags or {})}
        spec = replace(old.spec, flags=new_flags)
        return await self.start(name=name, host=old.host, transport=old.transport, adapter=old.adapter, spec=spec,
                                client_python=old.client.python, ready_timeout=ready_timeout, keep=old.keep,
                                grace=old.grace, step_id=step_id or old.step_id, on_log=on_log,
                                preflight=old.check_flags, workers=old.workers, dist_host=old.dist_host)

    async def status(self, name: str) -> dict[str, Any]:
        record = self.get(name)
        alive = record.handle is not None and await record.transport.is_running(record.handle)
        for rank in record.ranks[1:]:  # a multi-node server is up only while every rank is
            alive = alive and rank.handle is not None and await rank.transport.is_running(rank.handle)
        health = None
        if alive:
            answer = await record.client.call("request", {"url": record.url + record.adapter.health_path, "timeout": 5})
            health = answer["status"]
        if not alive and record.status in ("starting", "ready"):
            record.status = "failed"
            assert record.handle is not None
            record.exit_code = await record.transport.exit_status(record.handle)
            record.log_tail = await record.transport.read_file_tail(record.handle.log_path, lines=LOG_TAIL_LINES)
        return {**record.as_result(), "alive": alive, "health": health}

    # -- events ------------------------------------------------------------------------------
    def _event(self, kind: ServerEventType, record: ServerRecord, *, detail: str | None = None) -> None:
        if self.emit is None:
            return
        self.emit(ServerEvent(
            type=kind, server_id=record.name, step_id=record.step_id, host=record.host, engine=record.adapter.name,
            port=record.spec.port, pgid=record.handle.pgid if record.handle else None, flags=dict(record.spec.flags),
            effective=record.diff.get("effective", {}), overrides=record.diff.get("overrides", []), detail=detail,
            ranks=[r.host for r in record.ranks],
        ))

    def log_forwarder(self, step_id: str, host: str) -> Callable[[str], None]:
        """Server log lines as ``output`` events (stream ``server_log``) of the step that is waiting."""
        def forward(text: str) -> None:
            if self.emit is not None:
                self.emit(Output(step_id=step_id, host=host, stream="server_log", text=text))
        return forward


def _draft_path(flags: dict[str, Any]) -> str | None:
    for name, value in flags.items():
        if flag_key(str(name)) in ("speculative_draft_model_path", "speculative_draft_model") and value:
            return str(value)
    return None


def failure_message(record: ServerRecord, why: str, failure: StartFailure) -> str:
    """The step's error: what happened and the likely cause, then the server's own error lines (access-log noise
    left out), then where the whole log is. Short enough for a console's first dozen lines."""
    head = (f"server {record.name!r} ({record.adapter.name}) on {record.host} {why}\n"
            f"cause: {failure.label} — {failure.summary}")
    if failure.error_lines:
        body = "the server's own error:\n" + "\n".join(f"  {line}" for line in failure.error_lines)
    elif failure.last_lines:
        body = "no error in its log; its last lines (access log left out):\n" + \
            "\n".join(f"  {line}" for line in failure.last_lines)
    else:
        body = "(the log is empty)"
    where = f"\nfull log: {record.handle.log_path}" if record.handle is not None else ""
    return f"{head}\n{body}{where}"
