"""Replay of a saved session (read-only): the same panes, and a timeline of events to step through.
Moving the timeline cursor rebuilds the model from the first event up to the cursor."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header

from orchestrator.events import StepFinished
from orchestrator.session.reader import LoadedSession
from orchestrator.tui.model import build_model, describe_event
from orchestrator.tui.widgets.panes import SessionPanes


class ReplayScreen(Screen[None]):
    BINDINGS = [
        Binding("left,comma", "step(-1)", "Back", id="replay.back", priority=True),
        Binding("right,period", "step(1)", "Forward", id="replay.forward", priority=True),
        Binding("home", "jump(0)", "Start", id="replay.start", priority=True),
        Binding("end", "jump(-1)", "End", id="replay.end", priority=True),
        Binding("]", "next_step_event", "Next step", id="replay.next_step", priority=True),
    ]
    DEFAULT_CSS = """
    ReplayScreen #timeline { height: 6; border-top: solid $primary; }
    """

    def __init__(self, session: LoadedSession) -> None:
        super().__init__(id="replay")
        self.session = session
        self.position = len(session.events) - 1

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield SessionPanes(build_model(self.session.events), id="panes")
        yield DataTable(id="timeline", cursor_type="row", show_header=False)
        yield Footer()

    def on_mount(self) -> None:
        timeline = self.query_one("#timeline", DataTable)
        timeline.add_column("seq", width=5)
        timeline.add_column("event")
        for i, event in enumerate(self.session.events):
            timeline.add_row(str(event.seq), describe_event(event), key=str(i))
        timeline.border_title = "Timeline"
        self.sub_title = f"replay · {self.session.name} · read-only"
        self.jump_to(self.position)

    def jump_to(self, position: int) -> None:
        events = self.session.events
        if not events:
            return
        self.position = max(0, min(position, len(events) - 1))
        timeline = self.query_one("#timeline", DataTable)
        if timeline.cursor_row != self.position:
            timeline.move_cursor(row=self.position)
        self._rebuild()

    def _rebuild(self) -> None:
        panes = self.query_one(SessionPanes)
        panes.model = build_model(self.session.events[: self.position + 1])
        panes.render_all()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id != "timeline":
            return
        event.stop()
        if event.cursor_row != self.position:
            self.position = event.cursor_row
            self._rebuild()

    def action_step(self, delta: int) -> None:
        self.jump_to(self.position + delta)

    def action_jump(self, where: int) -> None:
        self.jump_to(len(self.session.events) - 1 if where < 0 else where)

    def action_next_step_event(self) -> None:
        """Jump to the next step_finished (one experiment at a time)."""
        for i in range(self.position + 1, len(self.session.events)):
            if isinstance(self.session.events[i], StepFinished):
                self.jump_to(i)
                return
        self.jump_to(len(self.session.events) - 1)
