"""Running a probe on a host: push the probe directory once per session (content hash), run the
script with the host's python, args on stdin, a fresh nonce, progress lines streamed as they come, and check
the result against the probe's pydantic model before anyone reads it."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from orchestrator.errors import ProbeError, TransportError
from orchestrator.probes import (
    PROBES,
    PUSH_PATTERN,
    check_result,
    new_nonce,
    outcome_from_document,
    parse_probe_output,
    parse_progress_line,
    probe_module,
    probes_dir,
)
from remote_probes.agent.probes import PROBES as REMOTE_PROBES

if TYPE_CHECKING:
    from orchestrator.transport.agent import RemoteAgent
    from orchestrator.transport.base import Transport

log = logging.getLogger(__name__)
ProgressCallback = Callable[[dict[str, Any]], None]
#: every probe's environment on its host (the nonce aside): the agent keys its warm interpreters by it
PROBE_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
#: the longest a benchmark waits for a warm-up's imports to end before it measures anyway (and says so)
WARM_SETTLE_TIMEOUT = 300.0


class _StderrSplitter:
    """Turns streamed stderr chunks into progress events and plain stderr lines."""

    def __init__(self, on_progress: ProgressCallback | None, on_stderr: Callable[[str], None] | None) -> None:
        self.buffer = ""
        self.on_progress = on_progress
        self.on_stderr = on_stderr

    def feed(self, text: str) -> None:
        self.buffer += text
        *lines, self.buffer = self.buffer.split("\n")
        for line in lines:
            self._line(line)

    def flush(self) -> None:
        if self.buffer:
            self._line(self.buffer)
            self.buffer = ""

    def _line(self, line: str) -> None:
        progress = parse_progress_line(line)
        if progress is not None:
            if self.on_progress:
                self.on_progress(progress)
        elif self.on_stderr and line.strip():
            self.on_stderr(line + "\n")


async def warm_up(agent: RemoteAgent, probes: tuple[str, ...]) -> None:
    """With an agent's first call: start now the warm interpreters the session's later torch probes will use
    (the draft test's, the reconcile's), so their import runs while the session starts its first server, not
    when the draft test is measured. A warm-up that fails costs only time: the call forks plainly (and says so)."""
    agent.warm_asked = True
    if not probes:
        return
    try:
        await agent.request("warm", probes=list(probes), env=PROBE_ENV)
    except TransportError as exc:
        log.warning("%s: warming the interpreters of %s failed (they start on first use): %s",
                    agent.transport.host, ", ".join(probes), exc)


async def settle_warm_ups(transport: Transport, *, timeout: float = WARM_SETTLE_TIMEOUT) -> str | None:
    """Return once no warm interpreter the session's warm-up started on this host is still importing: a benchmark
    must not measure a server while an import competes for its CPU. A settled host costs one ping per agent.
    None when settled; else why the benchmark measures anyway (it says so in its result)."""
    deadline = time.monotonic() + timeout
    for agent in [a for a in transport.agents.agents.values() if a.warm_asked and a.alive]:
        while True:
            try:
                zygotes = (await agent.request("ping")).get("zygotes") or []
            except TransportError as exc:
                return f"could not ask {transport.host}'s agent whether its warm-up is done: {exc}"
            if not any(isinstance(z, dict) and z.get("state") == "starting" for z in zygotes):
                break
            if time.monotonic() > deadline:
                return f"a warm interpreter on {transport.host} still imported after {timeout:.0f} s"
            await asyncio.sleep(0.05)  # polling the state (still importing?), bounded by the deadline
    return None


async def run_probe(
    transport: Transport,
    probe: str,
    args: dict[str, Any],
    *,
    python: str = "python3",
    timeout: float | None = None,
    on_progress: ProgressCallback | None = None,
    on_stderr: Callable[[str], None] | None = None,
    result_model: type[BaseModel] | None = None,
    use_agent: bool = True,
) -> dict[str, Any]:
    """Run ``remote_probes/<probe>.py`` on the transport's host and return its result.

    The result is validated with ``result_model`` (default: the probe's model in ``PROBES``, when it has one).
    It runs through the transport's per-session agent where the host can start one (``use_agent=False``, or the
    inventory's ``agent: false``, forces a one-shot Python start).

    :raises ProbeError: the probe reported an error, crashed, printed no result, timed out, or returned a result
        that does not match its model (kind ``bad_result``).
    :raises HostUnreachable: the host went away.
    :raises AgentLost: the agent ended during the call (the next call starts a new one).
    """
    source = probes_dir()
    module = probe_module(probe)
    if module is None:
        raise ProbeError(f"unknown probe {probe!r}; known: {', '.join(sorted(REMOTE_PROBES))}")
    remote_dir = await transport.put_tree(source, pattern=PUSH_PATTERN)
    nonce = new_nonce()
    splitter = _StderrSplitter(on_progress, on_stderr)

    def on_output(stream: str, text: str) -> None:
        if stream == "stderr":
            splitter.feed(text)

    env = {"ORCH_PROBE_NONCE": nonce, **PROBE_ENV}
    # The per-session agent when the host can run one (a fork on the host, no Python start); else one-shot. Both
    # give the same stdout/stderr/exit status, parsed below the same way.
    agent = await transport.agents.get(python, remote_dir) if use_agent else None
    if agent is not None and not agent.warm_asked:
        await warm_up(agent, transport.agents.warm_probes)
    if agent is not None:
        result = await agent.run_probe(probe, args, nonce=nonce, env=env, timeout=timeout, on_output=on_output)
    else:
        result = await transport.run([python, "-m", module], env=env, cwd=remote_dir,
                                     stdin=json.dumps(args), timeout=timeout, on_output=on_output)
    splitter.flush()
    if result.document is None and (result.exit_code == 127 or "No such file or directory" in result.stderr[-300:]
                                    and not result.stdout):
        raise ProbeError(f"{transport.host}: cannot run {python!r} (set the host's `python` in the inventory)")
    if result.document is not None:  # run in the agent's own process: its document came as it is, no markers
        outcome = outcome_from_document(result.document, stray=result.stdout, exit_status=result.exit_code,
                                        stderr_tail=result.stderr[-2000:])
    else:
        outcome = parse_probe_output(result.stdout, nonce, exit_status=result.exit_code, stderr=result.stderr)
    if not outcome.ok:
        err = outcome.error
        assert err is not None
        detail = ""
        tb = err.details.get("traceback") if err.details else None
        if err.kind in ("crash", "no_output", "missing_markers") and (tb or err.details.get("stderr_tail")):
            detail = "\n" + str(tb or err.details.get("stderr_tail"))[-1500:]
        error = ProbeError(f"probe {probe} on {transport.host} failed ({err.kind}): {err.message}{detail}")
        error.kind, error.reason = err.kind, err.message
        raise error
    assert outcome.result is not None
    model = result_model or (PROBES[probe][1] if probe in PROBES else None)
    if model is not None:
        check_result(probe, model, outcome.result, host=transport.host)
    return outcome.result

