"""The server client over the real loopback sshd: pushed with the probes, answers on the probe protocol."""

from __future__ import annotations

import socket
import sys

from orchestrator.errors import ServerError
from orchestrator.servers.client import ServerClient
from orchestrator.transport.ssh import SshTransport


async def test_server_client_over_ssh(transport: SshTransport) -> None:
    client = ServerClient(transport, sys.executable)
    picked = await client.call("port", {"host": "127.0.0.1"})
    assert picked["free"] and picked["port"] > 0
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert (await client.call("port", {"host": "127.0.0.1", "port": port}))["free"] is False
    status, doc = await client.get_json(f"http://127.0.0.1:{picked['port']}/health", timeout=2)
    assert status == 0 and doc is None  # nothing listens: the connection error is data, not a failure
    try:
        await client.call("bench", {"url": "http://127.0.0.1:1", "n": 1, "max_new_tokens": 1})
    except ServerError as exc:
        assert "bad_args" in exc.message and "prompts" in exc.message and transport.host in exc.message
    else:
        raise AssertionError("a bench without prompts must fail")
