"""Drive `orchestrator mcp` the way an assistant does: a real subprocess over stdio, spoken to by the official
SDK's own client (``mcp.ClientSession`` + ``stdio_client``)."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests import realparts

realparts.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402
from mcp.types import CallToolResult  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def server_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_LAB_")}
    env.update({"PYTHONPATH": str(REPO), "TORCHDYNAMO_DISABLE": "1", **extra})
    return env


@asynccontextmanager
async def mcp_client(args: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    """An initialized client session to a fresh `orchestrator mcp ARGS` process; leaving the block closes
    stdin, which ends the server's session (servers stopped, report written)."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "orchestrator", "mcp", *args],
                                   env=env or server_env(), cwd=str(cwd))
    with open(cwd / "mcp-server.stderr", "a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


def text_of(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool call that must succeed; its structured result."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} failed: {text_of(result)}"
    assert result.structured_content is not None, tool
    return result.structured_content


def only_session(root: Path) -> Path:
    (directory,) = [p for p in root.iterdir() if (p / "events.jsonl").is_file()]
    return directory
