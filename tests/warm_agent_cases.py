"""The agent's warm interpreters (remote_probes/agent/agent.py, Zygote), run over each transport like tests/agent_cases.py.

A probe that declares ``# orchestrator-agent: preload torch`` is forked from an interpreter that imported torch
once; these cases check that its children see what a plain fork's see (torch ops, torch.get_num_threads() under the
call's OMP_NUM_THREADS, the call's env, its own process group), that nothing outlives the agent however it ends, and
that an interpreter that cannot be used is said and counted while its calls run in a plain fork. Real torch, real
forks; the probes are small ones of the tests' own, in a copy of the real package (tests/agent_cases.py probe_dir).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from orchestrator.probes import new_nonce, parse_probe_output
from orchestrator.transport.agent import AgentLost, RemoteAgent
from orchestrator.transport.base import Transport
from tests.agent_cases import PROBES as PLAIN_PROBES
from tests.agent_cases import pgrep, probe_dir, wait_until

WARM_PROBES = {
    "warm_probe.py": '''# orchestrator-agent: preload torch
import os, subprocess, sys
PRELOADED = "torch" in sys.modules  # before this script imports anything: what the zygote left loaded
import torch
from remote_probes.agent.protocol import run_probe
from remote_probes.testing.echo_probe import meet

def main(args):
    how = args.get("how")
    if how == "raise":
        raise RuntimeError("the warm probe broke on purpose")
    if how == "exit":
        os._exit(7)
    if how == "segv":
        os.kill(os.getpid(), 11)
    if args.get("child"):
        subprocess.run(["sleep", args["child"]])
    if args.get("meet"):
        meet(args)
    # big enough for torch's intra-op pool; float64: in float32 the 147,456-term sum moved by 1e-5 relative between
    # two runs with the same 2 threads (the matmul kernel and the pool's split of the reduction are not fixed), so
    # "the same figure" would be a float32 rounding contest, not the warm child's environment
    x = torch.linspace(-1, 1, 384 * 384, dtype=torch.float64).reshape(384, 384)
    value = float((x @ x.T).tanh().sum())
    return {"pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0), "preloaded": PRELOADED,
            "threads": torch.get_num_threads(), "value": value, "omp": os.environ.get("OMP_NUM_THREADS"),
            "nonce": os.environ["ORCH_PROBE_NONCE"], "cwd": os.getcwd()}

if __name__ == "__main__":
    run_probe(main)
''',
    "warm_missing_probe.py": '''# orchestrator-agent: preload no_such_module_for_the_warm_test
import os
from remote_probes.agent.protocol import run_probe

def main(args):
    return {"pid": os.getpid(), "ppid": os.getppid()}

if __name__ == "__main__":
    run_probe(main)
''',
}


def warm_probe_dir(tmp_path: Path) -> Path:
    assert "echo_probe.py" in PLAIN_PROBES
    return probe_dir(tmp_path, WARM_PROBES)


async def start(transport: Transport, tmp_path: Path) -> tuple[RemoteAgent, str]:
    remote = await transport.put_tree(warm_probe_dir(tmp_path), pattern="*.py")
    agent = await transport.agents.get(sys.executable, remote)
    assert agent is not None, transport.agents.unavailable
    return agent, remote


async def call(agent: RemoteAgent, probe: str, args: dict[str, Any], *, env: dict[str, str] | None = None,
               **kwargs: Any) -> tuple[dict[str, Any], Any]:
    nonce = new_nonce()
    run = await agent.run_probe(probe, args, nonce=nonce, env=env or {}, **kwargs)
    return parse_probe_output(run.stdout, nonce, exit_status=run.exit_code, stderr=run.stderr).model_dump(), run


async def ok(agent: RemoteAgent, probe: str, args: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    outcome, run = await call(agent, probe, args, **kwargs)
    assert outcome["ok"], (outcome.get("error"), run.stderr[-2000:])
    return outcome["result"]


async def zygotes(agent: RemoteAgent) -> list[dict[str, Any]]:
    return list((await agent.request("ping"))["zygotes"])


def alive(pid: int) -> bool:
    """Running (a zombie is not: it has exited, only its entry waits for a reaper)."""
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    return bool(state) and not state.startswith("Z")


# -- the cases ---------------------------------------------------------------------------------------------------
async def case_warm_children_see_what_plain_ones_see(transport: Transport, tmp_path: Path) -> None:
    agent, remote = await start(transport, tmp_path)
    assert agent.info is not None
    for threads in ("1", "2"):
        env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}  # both: torch's MKL build reads the latter
        warm = await ok(agent, "warm_probe", {}, env=env)
        again = await ok(agent, "warm_probe", {}, env=env)
        plain = await ok(agent, "warm_probe", {}, env=env, isolate=True)
        # Forked by the zygote (one per env), torch already loaded there; the plain fork imported it itself.
        assert warm["ppid"] == again["ppid"] != agent.info.pid and plain["ppid"] == agent.info.pid
        assert warm["preloaded"] and again["preloaded"] and not plain["preloaded"]
        # The call's env was in place before torch loaded: its pool has the threads the call asked for.
        assert warm["threads"] == plain["threads"] == int(threads) and warm["omp"] == threads, (warm, plain)
        assert math.isclose(warm["value"], plain["value"], rel_tol=1e-9), (warm["value"], plain["value"])
        assert warm["pgid"] == warm["pid"] and warm["cwd"] == remote and warm["nonce"] != again["nonce"]
    # Without the variable: what a fresh interpreter of this environment gets.
    fresh = (await asyncio.to_thread(subprocess.run, [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                                     capture_output=True, text=True, check=True)).stdout.strip()
    default = await ok(agent, "warm_probe", {})
    assert default["threads"] == int(fresh) and default["preloaded"]
    found = await zygotes(agent)
    assert len(found) == 3 and all(z["state"] == "ready" and z["modules"] == ["torch"] for z in found), found
    assert sorted(z["served"] for z in found) == [1, 2, 2]
    # Concurrent warm calls run side by side: 6 at one rendezvous.
    meet = f"{remote}/meet-{uuid.uuid4().hex[:8]}"
    met = await asyncio.gather(*(ok(agent, "warm_probe", {"n": i, "meet": meet, "of": 6}) for i in range(6)))
    assert len({r["pid"] for r in met}) == 6 and len({r["ppid"] for r in met}) == 1


async def case_warm_crashes_timeouts_and_cancels(transport: Transport, tmp_path: Path) -> None:
    agent, _ = await start(transport, tmp_path)
    first = await ok(agent, "warm_probe", {})
    raised, _ = await call(agent, "warm_probe", {"how": "raise"})
    assert raised["error"]["kind"] == "crash" and "broke on purpose" in raised["error"]["message"]
    exited, run = await call(agent, "warm_probe", {"how": "exit"})
    assert exited["error"]["kind"] == "no_output" and run.exit_code == 7, (exited, run.exit_code)
    segv, run = await call(agent, "warm_probe", {"how": "segv"})
    assert segv["error"]["kind"] == "no_output" and run.exit_code == -signal.SIGSEGV
    mark = f"{uuid.uuid4().int % 10**6 + 10**6}"
    with pytest.raises(asyncio.TimeoutError):
        await call(agent, "warm_probe", {"child": f"5{mark}"}, timeout=3)
    assert await wait_until(lambda: not pgrep(f"sleep 5{mark}"), 10), pgrep(mark)
    task = asyncio.ensure_future(call(agent, "warm_probe", {"child": f"6{mark}"}))
    assert await wait_until(lambda: bool(pgrep(f"sleep 6{mark}")), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not pgrep(f"sleep 6{mark}")  # gone before the cancel returned
    after = await ok(agent, "warm_probe", {})
    assert after["ppid"] == first["ppid"] and agent.alive  # the same zygote served on through all of it
    (zygote,) = await zygotes(agent)
    assert zygote["state"] == "ready" and alive(zygote["pid"])


async def case_warm_agent_killed_mid_call(transport: Transport, tmp_path: Path) -> None:
    agent, _ = await start(transport, tmp_path)
    assert agent.info is not None
    zygote_pid = (await ok(agent, "warm_probe", {}))["ppid"]
    mark = f"{uuid.uuid4().int % 10**6 + 10**6}"
    task = asyncio.ensure_future(call(agent, "warm_probe", {"child": f"7{mark}"}))
    assert await wait_until(lambda: bool(pgrep(f"sleep 7{mark}")), 30)
    os.kill(agent.info.pid, signal.SIGKILL)
    with pytest.raises(AgentLost):
        await asyncio.wait_for(task, 30)
    # The call's group and the zygote both go: it saw EOF from the dead agent, stopped its children, and exited.
    assert await wait_until(lambda: not pgrep(f"sleep 7{mark}") and not alive(zygote_pid), 15), \
        (pgrep(mark), zygote_pid)


async def case_warm_close_mid_call_leaves_nothing(transport: Transport, tmp_path: Path) -> None:
    agent, remote = await start(transport, tmp_path)
    zygote_pid = (await ok(agent, "warm_probe", {}))["ppid"]
    mark = f"{uuid.uuid4().int % 10**6 + 10**6}"
    task = asyncio.ensure_future(call(agent, "warm_probe", {"child": f"8{mark}"}))
    assert await wait_until(lambda: bool(pgrep(f"sleep 8{mark}")), 30)
    await transport.close()
    (ended,) = await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 15)
    assert isinstance(ended, AgentLost) or ended[1].exit_code == -signal.SIGTERM, ended
    assert await wait_until(lambda: not pgrep(f"sleep 8{mark}") and not alive(zygote_pid)
                            and not pgrep(f"{remote}/remote_probes/agent/agent.py"), 15), (pgrep(mark), pgrep(remote))


async def case_unusable_zygote_is_said_counted_and_forks_plainly(transport: Transport, tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    agent, remote = await start(transport, tmp_path)
    assert agent.info is not None
    with caplog.at_level(logging.WARNING, logger="orchestrator.agent"):
        first = await ok(agent, "warm_missing_probe", {})
        second = await ok(agent, "warm_missing_probe", {})
    assert first["ppid"] == second["ppid"] == agent.info.pid  # the plain path: forks of the agent
    assert agent.warm_fallbacks == 2 and transport.agents.warm_fallbacks == 2
    said = [r.getMessage() for r in caplog.records if "warm interpreter" in r.getMessage()]
    assert len(said) == 1 and "no_such_module_for_the_warm_test" in said[0] and "ModuleNotFoundError" in said[0], said
    (zygote,) = await zygotes(agent)
    assert zygote["state"] == "failed" and zygote["fallbacks"] == 2
    assert await wait_until(lambda: not alive(zygote["pid"]), 10)  # it exited after saying so, and was reaped


async def case_zygote_killed_mid_call(transport: Transport, tmp_path: Path) -> None:
    """The warm interpreter itself dies (SIGKILL, so it stops nothing): the agent kills the groups of the calls it
    had forked (they lost their reaper), ends them as killed, and later calls fork plainly, said and counted."""
    agent, _ = await start(transport, tmp_path)
    assert agent.info is not None
    zygote_pid = (await ok(agent, "warm_probe", {}))["ppid"]
    mark = f"{uuid.uuid4().int % 10**6 + 10**6}"
    task = asyncio.ensure_future(call(agent, "warm_probe", {"child": f"4{mark}"}))
    assert await wait_until(lambda: bool(pgrep(f"sleep 4{mark}")), 30)
    os.kill(zygote_pid, signal.SIGKILL)
    _, run = await asyncio.wait_for(task, 30)
    assert run.exit_code == -signal.SIGKILL and "the warm interpreter that forked this call ended" in run.stderr
    assert await wait_until(lambda: not pgrep(f"sleep 4{mark}"), 10), pgrep(mark)
    after = await ok(agent, "warm_probe", {})
    assert after["ppid"] == agent.info.pid and not after["preloaded"] and agent.warm_fallbacks == 1
    (zygote,) = await zygotes(agent)
    assert zygote["state"] == "dead" and not alive(zygote_pid)


async def case_warm_request_starts_the_interpreter_before_the_first_call(transport: Transport,
                                                                         tmp_path: Path) -> None:
    """The session's warm-up (probes/invoke.py ``warm_up``, with an agent's first call): the zygote a probe's later
    calls use starts at once, with no call waiting; a benchmark waits for it (``settle_warm_ups``); the call then
    finds it (one interpreter, not two)."""
    from orchestrator.probes.invoke import PROBE_ENV, settle_warm_ups, warm_up

    agent, _remote = await start(transport, tmp_path)
    assert await settle_warm_ups(transport) is None  # nothing asked yet: nothing to wait for
    await warm_up(agent, ("warm_probe", "echo_probe"))
    assert agent.warm_asked
    found = await zygotes(agent)
    assert [(z["modules"], z["served"]) for z in found] == [(["torch"], 0)], found  # echo_probe needs none
    assert await settle_warm_ups(transport) is None
    assert [z["state"] for z in await zygotes(agent)] == ["ready"]
    result = await ok(agent, "warm_probe", {}, env=PROBE_ENV)
    found = await zygotes(agent)
    assert len(found) == 1 and found[0]["served"] == 1 and result["preloaded"], found
    with pytest.raises(Exception, match="invalid probe name"):
        await agent.request("warm", probes=["../x"], env=PROBE_ENV)
