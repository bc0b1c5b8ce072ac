"""The lab host reached over a real loopback sshd: start the lab server detached, query it, stop its group."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from sshd_fixture import SshdServer, sshd_server  # noqa: E402,F401

from orchestrator.lab.building.build import LabPaths  # noqa: E402
from orchestrator.lab.building.inventory import lab_ssh_inventory  # noqa: E402
from orchestrator.lab.stand_in.process import free_port, http_json  # noqa: E402
from tests.waiting import wait_until_async  # noqa: E402

pytestmark = [pytest.mark.lab, pytest.mark.ssh, pytest.mark.torch]


async def test_lab_server_over_ssh(lab: LabPaths, sshd_server: SshdServer):  # noqa: F811
    from orchestrator.transport.ssh import SshTransport

    fields = sshd_server.host_spec("lab")
    inv = lab_ssh_inventory(fields["address"], fields["port"], fields["user"], fields["key"], fields["known_hosts"],
                            root=lab.root, ssh_config=fields["ssh_config"], state_dir=fields["state_dir"])
    spec = inv.host("lab")
    assert inv.resolve(None) == ["lab"] and spec.kind == "ssh"
    hv = inv.host_vars("lab")
    transport = SshTransport(spec, session_id="labssh")
    await transport.connect()
    port = free_port()
    try:
        probe = await transport.run([spec.python, "-c", "import importlib.util as u; "
                                     "print(u.find_spec('sglang').origin)"])
        assert probe.stdout.strip().startswith(hv["sglang_site"])  # read_source finds the lab's sglang tree
        handle = await transport.spawn_detached(
            [spec.python, "-m", "orchestrator.lab.stand_in.server", "--model-path", hv["target"], "--port", str(port)],
            name="labserver")
        def healthy() -> bool:
            try:
                return http_json(f"http://127.0.0.1:{port}/health", timeout=10)[0] == 200
            except OSError:
                return False

        await wait_until_async(healthy, 120, interval=0.2)
        status, doc = http_json(f"http://127.0.0.1:{port}/generate", {"text": "x = ", "sampling_params":
                                                                      {"max_new_tokens": 4}})
        assert status == 200 and doc["meta_info"]["completion_tokens"] >= 1
        assert await transport.kill_group(handle, grace=5)
        assert "The server is fired up and ready to roll!" in await transport.read_file_tail(handle.log_path)
    finally:
        await transport.close()
