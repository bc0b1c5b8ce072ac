"""Waiting for a state, never for a time: poll a condition until it holds or a deadline passes.

The one place in tests/ whose sleeps are allowed without a reason of their own (tests/test_hygiene.py): each is
the pause between two looks at the condition, bounded by the deadline, and a test that uses these says what it
waits for in its predicate."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable

POLL_S = 0.05


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, interval: float = POLL_S) -> bool:
    """True as soon as ``predicate()`` is true; False when ``timeout`` seconds pass first (looked at once more)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


async def wait_until_async(predicate: Callable[[], object], timeout: float = 10.0, interval: float = POLL_S) -> bool:
    """``wait_until`` inside an event loop: the loop runs on while we wait. ``predicate`` may be a coroutine
    function (a state only an await can read, such as a Slurm job's)."""

    async def holds() -> bool:
        value = predicate()
        return bool(await value) if inspect.isawaitable(value) else bool(value)

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await holds():
            return True
        await asyncio.sleep(interval)
    return await holds()
