"""The end of a session: finalizers (stop servers, the TUI's hold), then each host's remote workdir and
connection. Every step is tried whatever the one before did, and every failure is counted and said
(``Problems``): a server that could not be stopped must not be a secret."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from orchestrator.runner.problems import Problems
from orchestrator.transport.base import Transport

FINALIZER_GRACE = 30.0  # seconds a finalizer gets after an outside cancel (stopping a server takes a few)


async def shut_down(finalizers: list[Callable[[], Awaitable[None]]], transports: Mapping[str, Transport],
                    problems: Problems, *, keep_remote: bool, bounded: bool) -> None:
    """``bounded``: after an outside cancel nobody waits for us, so a finalizer that waits for a person
    (the TUI hold) gets no time and each of the rest at most ``FINALIZER_GRACE``."""
    for finalize in reversed(finalizers):
        name = getattr(finalize, "__name__", type(finalize).__name__)
        try:
            if bounded:
                await asyncio.wait_for(asyncio.shield(finalize()), FINALIZER_GRACE)
            else:
                await asyncio.shield(finalize())
        except (Exception, asyncio.CancelledError) as exc:  # the next finalizer still runs
            problems.add(f"finalizer {name}", exc)
    # After an outside cancel a second cancel may come while we tidy up: each step is short and
    # time-boxed, so finishing it beats leaving the remote workdir behind.
    tolerated = (Exception, asyncio.CancelledError) if bounded else (Exception,)
    for host, transport in list(transports.items()):
        try:
            if not keep_remote:
                await asyncio.wait_for(transport.remove_workdir(), FINALIZER_GRACE)
        except tolerated as exc:
            problems.add(f"host {host}: removing the remote workdir", exc)
        try:
            await asyncio.wait_for(transport.close(), FINALIZER_GRACE)
        except tolerated as exc:
            problems.add(f"host {host}: closing the connection", exc)
