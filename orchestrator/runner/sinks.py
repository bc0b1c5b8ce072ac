"""Sinks receive every event. The runner knows them only through this protocol."""

from __future__ import annotations

from typing import Any, Protocol, overload

from orchestrator.events import E, Event, events_of


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

    @overload
    def of_type(self, kind: type[E]) -> list[E]: ...
    @overload
    def of_type(self, kind: str) -> list[Any]: ...
    def of_type(self, kind: type[E] | str) -> list[Any]:
        """The events of one class (typed), or of one ``type`` name (tests)."""
        return events_of(self.events, kind)
