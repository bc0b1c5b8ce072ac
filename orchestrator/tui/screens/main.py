"""The live session screen: panes plus a status line. It renders; the app sends the commands."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from orchestrator.events import Event, Output, StepFinished, StepStarted
from orchestrator.tui.model import SessionModel
from orchestrator.tui.widgets.panes import SessionPanes


class MainScreen(Screen[None]):
    def __init__(self, model: SessionModel) -> None:
        super().__init__(id="main")
        self.model = model

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield SessionPanes(self.model, id="panes")
        yield Static("", id="status", markup=True)
        yield Footer()

    @property
    def panes(self) -> SessionPanes:
        return self.query_one(SessionPanes)

    def apply_events(self, events: list[Event]) -> set[str]:
        """Apply a drained batch to the model, then repaint what changed, once; return what changed."""
        changed: set[str] = set()
        seen: set[str] = set()
        new_lines: dict[str, list[str]] = {}
        model = self.model
        for event in events:
            if isinstance(event, Output):
                model.events += 1
                lines = model.add_output(event.step_id, event.host, event.stream, event.text)
                if lines:
                    new_lines.setdefault(event.step_id, []).extend(lines)
                continue
            if isinstance(event, (StepStarted, StepFinished)) and new_lines:
                # Flush before the step changes, so lines land under the right header.
                self.panes.render_changes(changed, new_lines)
                seen |= changed
                changed, new_lines = set(), {}
            changed |= model.apply(event)
        if changed or new_lines:
            self.panes.render_changes(changed, new_lines)
        return changed | seen

    def set_status(self, text: str) -> None:
        self.query_one("#status", Static).update(text)
