"""All panes of a session, fed from one ``SessionModel``. Shared by the live screen and the replay."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widget import Widget
from textual.widgets import TabbedContent, TabPane

from orchestrator.tui.messages import HypothesisSelected, StepSelected
from orchestrator.tui.model import SessionModel, StepRow
from orchestrator.tui.widgets.detail.history import HistoryView
from orchestrator.tui.widgets.detail.output import OutputPane
from orchestrator.tui.widgets.detail.servers import ServersTable
from orchestrator.tui.widgets.detail.source import SourceView
from orchestrator.tui.widgets.sidebar.board import BoardTable
from orchestrator.tui.widgets.sidebar.steps import StepTable


class SessionPanes(Widget):
    """Board + steps on the left; output / source / history tabs and the servers strip on the right."""

    def __init__(self, model: SessionModel, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.model = model
        self.selected_step: str | None = None
        self.selected_hypothesis: str | None = None
        self._follow = True  # select each new running step until the user picks one

    def compose(self) -> ComposeResult:
        with Horizontal(id="body"):
            with Vertical(id="sidebar"):
                yield BoardTable(id="board")
                yield StepTable(id="steps")
            with Vertical(id="detail"):
                with TabbedContent(id="tabs"):
                    with TabPane("Output", id="tab-output"):
                        yield OutputPane(max_lines=self.model.line_cap, id="output")
                    with TabPane("Source", id="tab-source"):
                        yield SourceView(id="source")
                    with TabPane("History", id="tab-history"):
                        yield HistoryView(id="history")
                yield ServersTable(id="servers")

    def on_mount(self) -> None:
        self.render_all()

    # -- rendering ----------------------------------------------------------------------------------
    def render_all(self) -> None:
        self.render_changes({"steps", "board", "servers", "notes"}, {})
        self._show_step(self.selected_step or next(iter(self.model.steps), None))

    def render_changes(self, changed: set[str], new_lines: dict[str, list[str]]) -> None:
        if "board" in changed:
            self.query_one(BoardTable).show(self.model.board)
            self._show_history()
        elif "notes" in changed:
            self._show_history()
        if "steps" in changed:
            self.query_one(StepTable).show(self.model.steps.values())
            current = self.model.current_step()
            if self._follow and current is not None and current.step_id != self.selected_step:
                self._show_step(current.step_id)
                self.query_one(StepTable).select(current.step_id)
            elif self.selected_step in self.model.steps:
                self._refresh_selected_tail()
        if "servers" in changed:
            servers = self.query_one(ServersTable)
            servers.display = bool(self.model.servers)
            servers.show(self.model.servers.values())
        output = self.query_one(OutputPane)
        for step_id, lines in new_lines.items():
            output.append(step_id, lines)

    def _refresh_selected_tail(self) -> None:
        row = self.model.steps.get(self.selected_step or "")
        if row is not None and row.status not in ("running", "pending") and row.action == "read_source":
            self.query_one(SourceView).show_result(row.result)

    def _show_step(self, step_id: str | None) -> None:
        self.selected_step = step_id
        row: StepRow | None = self.model.steps.get(step_id) if step_id else None
        self.query_one(OutputPane).show_step(row)
        if row is not None and row.action == "read_source" and row.results:
            self.query_one(SourceView).show_result(row.result)

    def _show_history(self) -> None:
        entry = self.model.board.entries.get(self.selected_hypothesis or "")
        self.query_one(HistoryView).show_entry(entry, self.model.notes)

    # -- selection ----------------------------------------------------------------------------------
    def on_step_selected(self, message: StepSelected) -> None:
        if message.step_id != self.selected_step:
            self.select_step(message.step_id)

    def select_step(self, step_id: str) -> None:
        """Show a step's output (a source read: its source too, on the Source tab)."""
        current = self.model.current_step()
        # Picking anything but the running step stops the follow; picking the running one resumes it.
        self._follow = current is None or step_id == current.step_id
        self._show_step(step_id)
        self.query_one(StepTable).select(step_id)
        row = self.model.steps.get(step_id)
        if row is not None and row.action == "read_source" and row.results:
            self.query_one(TabbedContent).active = "tab-source"

    def on_hypothesis_selected(self, message: HypothesisSelected) -> None:
        self.selected_hypothesis = message.hypothesis_id
        self._show_history()
        self.query_one(TabbedContent).active = "tab-history"

    def show_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = f"tab-{tab}"
