"""Runs the ``server_client`` probe (remote_probes/engine/server_client.py) next to a server, on the probe protocol.

The engine adapter supplies what is engine-specific (health and info paths, per-request stat keys) as the
probe's arguments, and reads the server's info document with its own parsing (``server_accept_length``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from orchestrator.debuglog import clip
from orchestrator.errors import ProbeError, ServerError
from orchestrator.probes.models import SERVER_CLIENT_RESULTS
from orchestrator.servers.base import EngineAdapter
from orchestrator.servers.sglang import SglangAdapter
from orchestrator.transport.base import Transport

PROBE = "server_client"
log = logging.getLogger("orchestrator.server_client")  # --debug: each call and its answer (orchestrator.debuglog)


class ServerClient:
    """HTTP calls, readiness waits and benchmarks executed next to the server (same code locally and over SSH)."""

    def __init__(self, transport: Transport, python: str, adapter: EngineAdapter | None = None, *,
                 api_key: str | None = None, admin_api_key: str | None = None) -> None:
        self.transport = transport
        self.python = python
        # A server started elsewhere (``bench: {url: ...}``, cleanup) is assumed to speak SGLang's interface.
        self.adapter = adapter if adapter is not None else SglangAdapter()
        # A server started with --api-key: sent as a bearer token on every call. The keys travel in the probe's
        # stdin (never its command line); the engine's redactor masks them in events (runner.learn_secrets).
        self.api_key = api_key or None
        self.admin_api_key = admin_api_key or None

    async def call(
        self,
        command: str,
        args: dict[str, Any],
        *,
        on_log: Callable[[str], None] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Run one client command; :raises ServerError: when the script cannot run, reports an error, or answers
        with a result of the wrong shape."""
        from orchestrator.probes.invoke import run_probe

        if command not in SERVER_CLIENT_RESULTS:
            raise ServerError(f"unknown server client command {command!r} (known: {', '.join(SERVER_CLIENT_RESULTS)})")
        keys = {name: value for name, value in (("api_key", self.api_key), ("admin_api_key", self.admin_api_key))
                if value}
        payload = {**self.adapter.client_args(command), **keys, **args, "command": command}
        debugging = log.isEnabledFor(logging.DEBUG)
        if debugging:  # the keys stay out; the rest is redacted by the handler (orchestrator.debuglog)
            # a traffic file's requests stay out too: prompts may be private (orchestrator/traffic/requests.py)
            shown = {**args, "traffic": f"<{len(args['traffic'])} requests>"} if args.get("traffic") else args
            log.debug("%s: server client %s %s", self.transport.host, command, clip(json.dumps(shown, default=str)))
        try:
            result = await run_probe(self.transport, PROBE, payload, python=self.python, timeout=timeout,
                                     on_stderr=on_log, result_model=SERVER_CLIENT_RESULTS[command])
        except ProbeError as exc:
            if exc.kind == "unauthorized" and exc.reason:  # 401/403: the probe's sentence says it all
                raise ServerError(exc.reason) from None
            raise ServerError(f"server client {command}: {exc.message}") from None
        if debugging:
            log.debug("%s: server client %s answered %s", self.transport.host, command,
                      clip(json.dumps(result, default=str)))
        if command == "bench":
            result = self.adapter.read_bench(result)
        return result

    async def get_json(self, url: str, *, timeout: float = 10.0) -> tuple[int, Any]:
        answer = await self.call("request", {"url": url, "timeout": timeout}, timeout=timeout + 30)
        return int(answer["status"]), answer.get("json")
