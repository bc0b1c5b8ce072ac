"""The remote agent over the real loopback sshd: the shared cases (tests/agent_cases.py), then what only SSH has:
a cut connection, the channel limit, the guardian, the fallback to one-shot probes, and the real probe path."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest
from sshd_fixture import SshdServer, start_sshd

from orchestrator.errors import HostUnreachable
from orchestrator.inventory import HostSpec
from orchestrator.probes.invoke import run_probe
from orchestrator.transport.agent import AgentLost
from orchestrator.transport.ssh import SshTransport
from tests import agent_cases, warm_agent_cases
from tests.ssh.test_probes_over_ssh import sglang_012  # noqa: F401 - the fixture


@pytest.mark.parametrize("case", [
    agent_cases.case_concurrent_calls, agent_cases.case_crashing_probes, agent_cases.case_huge_output,
    agent_cases.case_timeout_and_cancel_kill_the_call, agent_cases.case_agent_killed_mid_call,
    agent_cases.case_run_stat_put, agent_cases.case_close_leaves_nothing, agent_cases.case_in_process_probes,
], ids=lambda case: case.__name__.removeprefix("case_"))
async def test_agent_case(case, transport: SshTransport, tmp_path: Path) -> None:  # noqa: ANN001
    await case(transport, tmp_path)


@pytest.mark.parametrize("case", [
    warm_agent_cases.case_warm_crashes_timeouts_and_cancels, warm_agent_cases.case_warm_agent_killed_mid_call,
    warm_agent_cases.case_warm_close_mid_call_leaves_nothing,
], ids=lambda case: case.__name__.removeprefix("case_"))
async def test_warm_agent_case(case, transport: SshTransport, tmp_path: Path) -> None:  # noqa: ANN001
    await case(transport, tmp_path)


async def test_connection_cut_mid_warm_call_leaves_no_process(private_sshd: SshdServer, tmp_path: Path) -> None:
    """The connection goes mid-call of a warm interpreter's child: the agent reads EOF and stops its calls, the
    zygote reads EOF from the agent and exits, the guardian kills what is left: nothing stays."""
    t = SshTransport(HostSpec(**private_sshd.host_spec("h")), session_id=f"wcut-{uuid.uuid4().hex[:6]}")
    agent, remote = await warm_agent_cases.start(t, tmp_path)
    zygote_pid = (await warm_agent_cases.ok(agent, "warm_probe", {}))["ppid"]
    mark = f"{uuid.uuid4().int % 10**6 + 10**6}"
    task = asyncio.ensure_future(warm_agent_cases.call(agent, "warm_probe", {"child": f"9{mark}"}))
    assert await agent_cases.wait_until(lambda: bool(agent_cases.pgrep(f"sleep 9{mark}")), 30)
    private_sshd.kill_hard()
    with pytest.raises(AgentLost, match="ended mid-call"):
        await asyncio.wait_for(task, 30)
    assert await agent_cases.wait_until(
        lambda: not agent_cases.pgrep(f"sleep 9{mark}") and not warm_agent_cases.alive(zygote_pid)
        and not agent_cases.pgrep(f"{remote}/remote_probes/agent/agent.py"), 15), (agent_cases.pgrep(mark), agent_cases.pgrep(remote))
    await t.close()


async def test_connection_cut_leaves_no_process(private_sshd: SshdServer, tmp_path: Path) -> None:
    t = SshTransport(HostSpec(**private_sshd.host_spec("h")), session_id=f"cut-{uuid.uuid4().hex[:6]}")
    agent, remote = await agent_cases.start(t, tmp_path)
    mark = f"{uuid.uuid4().int % 10**6 + 10**6}"
    task = asyncio.ensure_future(agent_cases.call(agent, "echo_probe", {"child": f"9{mark}"}))
    assert await agent_cases.wait_until(lambda: bool(agent_cases.pgrep(f"sleep 9{mark}")), 10)
    private_sshd.kill_hard()
    with pytest.raises(AgentLost, match="ended mid-call"):
        await asyncio.wait_for(task, 30)
    # The agent read EOF and the guardian read EOF: neither the agent nor its call's process may be left.
    assert await agent_cases.wait_until(
        lambda: not agent_cases.pgrep(f"sleep 9{mark}") and not agent_cases.pgrep(f"{remote}/remote_probes/agent/agent.py"), 15), \
        (agent_cases.pgrep(mark), agent_cases.pgrep(remote))
    with pytest.raises(HostUnreachable):
        await t.agents.get(sys.executable, remote)  # a new agent needs the host back
    await t.close()


async def test_agent_holds_one_channel_slot_on_max_sessions_10(tmp_path: Path) -> None:
    """OpenSSH's default MaxSessions 10 = 8 pool channels + guardian + kill channel: the agent takes a pool slot for
    its life, so commands and agent calls at full concurrency never get a refused channel."""
    server = start_sshd(tmp_path / "sshd10", hosts=1, max_sessions=10)
    t = SshTransport(HostSpec(**server.host_spec("h")), session_id="slots")
    try:
        agent, _ = await agent_cases.start(t, tmp_path)
        runs = [t.run(f"sleep 0.1; echo {i}") for i in range(30)]
        calls = [agent_cases.call(agent, "echo_probe", {"n": i, "sleep": 0.1}) for i in range(20)]
        done = await asyncio.gather(*runs, *calls)
        assert [r.stdout.strip() for r in done[:30]] == [str(i) for i in range(30)]
        assert [c[0]["result"]["n"] for c in done[30:]] == list(range(20))
    finally:
        await t.close()
        server.stop()


async def test_fallback_when_the_hosts_python_cannot_start_the_agent(sshd_server: SshdServer, tmp_path: Path) -> None:
    """A host whose interpreter runs probes but not the agent (here: a wrapper that refuses it, as a Python too old
    for it would fail): probes run one-shot, the reason is kept, and the agent is not retried on every call."""
    wrapper = tmp_path / "python-no-agent"
    wrapper.write_text(f'#!/bin/sh\ncase "$*" in *agent/agent.py*) echo "this python cannot run the agent" >&2; exit 1;; '
                       f'esac\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    t = SshTransport(HostSpec(**sshd_server.host_spec("h2")), session_id=f"fb-{uuid.uuid4().hex[:6]}")
    try:
        result = await run_probe(t, "env_info", {}, python=str(wrapper))
        assert result["python"]["executable"]
        assert "this python cannot run the agent" in t.agents.unavailable[str(wrapper)]
        assert not t.agents.agents
        again = await run_probe(t, "env_info", {}, python=str(wrapper))  # one-shot again, no second attempt
        assert again["hostname"] == result["hostname"] and len(t.agents.unavailable) == 1
    finally:
        await t.close()


async def test_source_reads_through_the_agent_match_one_shot(transport: SshTransport,
                                                              sglang_012: Path) -> None:  # noqa: F811
    reads = [{"file": "srt/speculative/eagle_worker.py", "lines": f"{1 + 25 * i},+20"} for i in range(20)]
    reads.append({"file": "srt/speculative/eagle_worker.py", "symbol": "EAGLEWorker.__init__"})
    args = {"package": "sglang", "sys_path": [str(sglang_012)], "reads": reads}
    one_shot = await run_probe(transport, "sglang_source", args, python=sys.executable, use_agent=False)
    assert not transport.agents.agents
    concurrent = await asyncio.gather(*(run_probe(transport, "sglang_source", {**args, "reads": [r]},
                                                  python=sys.executable) for r in reads))
    assert len(transport.agents.agents) == 1
    assert [c["reads"][0]["lines"] for c in concurrent] == [r["lines"] for r in one_shot["reads"]]
    batched = await run_probe(transport, "sglang_source", args, python=sys.executable)
    assert batched == one_shot
