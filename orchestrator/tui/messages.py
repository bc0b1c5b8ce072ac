"""Messages the TUI passes around, and the sink that turns session events into them.

Floods are the normal case (a server log, a 200k-line build): the sink queues every event and posts
at most one ``EventsArrived`` until the app has drained the queue, so a burst becomes one message and
one repaint, and events stay in order (an output line never overtakes its step's start).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from textual.message import Message

from orchestrator.events import Event


@dataclass
class EventsArrived(Message):
    """Events are waiting in the sink's queue (drain them all)."""

    def can_replace(self, message: Message) -> bool:
        # A second wake-up is redundant while the first one has not been handled.
        return isinstance(message, EventsArrived)


@dataclass
class StepSelected(Message):
    step_id: str


@dataclass
class HypothesisSelected(Message):
    hypothesis_id: str


class TuiSink:
    """A session event sink (``runner.sinks``) feeding an app. ``post`` is the app's ``post_message``."""

    def __init__(self, post: Callable[[Message], Any] | None = None) -> None:
        self.post = post
        self.queue: list[Event] = []
        self._scheduled = False
        self.closed = False

    def handle(self, event: Event) -> None:
        self.queue.append(event)
        if not self._scheduled and self.post is not None:
            self._scheduled = True
            self.post(EventsArrived())

    def drain(self) -> list[Event]:
        """Everything queued so far, in order; the next event posts a new wake-up."""
        self._scheduled = False
        events, self.queue = self.queue, []
        return events

    def close(self) -> None:
        self.closed = True
