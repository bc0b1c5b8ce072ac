"""Probes and source reads over the real loopback sshd: pushed once per session, parsed, recorded."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest
from sshd_fixture import SshdServer

from orchestrator.inventory import Inventory
from orchestrator.playbook.loader import load_playbook_text
from orchestrator.runner.playbook_runner import RunnerOptions
from orchestrator.runner.sinks import ListSink
from orchestrator.session.compose import compose_runner
from tests import realparts


def _inventory(server: SshdServer) -> Inventory:
    spec = {k: v for k, v in server.host_spec("gpu", address=server.addresses[0]).items() if k != "name"}
    spec["python"] = sys.executable
    return Inventory.model_validate({"hosts": {"gpu": spec}})


async def test_read_source_and_probes_over_ssh(sshd_server: SshdServer, sglang_012: Path) -> None:
    playbook = f"""
name: probes-over-ssh
hosts: gpu
steps:
  - name: seed read
    read_source: {{package: sglang, file: srt/speculative/eagle_worker.py, lines: "155,200", sys_path: ["{sglang_012}"]}}
    register: src
  - name: same by symbol
    read_source: {{package: sglang, symbol: EAGLEWorker.__init__, file: srt/speculative/eagle_worker.py,
                  sys_path: ["{sglang_012}"], expect: {{contains: get_embed_and_head}}}}
    register: sym
  - name: env
    probe: env_info
    register: env
"""
    sink = ListSink()
    engine = compose_runner(load_playbook_text(playbook), inventory=_inventory(sshd_server), sinks=[sink],
                    options=RunnerOptions(session_id=f"p-{uuid.uuid4().hex[:8]}", keep_remote=True))
    outcome = await engine.run()
    assert outcome.status == "ok", [e.error for e in sink.of_type("step_finished")]
    src = engine.vars.shared["src"]
    assert src["version"] == "0.5.12.post1"
    numbered = dict((n, t) for n, t in src["reads"][0]["lines"])
    assert min(numbered) == 155 and max(numbered) == 200
    assert "get_embed_and_head" in numbered[177]
    assert engine.vars.shared["sym"]["passed"] is True
    assert engine.vars.shared["env"]["python"]["executable"]
    # The probe directory was pushed once for the three probe runs (content-addressed).
    # Three probe runs, one push: the probe directory is content-addressed per session (kept with keep_remote).
    workdir = sshd_server.directory / "state" / "sessions" / engine.options.session_id / "files"
    assert len([p for p in workdir.iterdir() if p.name.startswith("remote_probes-")]) == 1
    printed = "".join(e.text for e in sink.of_type("output") if e.step_id == "s1")
    assert "   177  " in printed and "eagle_worker.py:155-200" in printed
    import shutil

    shutil.rmtree(workdir.parent, ignore_errors=True)


@pytest.fixture(scope="session")
def sglang_012() -> Path:
    from orchestrator.errors import OrchestratorError
    from orchestrator.lab.building.build import cached_sglang_tree

    try:
        return cached_sglang_tree("0.5.12.post1")
    except OrchestratorError as exc:
        realparts.missing(f"{exc.message} (offline?)")
