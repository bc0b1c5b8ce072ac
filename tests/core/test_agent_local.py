"""The remote agent on the local transport: the same agent and client code as over SSH (tests/agent_cases.py),
plus the real probe path (run_probe) through the agent against a one-shot run."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orchestrator.probes.invoke import run_probe
from orchestrator.transport.local import LocalTransport
from tests import agent_cases


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[LocalTransport]:
    transport = LocalTransport("localhost", state_dir=str(tmp_path / "state"), session_id="agent")
    try:
        yield transport
    finally:
        await transport.close()


@pytest.mark.parametrize("case", [
    agent_cases.case_concurrent_calls, agent_cases.case_crashing_probes, agent_cases.case_huge_output,
    agent_cases.case_timeout_and_cancel_kill_the_call, agent_cases.case_agent_killed_mid_call,
    agent_cases.case_run_stat_put, agent_cases.case_close_leaves_nothing,
], ids=lambda case: case.__name__.removeprefix("case_"))
async def test_agent_case(case, local: LocalTransport, tmp_path: Path) -> None:  # noqa: ANN001
    await case(local, tmp_path)


async def test_run_probe_through_the_agent_matches_one_shot(local: LocalTransport) -> None:
    args = {"package": "json", "reads": [{"file": "decoder.py", "lines": "1,5"}, {"file": "decoder.py",
                                                                                 "symbol": "JSONDecoder.decode"}]}
    through_agent = await run_probe(local, "sglang_source", args, python=sys.executable)
    assert len(local.agents.agents) == 1
    one_shot = await run_probe(local, "sglang_source", args, python=sys.executable, use_agent=False)
    assert through_agent == one_shot and through_agent["reads"][1]["found"]


async def test_agent_false_runs_one_shot(tmp_path: Path) -> None:
    transport = LocalTransport("localhost", state_dir=str(tmp_path / "state"), session_id="noagent", agent=False)
    result = await run_probe(transport, "env_info", {}, python=sys.executable)
    assert result["python"]["executable"] and not transport.agents.agents
    await transport.close()
