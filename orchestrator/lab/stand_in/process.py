"""Starting, querying and stopping lab servers from Python (tests, bench/lab_speed.py, the build's self-check).

Plain ``subprocess`` in a new session (so the whole group can be signalled) on a free loopback port.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.servers.flags import flags_to_argv

REPO_ROOT = Path(__file__).resolve().parents[3]


#: SGLang (and the lab, as it) refuses a --port whose gRPC twin (port + 10000) passes 65535 (sglang_args.py)
MAX_PORT = 65535 - 10000


def free_port() -> int:
    """A free loopback port a lab SGLang server takes (at most ``MAX_PORT``; the kernel's range reaches 60999)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port <= MAX_PORT:
            return port


def server_env(site: Path | None = None) -> dict[str, str]:
    """The environment the lab host gives its python: the repo (orchestrator, remote_probes) and the sglang tree."""
    env = dict(os.environ)
    parts = [str(REPO_ROOT)] + ([str(site)] if site else []) + [p for p in [env.get("PYTHONPATH")] if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env.setdefault("TORCHDYNAMO_DISABLE", "1")
    return env


def http_json(url: str, body: Any = None, *, timeout: float = 120.0, api_key: str | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw, status = resp.read(), resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    text = raw.decode()
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        return status, text


@dataclass
class LabServer:
    proc: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def generate(self, body: dict[str, Any], timeout: float = 300.0) -> Any:
        status, doc = http_json(self.url + "/generate", body, timeout=timeout)
        if status != 200:
            raise RuntimeError(f"/generate answered {status}: {doc}")
        return doc

    def stop(self, grace: float = 10.0) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        return int(self.proc.returncode)


def start_server(target: Path, flags: dict[str, Any], *, log_path: Path, site: Path | None = None,
                 ready_timeout: float = 180.0) -> LabServer:
    """Start ``python -m orchestrator.lab.stand_in.server`` and wait for the ready line. Raises RuntimeError with the log."""
    port = free_port()
    argv = [sys.executable, "-m", "orchestrator.lab.stand_in.server", "--model-path", str(target), "--port", str(port),
            *flags_to_argv(flags)]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as handle:
        proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=server_env(site), start_new_session=True)
    server = LabServer(proc, port, log_path)
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"lab server exited with {proc.returncode}:\n{server.log()[-3000:]}")
        if "The server is fired up and ready to roll!" in server.log():
            return server
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"lab server not ready after {ready_timeout:.0f} s:\n{server.log()[-3000:]}")
