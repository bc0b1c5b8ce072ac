"""Runs ``server_client.py`` on a server's host through its transport and parses the one JSON answer."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.errors import ServerError
from orchestrator.transport.base import Transport

SCRIPT = Path(__file__).with_name("server_client.py")
BEGIN, END = "@@SERVER-CLIENT-BEGIN@@", "@@SERVER-CLIENT-END@@"


class ServerClient:
    """HTTP calls, readiness waits and benchmarks executed next to the server (same code locally and over SSH)."""

    def __init__(self, transport: Transport, python: str) -> None:
        self.transport = transport
        self.python = python

    async def call(
        self,
        command: str,
        args: dict[str, Any],
        *,
        on_log: Callable[[str], None] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Run one client command; :raises ServerError: when the script cannot run or reports an error."""
        remote = await self.transport.put_cached(SCRIPT)

        def forward(stream: str, text: str) -> None:
            if stream == "stderr" and on_log is not None:
                on_log(text)

        result = await self.transport.run(
            [self.python, remote, command], stdin=json.dumps(args), timeout=timeout,
            on_output=forward if on_log is not None else None,
        )
        start = result.stdout.rfind(BEGIN)
        stop = result.stdout.find(END, start + 1)
        if start < 0 or stop < 0:
            tail = (result.stderr or result.stdout).strip()[-800:]
            raise ServerError(
                f"{self.transport.host}: the server client ({self.python}) did not answer (exit {result.exit_code})"
                + (f": {tail}" if tail else ""))
        document = json.loads(result.stdout[start + len(BEGIN):stop])
        if not document.get("ok"):
            raise ServerError(f"{self.transport.host}: server client {command} failed: {document.get('error')}")
        return dict(document["result"])

    async def get_json(self, url: str, *, timeout: float = 10.0) -> tuple[int, Any]:
        answer = await self.call("request", {"url": url, "timeout": timeout}, timeout=timeout + 30)
        return int(answer["status"]), answer.get("json")
