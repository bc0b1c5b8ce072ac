"""The orchestrator's side of the per-session remote agent (remote_probes/agent/agent.py).

A transport that can hold a process open with pipes both ways (``supports_agent``: a subprocess locally, an SSH
channel on the connection already open) starts the agent once per interpreter per session; after that a probe call
is one JSON line each way and a fork on the host instead of a Python start. ``AgentPool`` is the one place that
decides whether a call goes through an agent: the host's Python cannot start it → the pool says why (once, in the
log) and every caller falls back to one-shot probes; the agent dies mid-call → that call fails with ``AgentLost``
(the step fails with that sentence, the session goes on) and the next call starts a new agent.

The agent dies with its channel: the channel closes (session end, connection cut, this process killed) → EOF on its
stdin → it kills every process group it started and exits. Each call's process group is also registered with the
transport's guardian (``Transport.track_group``), and killed from here should the agent itself be SIGKILLed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.debuglog import clip
from orchestrator.errors import HostUnreachable, TransportError
from orchestrator.transport.commands import (
    Command,
    OutputCallback,
    OutputCapture,
    RunResult,
    term_kill_script,
)

if TYPE_CHECKING:
    from orchestrator.transport.base import Transport

log = logging.getLogger("orchestrator.agent")

PROTOCOL = 1
START_TIMEOUT = 20.0  # a host's first Python start after boot can be slow; one that says nothing this long is broken
CANCEL_WAIT = 6.0  # the agent TERMs, then KILLs after 2 s; this bounds how long a cancelled call waits for that
MAX_CALLS = 32  # calls in flight per agent: each is a forked process on the host
LINE_LIMIT = 64 * 1024 * 1024  # one answer line: 64 KiB of output, JSON-escaped (at most 6x), with room to spare
AGENT_SCRIPT = "remote_probes/agent/agent.py"  # in the pushed tree (Transport.put_tree)
# The one answer that ends a call: a process's exit, a request's result, the agent's error, or the document of a
# probe it ran in its own process.
_FINAL_EVENTS = ("exit", "result", "error", "document")


class AgentLost(TransportError):
    """The agent ended while calls were in flight (killed, crashed, or its channel closed)."""

    title = "Remote agent lost"


class AgentUnavailable(TransportError):
    """The agent could not be started (no such Python, too old, no hello): callers fall back to one-shot probes."""


class AgentChannel(ABC):
    """A started agent's pipes, as a transport opens them."""

    @abstractmethod
    async def readline(self) -> bytes:
        """One line from the agent's stdout; ``b""`` at EOF."""

    @abstractmethod
    def write(self, data: bytes) -> None:
        """Bytes to the agent's stdin (the transport buffers; lines are small)."""

    @abstractmethod
    async def close(self) -> None:
        """EOF on the agent's stdin (it stops its calls and exits), a bounded wait, then the channel is closed."""

    @abstractmethod
    def end_reason(self) -> str:
        """How the agent ended, for messages: exit status or signal, and the tail of its stderr."""


@dataclass
class _Call:
    on_event: Callable[[dict[str, Any]], None]
    final: asyncio.Future[dict[str, Any]]
    pgid: int | None = None


@dataclass
class AgentInfo:
    pid: int
    pgid: int
    python: str
    preload_failed: dict[str, str] = field(default_factory=dict)


class RemoteAgent:
    """One running agent on one host. Calls are concurrent; each gets its own id and its own process."""

    def __init__(self, transport: Transport, channel: AgentChannel) -> None:
        self.transport = transport
        self.channel = channel
        self.info: AgentInfo | None = None
        self.dead: str | None = None  # why it ended, once it has
        self._calls: dict[int, _Call] = {}
        self._next_id = 0
        self._slots = asyncio.Semaphore(MAX_CALLS)
        self._reader: asyncio.Task[None] | None = None
        # Calls that ran in a plain fork because their warm interpreter could not be used (the agent's ``note``
        # events): counted here, each distinct reason logged once.
        self.warm_fallbacks = 0
        self.warm_asked = False  # the session's warm-up request sent (probes/invoke.py, once per agent)
        self._noted: set[str] = set()

    @property
    def alive(self) -> bool:
        return self.dead is None

    async def start(self, *, timeout: float = START_TIMEOUT) -> None:
        """Wait for the agent's hello. :raises AgentUnavailable: it printed something else, ended, or said nothing."""
        try:
            line = await asyncio.wait_for(self.channel.readline(), timeout)
        except asyncio.TimeoutError:
            await self.channel.close()
            raise AgentUnavailable(f"{self.transport.host}: the agent sent no hello within {timeout:g}s") from None
        try:
            hello = json.loads(line)["hello"]
            info = AgentInfo(pid=int(hello["pid"]), pgid=int(hello["pgid"]), python=str(hello["python"]),
                             preload_failed=dict(hello.get("preload_failed") or {}))
            if hello.get("protocol") != PROTOCOL:
                raise ValueError(f"protocol {hello.get('protocol')!r}, expected {PROTOCOL}")
        except (ValueError, KeyError, TypeError) as exc:
            await self.channel.close()
            said = line.decode("utf-8", "replace").strip()[:300]
            raise AgentUnavailable(f"{self.transport.host}: the agent did not start ({exc}): "
                                   f"{said or self.channel.end_reason()}") from None
        self.info = info
        self.transport.track_group("+", info.pgid)
        self._reader = asyncio.create_task(self._read(), name=f"agent-reader-{self.transport.host}")

    async def _read(self) -> None:
        reason = "its channel closed"
        try:
            while True:
                line = await self.channel.readline()
                if not line:
                    break
                message = json.loads(line)
                call = self._calls.get(message.get("id"))
                if call is None:  # an answer to nobody is an agent bug: end it loudly rather than guess
                    reason = f"it answered an unknown call: {line[:200]!r}"
                    break
                if message.get("event") in _FINAL_EVENTS:
                    if not call.final.done():
                        call.final.set_result(message)
                else:
                    call.on_event(message)
        except (ValueError, OSError, asyncio.IncompleteReadError, TransportError) as exc:
            reason = f"its channel failed: {type(exc).__name__}: {exc}"
        finally:
            await self._ended(reason)

    async def _ended(self, reason: str) -> None:
        with contextlib.suppress(Exception):  # the channel is gone already; closing is only tidying our end
            await asyncio.shield(self.channel.close())
        self.dead = f"{reason}; {self.channel.end_reason()}"
        if self.info is not None:
            self.transport.track_group("-", self.info.pgid)
        error = AgentLost(f"{self.transport.host}: the remote agent ended mid-call ({self.dead}); the next call "
                          f"starts a new one")
        for call in self._calls.values():
            if not call.final.done():
                call.final.set_exception(error)

    async def close(self) -> None:
        """Ends the agent (it kills its calls' process groups) and waits for its reader."""
        await self.channel.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    # -- calls ----------------------------------------------------------------------------------
    def _send(self, request: dict[str, Any]) -> None:
        if self.dead is not None:
            raise AgentLost(f"{self.transport.host}: the remote agent has ended ({self.dead})")
        self.channel.write((json.dumps(request, separators=(",", ":")) + "\n").encode("utf-8"))

    async def request(self, op: str, **payload: Any) -> dict[str, Any]:
        """A call that answers with one result (stat, put, ping). :raises TransportError: the agent said no.
        :raises AgentLost:"""
        final = await self._call({"op": op, **payload}, lambda message: None, timeout=None, cancellable=False)
        if final.get("event") == "error":
            raise TransportError(f"{self.transport.host}: agent {op} failed: {final.get('message')}")
        result = final.get("result")
        return result if isinstance(result, dict) else {}

    async def run_probe(self, probe: str, args: Mapping[str, Any], *, nonce: str, env: Mapping[str, str],
                        timeout: float | None = None, on_output: OutputCallback | None = None,
                        isolate: bool = False) -> RunResult:
        """``remote_probes/<probe>.py`` run in a child of the agent, as ``Transport.run`` would run it one-shot:
        the same stdout, stderr and exit status; or, for a probe that declares itself in-process (see _agent.py),
        in the agent itself: then ``RunResult.document`` holds the probe's document and stderr its progress lines
        (``isolate``: a forked child all the same).
        :raises AgentLost: asyncio.TimeoutError, CancelledError"""
        request: dict[str, Any] = {"op": "probe", "probe": probe, "args": dict(args), "nonce": nonce, "env": dict(env)}
        if isolate:
            request["isolate"] = True
        return await self._process(request, timeout=timeout, on_output=on_output)

    async def run(self, command: Command, *, env: Mapping[str, Any] | None = None, cwd: str | None = None,
                  stdin: str | None = None, timeout: float | None = None,
                  on_output: OutputCallback | None = None) -> RunResult:
        """A command in its own process group, started by the agent (no channel, no shell start-up files)."""
        request: dict[str, Any] = {"op": "run", "env": {k: str(v) for k, v in (env or {}).items()}, "cwd": cwd,
                                   "stdin": stdin}
        request.update({"script": command} if isinstance(command, str) else {"argv": [str(a) for a in command]})
        return await self._process(request, timeout=timeout, on_output=on_output)

    async def _process(self, request: dict[str, Any], *, timeout: float | None,
                       on_output: OutputCallback | None) -> RunResult:
        out, err = OutputCapture("stdout", on_output), OutputCapture("stderr", on_output)
        streams = {"stdout": out, "stderr": err}
        started = time.monotonic()

        def on_event(message: dict[str, Any]) -> None:
            if message.get("event") == "out":
                streams["stderr" if message.get("stream") == "stderr" else "stdout"].feed(str(message.get("text")))

        final = await self._call(request, on_event, timeout=timeout, cancellable=True)
        if final.get("event") == "error":
            raise TransportError(f"{self.transport.host}: the agent could not start the call: {final.get('message')}")
        if final.get("event") == "document":
            document = final.get("document")
            return RunResult(exit_code=0, stdout=out.text(), stderr=err.text(), duration=time.monotonic() - started,
                             truncated=out.truncated or err.truncated,
                             document=document if isinstance(document, dict) else {"ok": None})
        code = final.get("exit_code")
        return RunResult(exit_code=code if isinstance(code, int) else None, stdout=out.text(), stderr=err.text(),
                         duration=time.monotonic() - started, truncated=out.truncated or err.truncated)

    async def _call(self, request: dict[str, Any], on_event: Callable[[dict[str, Any]], None], *,
                    timeout: float | None, cancellable: bool) -> dict[str, Any]:
        async with self._slots:
            self._next_id += 1
            call_id = self._next_id
            call = _Call(on_event=lambda m: None, final=asyncio.get_running_loop().create_future())

            def dispatch(message: dict[str, Any]) -> None:
                if message.get("event") == "started" and isinstance(message.get("pgid"), int):
                    call.pgid = message["pgid"]
                    self.transport.track_group("+", call.pgid)
                elif message.get("event") == "note":
                    self._note(message)
                else:
                    on_event(message)

            call.on_event = dispatch
            self._calls[call_id] = call
            debugging = log.isEnabledFor(logging.DEBUG)
            if debugging:
                log.debug("%s: agent call %d -> %s", self.transport.host, call_id, clip(json.dumps(request, default=str)))
            try:
                self._send({"id": call_id, **request})
                wait = asyncio.shield(call.final)
                final = await (asyncio.wait_for(wait, timeout) if timeout is not None else wait)
                if debugging:
                    log.debug("%s: agent call %d <- %s", self.transport.host, call_id,
                              clip(json.dumps(final, default=str)))
                return final
            except AgentLost:
                if call.pgid:  # the agent cannot kill its child any more: we do, before saying so
                    raise AgentLost(f"{(call.final.exception() or '')}{await self._kill_orphan(call.pgid)}") from None
                raise
            except BaseException:
                # Timeout or cancel: the call's process group goes before we raise (the Transport.run contract).
                if cancellable and not call.final.done():
                    await asyncio.shield(self._cancel(call_id, call))
                raise
            finally:
                self._calls.pop(call_id, None)
                if call.pgid:
                    self.transport.track_group("-", call.pgid)

    def _note(self, message: dict[str, Any]) -> None:
        text = str(message.get("text"))
        if message.get("kind") == "warm_fallback":
            self.warm_fallbacks += 1
        if text not in self._noted:
            self._noted.add(text)
            log.warning("%s: %s", self.transport.host, text)

    async def _cancel(self, call_id: int, call: _Call) -> None:
        with contextlib.suppress(AgentLost):
            self._send({"id": 0, "op": "cancel", "target": call_id})
        try:
            await asyncio.wait_for(asyncio.shield(call.final), CANCEL_WAIT)
        except (asyncio.TimeoutError, AgentLost):
            if call.pgid:  # the agent did not confirm: kill the group ourselves; the cancel goes on regardless
                log.warning("%s: cancelled agent call %s%s", self.transport.host, call_id,
                            await self._kill_orphan(call.pgid))

    async def _kill_orphan(self, pgid: int) -> str:
        """TERM/KILL a call's group over a plain command; returns a clause for the caller's message."""
        try:
            result = await self.transport.run(term_kill_script([pgid], 2.0), timeout=30)
        except (HostUnreachable, asyncio.TimeoutError) as exc:
            return f"; its process group {pgid} could not be killed from here ({exc}); the guardian kills it " \
                   f"when the connection ends"
        if result.exit_code != 0:
            return f"; its process group {pgid} survived TERM and KILL"
        return f"; its process group {pgid} was killed"


class AgentPool:
    """A transport's agents, one per (interpreter, pushed probe directory); started on first use."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.agents: dict[tuple[str, str], RemoteAgent] = {}
        self.unavailable: dict[str, str] = {}  # interpreter -> why the agent cannot run there (fallback: one-shot)
        self.restarts = 0
        # the probes the session will run on this host whose warm interpreters its agents start at once (set by the
        # session composer from the playbook; probes/invoke.py sends them with an agent's first call)
        self.warm_probes: tuple[str, ...] = ()
        self._lock = asyncio.Lock()

    @property
    def warm_fallbacks(self) -> int:
        """Probe calls of this host's running agents that asked for a warm interpreter and ran without one."""
        return sum(agent.warm_fallbacks for agent in self.agents.values())

    async def get(self, python: str, probe_dir: str) -> RemoteAgent | None:
        """The running agent for ``python`` with ``probe_dir`` (the pushed remote_probes), started if needed; None
        when this host cannot run one (the reason is in ``unavailable`` and logged once)."""
        if not self.transport.use_agent or not self.transport.supports_agent or python in self.unavailable:
            return None
        key = (python, probe_dir)
        async with self._lock:
            agent = self.agents.get(key)
            if agent is not None and agent.alive:
                return agent
            if agent is not None:
                self.restarts += 1
                log.info("%s: restarting the remote agent (%s)", self.transport.host, agent.dead)
            try:
                channel = await self.transport.open_agent_channel(
                    [python, "-u", f"{probe_dir}/{AGENT_SCRIPT}"], env={"PYTHONDONTWRITEBYTECODE": "1"}, cwd=probe_dir)
                agent = RemoteAgent(self.transport, channel)
                await agent.start()
            except AgentUnavailable as exc:
                self.unavailable[python] = exc.message
                log.warning("%s; probes run one-shot on this host", exc.message)
                return None
            self.agents[key] = agent
            return agent

    async def close(self) -> None:
        """Stop every agent (each kills what it started). Every agent is stopped even if one fails; the first
        failure is raised after."""
        agents, self.agents = list(self.agents.values()), {}
        failures = []
        for agent in agents:
            try:
                await agent.close()
            except Exception as exc:  # the next agent must still be stopped
                failures.append(exc)
        if failures:
            raise TransportError(f"{self.transport.host}: stopping the remote agent failed: {failures[0]}")
