"""The same server lifecycle over the SSH transport (a real sshd on loopback; the 'remote' host is this
machine): start with the seed's flags, the override reported, bench measured next to the server, stop;
and `cleanup` over SSH after the controller vanished without stopping anything."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import pytest

from orchestrator.inventory import Inventory
from tests.servers.conftest import REPO, listening, processes_with, run_playbook

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from sshd_fixture import SshdServer, sshd_server  # noqa: E402,F401

pytestmark = [pytest.mark.ssh, pytest.mark.lab, pytest.mark.slow]


def _ssh_inventory(server: SshdServer, tmp_path: Path, lab_models: dict[str, str]) -> Inventory:
    spec = server.host_spec("gpu", python=sys.executable, state_dir=str(tmp_path / "remote-state"),
                            env={"PYTHONPATH": str(REPO)}, vars={"engine": "lab", **lab_models})
    spec.pop("name")
    return Inventory.model_validate({"hosts": {"gpu": spec}, "default_hosts": "gpu"})


def test_server_over_ssh(sshd_server: SshdServer, tmp_path: Path, lab_models: dict[str, str], marker: str) -> None:  # noqa: F811
    inventory = _ssh_inventory(sshd_server, tmp_path, lab_models)
    ran = run_playbook(f"""
name: over ssh
steps:
  - server: {{name: spec, model: "{{{{ target }}}}", env: {{MARK: {marker}}},
             flags: {{speculative-algorithm: EAGLE3, speculative-draft-model-path: "{{{{ draft }}}}",
                      speculative-num-steps: 1, speculative-eagle-topk: 1, speculative-num-draft-tokens: 16}}}}
    register: srv
  - bench: {{server: spec, n: 2, max_new_tokens: 16}}
    register: b
  - server: {{action: stop, name: spec}}
""", inventory, tmp_path / "sessions")
    assert ran.status == "ok", [e.get("error") for e in ran.of_type("step_finished")]
    srv, b = ran.result("s1", "gpu")["result"], ran.result("s2", "gpu")["result"]
    assert [o["flag"] for o in srv["overrides"]] == ["speculative_num_draft_tokens"]
    assert b["completed"] == 2 and b["tok_s"] > 0 and b["accept_length"] >= 1.0
    assert any(e["stream"] == "server_log" for e in ran.of_type("output"))
    assert not listening(srv["port"]) and processes_with(marker) == []


def test_cleanup_over_ssh(sshd_server: SshdServer, tmp_path: Path, lab_models: dict[str, str], marker: str) -> None:  # noqa: F811
    import asyncio

    from orchestrator.servers.cleanup import cleanup_host
    from orchestrator.transport.ssh import SshTransport

    inventory = _ssh_inventory(sshd_server, tmp_path, lab_models)
    ran = run_playbook(f"""
name: kept
steps:
  - server: {{name: left, model: "{{{{ target }}}}", env: {{MARK: {marker}}}, keep: true}}
    register: srv
""", inventory, tmp_path / "sessions")
    assert ran.status == "ok"
    port = ran.result("s1", "gpu")["result"]["port"]
    try:
        assert listening(port)

        async def sweep(everything: bool) -> list:
            transport = SshTransport(inventory.host("gpu"), session_id="cleanup")
            await transport.connect()
            try:
                return await cleanup_host(transport, python=sys.executable, everything=everything)
            finally:
                await transport.close()

        kept = asyncio.run(sweep(False))
        assert [r.action for r in kept] == ["kept (keep: true)"] and listening(port)
        stopped = asyncio.run(sweep(True))
        assert [(r.action, r.port_free) for r in stopped] == [("stopped", True)]
        assert processes_with(marker) == [] and not listening(port)
    finally:
        for pid in processes_with(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
