"""The remote agent's cases, run over each transport (tests/core/test_agent_local.py, tests/ssh/test_agent_over_ssh.py):
the same code serves both, so the same cases must hold on both.

The cases push a probe directory of their own: a copy of the real package (its agent and protocol) with small probes that misbehave
on request (crash, hang with a child, print a lot), which remote_probes/ rightly does not ship.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from orchestrator.errors import TransportError
from orchestrator.probes import new_nonce, outcome_from_document, parse_probe_output, probes_dir
from orchestrator.transport.agent import AgentLost, RemoteAgent
from orchestrator.transport.base import Transport
from tests.waiting import wait_until_async

PROBES = {
    "echo_probe.py": '''
import os, subprocess, time
from remote_probes.agent.protocol import progress, run_probe

def meet(args):
    """Wait at a rendezvous of args["of"] calls (a file each in args["meet"]): only calls that run side by side
    all get past it; serial ones would wait for the others until the deadline, and fail."""
    os.makedirs(args["meet"], exist_ok=True)
    open(os.path.join(args["meet"], str(args["n"])), "w").close()
    deadline = time.monotonic() + 60
    while len(os.listdir(args["meet"])) < args["of"]:
        if time.monotonic() > deadline:
            raise RuntimeError("only %d of %d calls met" % (len(os.listdir(args["meet"])), args["of"]))
        time.sleep(0.01)

def main(args):
    progress("started", n=args.get("n"))
    if args.get("child"):  # a grandchild in the call's group, findable by its argv
        subprocess.run(["sleep", args["child"]])
    if args.get("sleep"):
        time.sleep(args["sleep"])
    if args.get("meet"):
        meet(args)
    return {"n": args.get("n"), "pid": os.getpid(), "cwd": os.getcwd(), "nonce_env": os.environ["ORCH_PROBE_NONCE"]}

if __name__ == "__main__":
    run_probe(main)
''',
    "crash_probe.py": '''
import os, signal
from remote_probes.agent.protocol import run_probe

def main(args):
    if args["how"] == "raise":
        raise RuntimeError("the probe broke on purpose")
    if args["how"] == "exit":
        print("half a line", end="")
        os._exit(7)
    os.kill(os.getpid(), signal.SIGSEGV)

if __name__ == "__main__":
    run_probe(main)
''',
    # In-process (the marker line): run in a thread of the agent itself, misbehaving on request.
    "inproc_probe.py": '''# orchestrator-agent: in-process
import os, sys, threading, time
from remote_probes.agent.protocol import ProbeFailure, progress, run_probe
from remote_probes.testing.echo_probe import meet

def main(args):
    how = args.get("how")
    progress("in process", how=how)
    if how == "raise":
        raise RuntimeError("the in-process probe broke on purpose")
    if how == "fail":
        raise ProbeFailure("told_to", "it failed as told", n=1)
    if how == "exit":
        sys.exit(5)
    if how == "recurse":
        def down(n):
            return down(n + 1)
        down(0)
    if how == "nan":
        return {"x": float("nan")}
    if how == "big":
        return {"x": "y" * 5_000_000}
    if how == "meet":
        meet(args)
    if how == "block":  # until the test lets it go (a file appears), then says it ended (another file)
        deadline = time.monotonic() + 60
        while not os.path.exists(args["until"]) and time.monotonic() < deadline:
            time.sleep(0.01)
        open(args["ended"], "w").close()
    return {"n": args.get("n"), "pid": os.getpid(), "thread": threading.current_thread().name,
            "sys_path": list(sys.path)}

if __name__ == "__main__":
    run_probe(main)
''',
    "huge_probe.py": '''
import sys
from remote_probes.agent.protocol import run_probe

def main(args):
    block = "x" * 1023 + "\\n"
    for _ in range(args["stderr_kib"]):
        sys.stderr.write(block)
    return {"big": "é" * args["result_chars"]}

if __name__ == "__main__":
    run_probe(main)
''',
}


def probe_dir(tmp_path: Path, probes: dict[str, str] | None = None) -> Path:
    """A copy of the package the product pushes (``remote_probes/``, every role package), with the tests' own probes
    in a sub-package of their own (``remote_probes/testing/``), where the agent finds a probe by its name."""
    target = tmp_path / f"agent-probes-{uuid.uuid4().hex[:6]}" / "remote_probes"
    shutil.copytree(probes_dir(), target, ignore=shutil.ignore_patterns("__pycache__"))
    (target / "testing").mkdir()
    (target / "testing" / "__init__.py").write_text("")
    for name, text in {**PROBES, **(probes or {})}.items():
        (target / "testing" / name).write_text(text)
    return target


def pgrep(marker: str) -> list[str]:
    found = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout
    return [line for line in found.splitlines() if "pgrep" not in line]


async def wait_until(predicate, timeout: float = 10.0) -> bool:  # noqa: ANN001
    return await wait_until_async(predicate, timeout)


async def start(transport: Transport, tmp_path: Path) -> tuple[RemoteAgent, str]:
    remote = await transport.put_tree(probe_dir(tmp_path), pattern="*.py")
    agent = await transport.agents.get(sys.executable, remote)
    assert agent is not None, transport.agents.unavailable
    return agent, remote


async def call(agent: RemoteAgent, probe: str, args: dict, **kwargs: object) -> tuple[dict, object]:  # type: ignore[type-arg]
    nonce = new_nonce()
    run = await agent.run_probe(probe, args, nonce=nonce, env={}, **kwargs)  # type: ignore[arg-type]
    if run.document is not None:  # run in the agent's own process
        return outcome_from_document(run.document, exit_status=run.exit_code).model_dump(), run
    outcome = parse_probe_output(run.stdout, nonce, exit_status=run.exit_code, stderr=run.stderr)
    return outcome.model_dump(), run


# -- the cases ---------------------------------------------------------------------------------------------------
async def case_concurrent_calls(transport: Transport, tmp_path: Path) -> None:
    agent, remote = await start(transport, tmp_path)
    assert agent.info is not None
    results = await asyncio.gather(*(call(agent, "echo_probe", {"n": i, "sleep": 0.2}) for i in range(24)))
    assert [r[0]["result"]["n"] for r in results] == list(range(24))
    pids = {r[0]["result"]["pid"] for r in results}
    assert len(pids) == 24 and agent.info.pid not in pids  # each call in a child of its own
    first = results[0]
    assert first[0]["result"]["cwd"] == remote  # as a one-shot run: cwd is the pushed directory
    assert '"message": "started"' in first[1].stderr  # progress lines come through stderr, as they do one-shot
    # Concurrent, not serial: 16 calls meet at one rendezvous, which only calls running side by side can pass.
    meet = f"{remote}/meet-{uuid.uuid4().hex[:8]}"
    met = await asyncio.gather(*(call(agent, "echo_probe", {"n": i, "meet": meet, "of": 16}) for i in range(16)))
    assert all(r[0]["ok"] for r in met), [r[0].get("error") for r in met if not r[0]["ok"]]
    assert await transport.agents.get(sys.executable, remote) is agent  # one agent for the session


async def case_crashing_probes(transport: Transport, tmp_path: Path) -> None:
    agent, _ = await start(transport, tmp_path)
    raised, _ = await call(agent, "crash_probe", {"how": "raise"})
    assert raised["error"]["kind"] == "crash" and "broke on purpose" in raised["error"]["message"]
    assert "RuntimeError" in raised["error"]["details"]["traceback"]
    exited, run = await call(agent, "crash_probe", {"how": "exit"})
    assert exited["error"]["kind"] == "missing_markers" and run.exit_code == 7  # type: ignore[attr-defined]
    segv, run = await call(agent, "crash_probe", {"how": "segv"})
    assert segv["error"]["kind"] == "no_output" and run.exit_code == -signal.SIGSEGV  # type: ignore[attr-defined]
    assert agent.alive and (await call(agent, "echo_probe", {"n": 1}))[0]["result"]["n"] == 1


async def case_huge_output(transport: Transport, tmp_path: Path) -> None:
    agent, _ = await start(transport, tmp_path)
    # A 3.6 MB result document (600k "é", \u-escaped by json.dumps: under MAX_CAPTURE) beside 6 MiB of stderr.
    outcome, run = await call(agent, "huge_probe", {"result_chars": 600_000, "stderr_kib": 6 * 1024})
    assert outcome["ok"] and outcome["result"]["big"] == "é" * 600_000
    assert run.truncated  # type: ignore[attr-defined]  # stderr past MAX_CAPTURE, as Transport.run keeps it
    assert agent.alive


async def case_timeout_and_cancel_kill_the_call(transport: Transport, tmp_path: Path) -> None:
    agent, _ = await start(transport, tmp_path)
    mark = f"{uuid.uuid4().int % 10**6 + 10**6}"
    with pytest.raises(asyncio.TimeoutError):
        await call(agent, "echo_probe", {"child": f"5{mark}"}, timeout=0.5)
    assert await wait_until(lambda: not pgrep(f"sleep 5{mark}"), 10), pgrep(mark)
    task = asyncio.ensure_future(call(agent, "echo_probe", {"child": f"6{mark}"}))
    assert await wait_until(lambda: bool(pgrep(f"sleep 6{mark}")), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not pgrep(f"sleep 6{mark}")  # gone before the cancel returned
    assert agent.alive and (await call(agent, "echo_probe", {"n": 2}))[0]["result"]["n"] == 2


async def case_agent_killed_mid_call(transport: Transport, tmp_path: Path) -> None:
    agent, remote = await start(transport, tmp_path)
    assert agent.info is not None
    mark = f"{uuid.uuid4().int % 10**6 + 10**6}"
    task = asyncio.ensure_future(call(agent, "echo_probe", {"child": f"7{mark}"}))
    assert await wait_until(lambda: bool(pgrep(f"sleep 7{mark}")), 10)
    os.kill(agent.info.pid, signal.SIGKILL)
    with pytest.raises(AgentLost, match="the remote agent ended mid-call .*SIG.*KILL|signal 9") as lost:
        await asyncio.wait_for(task, 30)
    assert "process group" in str(lost.value) and "was killed" in str(lost.value)
    assert await wait_until(lambda: not pgrep(f"sleep 7{mark}"), 10), pgrep(mark)  # the call's group went with it
    assert not agent.alive
    again = await transport.agents.get(sys.executable, remote)
    assert again is not None and again is not agent and transport.agents.restarts == 1
    assert again.info is not None and again.info.pid != agent.info.pid
    assert (await call(again, "echo_probe", {"n": 3}))[0]["result"]["n"] == 3


async def case_run_stat_put(transport: Transport, tmp_path: Path) -> None:
    agent, remote = await start(transport, tmp_path)
    ran = await agent.run("echo out; echo err >&2; cat; exit 4", stdin="fed\n", env={"A": "b c"})
    assert (ran.exit_code, ran.stdout, ran.stderr) == (4, "out\nfed\n", "err\n")
    ran = await agent.run(["printf", "%s", "$A"], env={"A": "b c"})
    assert ran.stdout == "$A"  # an argv is not a shell: nothing expands
    ran = await agent.run(["/nonexistent/tool"])
    assert ran.exit_code == 127 and "No such file" in ran.stderr
    target = f"{remote}/put.txt"
    local = tmp_path / "payload.bin"
    local.write_bytes(os.urandom(100_000))
    import base64
    import hashlib

    await agent.request("put", path=target, data=base64.b64encode(local.read_bytes()).decode(), mode=0o640)
    stat = await agent.request("stat", path=target)
    assert stat == {**stat, "exists": True, "size": 100_000, "mode": 0o640,
                    "sha256": hashlib.sha256(local.read_bytes()).hexdigest()}
    assert (await agent.request("stat", path=f"{remote}/missing"))["exists"] is False
    with pytest.raises(TransportError, match="agent frobnicate failed: unknown op"):
        await agent.request("frobnicate")


async def case_close_leaves_nothing(transport: Transport, tmp_path: Path) -> None:
    agent, remote = await start(transport, tmp_path)
    assert agent.info is not None
    mark = f"{uuid.uuid4().int % 10**6 + 10**6}"
    task = asyncio.ensure_future(call(agent, "echo_probe", {"child": f"8{mark}"}))
    assert await wait_until(lambda: bool(pgrep(f"sleep 8{mark}")), 10)
    await transport.close()  # mid-call: the agent stops its call (TERM), answers it, then ends
    (ended,) = await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 15)
    # Either the agent's last answer (the call's group died of the TERM) or, had it gone first, AgentLost.
    assert isinstance(ended, AgentLost) or ended[1].exit_code == -signal.SIGTERM, ended
    assert await wait_until(lambda: not pgrep(f"sleep 8{mark}") and not pgrep(f"{remote}/remote_probes/agent/agent.py"), 10), \
        (pgrep(mark), pgrep(remote))


async def case_in_process_probes(transport: Transport, tmp_path: Path) -> None:
    """A probe that declares itself in-process runs in a thread of the agent: no fork, and its failures of every
    kind come back as that call's clear error while the agent serves on."""
    agent, remote = await start(transport, tmp_path)
    assert agent.info is not None
    echo, run = await call(agent, "inproc_probe", {"n": 1})
    assert echo["ok"] and echo["result"]["pid"] == agent.info.pid and echo["result"]["thread"].startswith("probe-")
    assert run.document is not None and '"message": "in process"' in run.stderr  # type: ignore[attr-defined]
    sys_path = echo["result"]["sys_path"]
    failures = {how: (await call(agent, "inproc_probe", {"how": how}))[0]
                for how in ("raise", "fail", "exit", "recurse", "nan", "big")}
    assert failures["raise"]["error"]["kind"] == "crash" and "broke on purpose" in failures["raise"]["error"]["message"]
    assert "RuntimeError" in failures["raise"]["error"]["details"]["traceback"]
    assert (failures["fail"]["error"]["kind"], failures["fail"]["error"]["details"]["n"]) == ("told_to", 1)
    assert failures["exit"]["error"]["kind"] == "crash" and "SystemExit" in failures["exit"]["error"]["message"]
    assert "RecursionError" in failures["recurse"]["error"]["message"]
    assert "not JSON" in failures["nan"]["error"]["message"]
    assert failures["big"]["error"]["kind"] == "too_large" and "ask for less" in failures["big"]["error"]["message"]
    # A timed-out call is answered at once (a thread cannot be killed: its late answer is dropped, not misread):
    # its thread is held until the answer came, so an answer that waited for the thread would never come.
    hold = f"{remote}/hold-{uuid.uuid4().hex[:8]}"
    blocked = {"how": "block", "until": f"{hold}.go", "ended": f"{hold}.ended"}
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(call(agent, "inproc_probe", blocked, timeout=0.2), 30)
    assert not Path(blocked["ended"]).exists()  # answered while its thread still runs
    # Concurrent calls run side by side, forked and in-process alike: 9 calls at one rendezvous.
    meet = f"{remote}/meet-{uuid.uuid4().hex[:8]}"
    both = await asyncio.gather(*(call(agent, "inproc_probe", {"how": "meet", "meet": meet, "of": 9, "n": i})
                                  for i in range(8)),
                                call(agent, "echo_probe", {"n": 99, "meet": meet, "of": 9}))
    assert [r[0]["result"]["n"] for r in both] == [*range(8), 99], [r[0].get("error") for r in both]
    Path(blocked["until"]).touch()  # the timed-out call's thread goes on and ends: its answer must not end the agent
    assert await wait_until(lambda: Path(blocked["ended"]).exists(), 30), "the held thread never ended"
    # The real source probe runs in-process too, and leaves the agent's sys.path as it found it.
    tree = tmp_path / "site"
    (tree / "srcpkg").mkdir(parents=True)
    (tree / "srcpkg" / "__init__.py").write_text("def f():\n    return 1\n")
    read, run = await call(agent, "sglang_source", {"package": "srcpkg", "sys_path": [str(tree)],
                                                    "reads": [{"file": "__init__.py", "symbol": "f"}]})
    assert run.document is not None and read["result"]["reads"][0]["lines"] == [[1, "def f():"], [2, "    return 1"]]  # type: ignore[attr-defined]
    after, _ = await call(agent, "inproc_probe", {"n": 2})
    assert after["result"]["sys_path"] == sys_path
    assert agent.alive and (await call(agent, "echo_probe", {"n": 3}))[0]["result"]["n"] == 3
    assert (await call(agent, "inproc_probe", {"n": 4}))[0]["result"]["pid"] == agent.info.pid
    isolated, run = await call(agent, "inproc_probe", {"n": 5}, isolate=True)  # asked for: a fork all the same
    assert run.document is None and isolated["result"]["pid"] != agent.info.pid  # type: ignore[attr-defined]
