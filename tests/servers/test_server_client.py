"""The server client (remote_probes/engine/server_client.py) on the probe protocol, through the LocalTransport.

The adapter owns what is engine-specific: an adapter with other paths and stat keys must drive the pushed script
to exactly those paths, and the bench's server-side accept length must come from the adapter's own parsing. The
HTTP endpoint here only records which paths were asked for (the lab server, the real stand-in, is exercised by
the lab tests); it answers in SGLang's shapes under the adapter's names.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from orchestrator.errors import ProbeError, ServerError
from orchestrator.probes.invoke import run_probe
from orchestrator.probes.models import ServerWaitResult
from orchestrator.servers.client import ServerClient
from orchestrator.servers.sglang import SglangAdapter
from orchestrator.transport.local import LocalTransport


class OtherAdapter(SglangAdapter):
    """Not SGLang: SGLang's shape, but every path and key differs."""

    name: ClassVar[str] = "other"
    health_path: ClassVar[str] = "/alive"
    info_paths: ClassVar[tuple[str, ...]] = ("/missing", "/v2/info")
    generate_path: ClassVar[str] = "/v2/generate"
    flush_path: ClassVar[str | None] = "/v2/reset"
    request_stat_keys: ClassVar[dict[str, str]] = {"accept_length": "acc_len", "verify_ct": "verify_steps"}

    def server_accept_length(self, info: Mapping[str, Any]) -> float | None:
        return float(info["spec"]["mean_accept"])


class Recorder(BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _answer(self, status: int, doc: Any) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        self.seen.append("GET " + self.path)
        if self.path == "/alive":
            self._answer(200, {})
        elif self.path == "/v2/info":
            self._answer(200, {"spec": {"mean_accept": 2.75}, "internal_states": [{"avg_spec_accept_length": 9.0}]})
        else:
            self._answer(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        self.seen.append("POST " + self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path == "/v2/generate":
            self._answer(200, {"text": body["text"][::-1], "meta_info": {
                "completion_tokens": 4, "prompt_tokens": 3, "acc_len": 2.5, "verify_steps": 2,
                "spec_accept_length": 9.0, "finish_reason": {"type": "length"}}})
        elif self.path == "/v2/reset":
            self._answer(200, {})
        else:
            self._answer(404, {"detail": "Not Found"})


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    Recorder.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def transport(tmp_path: Path) -> LocalTransport:
    return LocalTransport("localhost", session_id="client-test", state_dir=str(tmp_path / "state"))


async def test_the_adapter_drives_the_bench(transport: LocalTransport, endpoint: str) -> None:
    client = ServerClient(transport, "python3", OtherAdapter())
    result = await client.call("bench", {"url": endpoint, "prompts": ["abc", "de"], "n": 3, "max_new_tokens": 4})
    assert Recorder.seen.count("POST /v2/generate") == 3
    assert Recorder.seen[0] == "POST /v2/reset"
    assert Recorder.seen[-2:] == ["GET /missing", "GET /v2/info"]  # info paths in the adapter's order
    assert result["completed"] == 3 and result["errors"] == []
    assert result["accept_length"] == 2.5 and result["verify_ct"] == 6  # the adapter's per-request keys
    assert result["server_accept_length"] == 2.75  # the adapter's parsing of the info document
    assert "server_info" not in result and result["server_info_path"] == "/v2/info"
    assert result["per_request"][0]["finish"] == "length"


async def test_sglang_defaults_when_no_adapter_is_given(transport: LocalTransport, endpoint: str) -> None:
    client = ServerClient(transport, "python3")
    result = await client.call("bench", {"url": endpoint, "prompts": ["abc"], "n": 1, "max_new_tokens": 4})
    assert Recorder.seen[0] == "POST /flush_cache" and "POST /generate" in Recorder.seen
    assert "GET /server_info" in Recorder.seen and "GET /get_server_info" in Recorder.seen
    assert result["completed"] == 0 and result["server_accept_length"] is None  # nothing SGLang answers here


async def test_wait_request_and_port(transport: LocalTransport, endpoint: str, tmp_path: Path) -> None:
    client = ServerClient(transport, "python3", OtherAdapter())
    log = tmp_path / "server.log"
    log.write_text("starting\nready\n")
    lines: list[str] = []
    wait = await client.call("wait", {"url": endpoint, "log": str(log), "pgid": os.getpgid(0), "timeout": 20,
                                      "ready_line": "ready"}, on_log=lines.append)
    assert wait["ready"] and wait["ready_line_seen"] and "GET /alive" in Recorder.seen
    assert lines == ["starting\n", "ready\n"]  # the server log, streamed
    status, doc = await client.get_json(endpoint + "/v2/info")
    assert status == 200 and doc["spec"]["mean_accept"] == 2.75
    assert (await client.get_json(endpoint + "/nothing"))[0] == 404
    picked = await client.call("port", {"host": "127.0.0.1"})
    assert picked["free"] and picked["port"] > 0
    taken = await client.call("port", {"host": "127.0.0.1", "port": int(endpoint.rsplit(":", 1)[1])})
    assert taken["free"] is False


async def test_errors_are_clear(transport: LocalTransport) -> None:
    client = ServerClient(transport, "python3", OtherAdapter())
    with pytest.raises(ServerError, match=r"bad_args.*needs 'url'"):
        await client.call("request", {})
    with pytest.raises(ServerError, match="unknown server client command"):
        await client.call("reboot", {})
    with pytest.raises(ServerError, match="cannot run"):
        await ServerClient(transport, "/no/such/python").call("port", {})


async def test_a_result_of_the_wrong_shape_is_a_probe_error(transport: LocalTransport) -> None:
    """The runner validates every result with its model: a mismatch is one clear ProbeError, never a crash."""
    with pytest.raises(ProbeError, match=r"server_client on localhost failed \(bad_result\).*ServerWaitResult.*ready"):
        await run_probe(transport, "server_client", {"command": "port"}, python="python3",
                        result_model=ServerWaitResult)
