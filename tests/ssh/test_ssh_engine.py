"""The engine over SSH: fan-out with a host down, many concurrent steps, timeouts, a host dying mid-step."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from sshd_fixture import SshdServer, start_sshd

from orchestrator.inventory import Inventory
from orchestrator.playbook.loader import load_playbook_text
from orchestrator.runner.playbook_runner import PlaybookRunner, RunnerOptions
from orchestrator.runner.sinks import ListSink
from orchestrator.session.compose import compose_runner
from orchestrator.session.log import SessionLog
from orchestrator.session.reader import read_session
from tests.ssh.conftest import pgrep, wait_until


def _inventory(server: SshdServer, hosts: dict[str, str], **extra: object) -> Inventory:
    return Inventory.model_validate({
        "hosts": {name: {k: v for k, v in server.host_spec(name, address=addr, **extra).items() if k != "name"}
                  for name, addr in hosts.items()},
        "groups": {"gpus": {"hosts": list(hosts)}},
    })


def _engine(text: str, inventory: Inventory, *sinks: object, session: str | None = None) -> tuple[PlaybookRunner, ListSink]:
    sink = ListSink()
    engine = compose_runner(load_playbook_text(text), inventory=inventory, sinks=[sink, *sinks],
                    options=RunnerOptions(session_id=session or f"e-{uuid.uuid4().hex[:8]}"))
    return engine, sink


async def test_fan_out_over_four_hosts_with_one_down(sshd_server: SshdServer) -> None:
    hosts = {f"h{i}": a for i, a in enumerate(sshd_server.addresses)}
    hosts["down"] = sshd_server.down_address
    engine, sink = _engine(
        "name: fan-out\nhosts: gpus\nsteps:\n"
        "  - name: where\n    shell: 'echo \"$SSH_CONNECTION\"'\n    register: where\n"
        "  - name: second\n    shell: echo second\n",
        _inventory(sshd_server, hosts),
    )
    outcome = await engine.run()
    first, second = sink.of_type("step_finished")
    by_host = {o.host: o for o in first.results}
    assert {h: o.status for h, o in by_host.items()} == {"h0": "ok", "h1": "ok", "h2": "ok", "h3": "ok", "down": "unreachable"}
    assert "cannot connect" in (by_host["down"].error or "")
    for name, address in hosts.items():
        if name != "down":  # each host answered from its own address: the outputs are not mixed up
            assert by_host[name].result["stdout"].split()[2] == address
    assert {o.host for o in second.results} == {"h0", "h1", "h2", "h3"} and second.status == "ok"
    outputs = {(e.host, e.text.strip()) for e in sink.of_type("output") if e.step_id == second.step_id}
    assert outputs == {(h, "second") for h in ("h0", "h1", "h2", "h3")}
    assert outcome.status == "ok"


async def test_fifty_concurrent_engine_steps_on_one_host(tmp_path: Path) -> None:
    """50 ad-hoc steps at once on one host whose sshd has OpenSSH's default MaxSessions 10."""
    server = start_sshd(tmp_path / "sshd10", hosts=1, max_sessions=10)
    try:
        engine, sink = _engine(
            "name: many\nhosts: gpus\nsteps:\n" + "".join(
                f"  - name: s{i}\n    shell: 'sleep 0.1; echo {i}'\n" for i in range(50)),
            _inventory(server, {"one": server.addresses[0]}),
        )
        finished = await asyncio.gather(*(engine.run_step(step) for step in engine.playbook.steps))
        assert [f.status for f in finished] == ["ok"] * 50, [f.error for f in finished if f.status != "ok"]
        assert [f.results[0].result["stdout"].strip() for f in finished] == [str(i) for i in range(50)]
        await engine._shutdown()
    finally:
        server.stop()


async def test_step_timeout_kills_the_remote_group(sshd_server: SshdServer) -> None:
    mark = f"{300 + uuid.uuid4().int % 10**6 / 10**6:.6f}"
    engine, sink = _engine(
        f"name: timeout\nhosts: gpus\nsteps:\n  - name: hang\n    timeout: 1\n    shell: 'sleep {mark} & sleep {mark}'\n",
        _inventory(sshd_server, {"h0": sshd_server.addresses[0], "h1": sshd_server.addresses[1]}),
    )
    await engine.run()
    (finished,) = sink.of_type("step_finished")
    assert finished.status == "timeout" and {o.status for o in finished.results} == {"timeout"}
    assert not pgrep(mark), pgrep(mark)


async def test_host_dies_mid_step_unreachable_and_log_intact(tmp_path: Path) -> None:
    server = start_sshd(tmp_path / "sshd", hosts=1)
    mark = f"{300 + uuid.uuid4().int % 10**6 / 10**6:.6f}"
    log_dir = tmp_path / "session"
    try:
        engine, sink = _engine(
            f"name: dies\nhosts: gpus\nsteps:\n  - name: before\n    shell: echo before\n"
            f"  - name: long\n    shell: 'echo started; sleep {mark}'\n  - name: after\n    shell: echo after\n",
            _inventory(server, {"h0": server.addresses[0]}), SessionLog(log_dir),
        )
        run = asyncio.ensure_future(engine.run())
        assert await asyncio.to_thread(wait_until, lambda: bool(pgrep(mark)), 15)
        server.kill_hard()
        outcome = await asyncio.wait_for(run, 60)
    finally:
        server.stop()
    statuses = [e.status for e in sink.of_type("step_finished")]
    assert statuses[:2] == ["ok", "unreachable"] and outcome.status == "failed"
    long_step = sink.of_type("step_finished")[1]
    assert "connection lost" in (long_step.results[0].error or "")
    loaded = read_session(log_dir)
    assert loaded.torn_lines == 0 and loaded.finished is not None and loaded.finished.status == "failed"
    assert [e.status for e in loaded.of_type("step_finished")] == statuses
    assert any(e.text == "started\n" for e in loaded.of_type("output"))
    # The guardian on the host killed the orphaned command when the connection died.
    assert await asyncio.to_thread(wait_until, lambda: not pgrep(mark), 10), pgrep(mark)
