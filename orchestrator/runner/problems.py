"""Failures that must not stop a session but must never pass unseen: a sink that raises (a full disk
under the session log), a finalizer that cannot stop a server, a connection that will not close.

Each is counted per source, said once (stderr by default; the TUI passes its own ``say``) and carried
by ``session_finished`` so the saved session and its report say what went wrong. A failure that cost
the record events makes the session *incomplete*.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass


def say_on_stderr(message: str) -> None:
    sys.stderr.write(f"orchestrator: {message}\n")
    sys.stderr.flush()


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, asyncio.CancelledError):
        return "interrupted (cancelled before it finished)"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass
class Problem:
    source: str  # what failed: "event sink SessionLog", "finalizer stop_servers", "host gpu1: close"
    first_error: str
    count: int = 1
    loses_events: bool = False  # the record misses events because of it

    def describe(self) -> str:
        times = f" ({self.count} times)" if self.count > 1 else ""
        missed = f"; {self.count} event(s) not recorded by it" if self.loses_events else ""
        return f"{self.source} failed{times}: {self.first_error}{missed}"


class Problems:
    """The session's tally of swallowed-but-not-silent failures, keyed by what failed."""

    def __init__(self, say: Callable[[str], None] = say_on_stderr) -> None:
        self.say = say
        self._by_source: dict[str, Problem] = {}

    def add(self, source: str, exc: BaseException, *, loses_events: bool = False, context: str = "") -> None:
        """Count one failure of ``source``; the first one is said at once (later ones are only counted:
        a sink failing on every event must not flood the terminal)."""
        known = self._by_source.get(source)
        if known is not None:
            known.count += 1
            return
        problem = Problem(source=source, first_error=describe_error(exc), loses_events=loses_events)
        self._by_source[source] = problem
        where = f" ({context})" if context else ""
        consequence = "; the session will be marked incomplete" if loses_events else ""
        self.safe_say(f"{source} failed{where}: {problem.first_error}{consequence}")

    def safe_say(self, message: str) -> None:
        try:
            self.say(message)
        except Exception:  # the messenger itself is broken (a closed TUI): the process's own stderr is left
            if sys.__stderr__ is not None:
                sys.__stderr__.write(f"orchestrator: {message}\n")

    @property
    def incomplete(self) -> bool:
        return any(p.loses_events for p in self._by_source.values())

    def summary(self) -> list[str]:
        return [p.describe() for p in self._by_source.values()]

    def __bool__(self) -> bool:
        return bool(self._by_source)
