"""Sinks receive every event. The engine knows them only through this protocol."""

from __future__ import annotations

from typing import Protocol

from orchestrator.events import Event


class EventSink(Protocol):
    def handle(self, event: Event) -> None:
        """Receive one event (already redacted). Must not block for long; must not raise."""

    def close(self) -> None:
        """The session is over."""


class ListSink:
    """Keeps events in memory (tests, the TUI's replay)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def handle(self, event: Event) -> None:
        self.events.append(event)

    def close(self) -> None:
        pass

    def of_type(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.type == kind]
