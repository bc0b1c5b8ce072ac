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
    agent_cases.case_run_stat_put, agent_cases.case_close_leaves_nothing, agent_cases.case_in_process_probes,
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


def _install(site: Path, version: str, body: str) -> None:
    """A package ``cachepkg`` with its dist-info, as pip --target lays it out."""
    for old in site.glob("cachepkg-*.dist-info"):
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    info = site / f"cachepkg-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: cachepkg\nVersion: {version}\n\nA long description.\n")
    (site / "cachepkg").mkdir(exist_ok=True)
    (site / "cachepkg" / "mod.py").write_text(body)


async def test_in_process_reads_see_an_edited_file_and_a_reinstall(local: LocalTransport, tmp_path: Path) -> None:
    """The agent keeps what it learnt about a tree between calls; each entry is checked against the mtimes it came
    from, so an edited file or a reinstalled package is read afresh, never served stale."""
    site = tmp_path / "site"
    _install(site, "1.0", "def old():\n    return 1\n")
    args = {"package": "cachepkg", "sys_path": [str(site)],
            "reads": [{"file": "mod.py", "lines": "1,$"}, {"file": "mod.py", "symbol": "new"}]}
    first = await run_probe(local, "sglang_source", args, python=sys.executable)
    assert first["version"] == "1.0" and first["reads"][0]["lines"] == [[1, "def old():"], [2, "    return 1"]]
    assert first["reads"][1]["not_found"]["kind"] == "symbol_not_found"
    (site / "cachepkg" / "mod.py").write_text("def new():\n    return 2\n\n")
    edited = await run_probe(local, "sglang_source", args, python=sys.executable)
    assert edited["reads"][0]["lines"] == [[1, "def new():"], [2, "    return 2"], [3, ""]]
    assert edited["reads"][1]["found"] and edited["reads"][1]["start"] == 1
    _install(site, "2.0", "def new():\n    return 3\n")
    reinstalled = await run_probe(local, "sglang_source", args, python=sys.executable)
    assert reinstalled["version"] == "2.0" and reinstalled["reads"][0]["lines"][1] == [2, "    return 3"]
    assert len(local.agents.agents) == 1  # all three through the one agent
    one_shot = await run_probe(local, "sglang_source", args, python=sys.executable, use_agent=False)
    assert one_shot == reinstalled


def test_an_in_process_document_is_bounded_as_a_forked_probes_stdout() -> None:
    from orchestrator.transport.base import MAX_CAPTURE
    from remote_probes.agent import agent as _agent

    assert _agent.MAX_DOCUMENT == MAX_CAPTURE
