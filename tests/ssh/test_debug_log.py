"""``--debug``: the SSH, agent and server-client traffic through standard logging, over the real loopback sshd, with
every secret the session knows masked before a line is written."""

from __future__ import annotations

import io
import sys

from typer.testing import CliRunner

from orchestrator import debuglog
from orchestrator.redact import MASK, Redactor
from orchestrator.servers.client import ServerClient
from orchestrator.transport.ssh import SshTransport

SECRET = "sk-debug-5f1e9c"


async def test_debug_logs_ssh_agent_and_server_client_traffic_redacted(transport: SshTransport) -> None:
    stream = io.StringIO()
    session_secrets = Redactor([SECRET])  # what an engine registers for its session
    debuglog.watch(session_secrets)
    handler = debuglog.enable(stream=stream)
    try:
        result = await transport.run(f"echo {SECRET} >/dev/null; echo done")
        client = ServerClient(transport, sys.executable, api_key=SECRET)
        picked = await client.call("port", {"host": "127.0.0.1", "note": SECRET})
    finally:
        debuglog.disable(handler)
    assert result.ok and picked["free"]
    lines = stream.getvalue().splitlines()
    by_logger = {name: [line for line in lines if f" {name} DEBUG " in line]
                 for name in ("orchestrator.ssh", "orchestrator.agent", "orchestrator.server_client")}
    assert all(by_logger.values()), lines[:20]
    assert any("run echo" in line and "exit 0" not in line for line in by_logger["orchestrator.ssh"])
    assert any("exit 0 after" in line for line in by_logger["orchestrator.ssh"])
    assert any("agent call" in line and "server_client" in line for line in by_logger["orchestrator.agent"])
    assert any("server client port" in line and "answered" in line for line in by_logger["orchestrator.server_client"])
    assert SECRET not in stream.getvalue() and MASK in stream.getvalue()


def test_debug_is_off_unless_asked(monkeypatch) -> None:
    monkeypatch.delenv(debuglog.ENV_VAR, raising=False)
    assert not debuglog.requested() and debuglog.requested(True)
    for value, on in (("1", True), ("true", True), ("0", False), ("", False), ("no", False)):
        monkeypatch.setenv(debuglog.ENV_VAR, value)
        assert debuglog.requested() is on


def test_the_cli_takes_debug_before_any_command() -> None:
    import logging

    from orchestrator.cli import app

    root = logging.getLogger("orchestrator")
    before = list(root.handlers)
    try:
        outcome = CliRunner().invoke(app, ["--debug", "hosts", "trust", "--help"])
        added = [h for h in root.handlers if h not in before]
        assert len(added) == 1 and root.level == logging.DEBUG, outcome.output
    finally:
        for handler in [h for h in root.handlers if h not in before]:
            debuglog.disable(handler)
    assert "--debug" in CliRunner().invoke(app, ["--help"]).output
