"""The agent's warm interpreters on the local transport (the cases: tests/warm_agent_cases.py), and the shipped
probes' marker lines."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import torch  # noqa: F401  # a real part (the lab extra installs it): missing, this module fails, never skips

from orchestrator.probes import probes_dir
from orchestrator.transport.local import LocalTransport
from remote_probes.agent import agent as _agent
from tests import warm_agent_cases


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[LocalTransport]:
    transport = LocalTransport("localhost", state_dir=str(tmp_path / "state"), session_id="warm")
    try:
        yield transport
    finally:
        await transport.close()


@pytest.mark.parametrize("case", [
    warm_agent_cases.case_warm_children_see_what_plain_ones_see, warm_agent_cases.case_warm_crashes_timeouts_and_cancels,
    warm_agent_cases.case_warm_agent_killed_mid_call, warm_agent_cases.case_warm_close_mid_call_leaves_nothing,
    warm_agent_cases.case_zygote_killed_mid_call, warm_agent_cases.case_warm_request_starts_the_interpreter_before_the_first_call,
], ids=lambda case: case.__name__.removeprefix("case_"))
async def test_warm_case(case, local: LocalTransport, tmp_path: Path) -> None:  # noqa: ANN001
    await case(local, tmp_path)


async def test_unusable_zygote(local: LocalTransport, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    await warm_agent_cases.case_unusable_zygote_is_said_counted_and_forks_plainly(local, tmp_path, caplog)


def test_the_torch_probes_share_one_warm_interpreter() -> None:
    """draft_test and draft_reconcile preload the same list: one zygote per host and session, started by the first
    of them. A list that drifted apart would start a second interpreter (seconds of import, hundreds of MB)."""
    scripts = {path.stem: _agent.read_script(path.name, path.read_bytes()) for path in sorted(probes_dir().rglob("*.py"))}
    preloading = {name: script.preload for name, script in scripts.items() if script.preload}
    assert set(preloading) == {"draft_test", "draft_reconcile"}, preloading
    assert len(set(preloading.values())) == 1 and preloading["draft_test"][0] == "torch"


def test_bad_marker_lines_are_the_calls_error() -> None:
    with pytest.raises(ValueError, match="bad module list"):
        _agent.read_script("x.py", b"# orchestrator-agent: preload torch; rm -rf\nprint(1)\n")
    with pytest.raises(ValueError, match="bad module list"):
        _agent.read_script("x.py", b"# orchestrator-agent: preload \nprint(1)\n")
    script = _agent.read_script("x.py", b"# orchestrator-agent: preload torch a.b_c d?\n")
    assert script.preload == ("torch", "a.b_c", "d?") and not script.in_process


def test_a_session_warms_the_torch_probes_its_playbook_runs() -> None:
    """The flagship runs the draft test and the reconcile: its hosts' agents start their zygote with their first
    call (session/compose.py); a playbook with neither starts none."""
    from orchestrator.playbook.loader import load_playbook, load_playbook_text
    from orchestrator.session.compose import warm_probes

    flagship = load_playbook(Path(__file__).resolve().parents[2] / "playbooks" / "eagle3.yaml",
                             extra_names={"engine", "target", "draft", "candidate_flags", "fixed_flags"})
    assert warm_probes(flagship) == ("draft_reconcile", "draft_test")
    from orchestrator.inventory import Inventory
    from orchestrator.session.compose import compose_runner

    made = compose_runner(flagship).make_transport(Inventory().host("localhost"), "sid")
    assert made.agents.warm_probes == ("draft_reconcile", "draft_test")
    assert warm_probes(load_playbook_text("name: x\nsteps:\n  - shell: {argv: [\"true\"]}\n")) == ()
