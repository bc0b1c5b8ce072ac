"""A hypothesis's logbook entry: what it claims, its prediction, and every piece of evidence in order."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from orchestrator.hypotheses.board import BoardEntry
from orchestrator.tui.widgets.styles import state_text


def render_history(entry: BoardEntry | None, notes: list[Any]) -> RenderableType:
    if entry is None:
        return Text("(select a hypothesis to see its history)", style="grey62")
    h = entry.hypothesis
    parts: list[RenderableType] = [Text.assemble((h.id, "bold"), " — ", h.title, "  ", state_text(entry.state))]
    for label, value in (("why", h.why), ("prediction", h.prediction), ("test", h.test)):
        if value:
            parts.append(Text.assemble((f"{label}: ", "grey62"), value))
    parts.append(Text(f"evidence ({entry.evidence_count}):", style="bold"))
    for update in entry.history:
        who = update.author or update.source
        line = Text.assemble("  ", state_text(update.state), f"  {update.source}/{who}",
                             f" @ {update.step_id}" if update.step_id else "", f": {update.evidence or update.rule or ''}")
        if update.conflicts_with:
            line.append(f"  ⚡ contradicts {update.conflicts_with}", style="bold red")
        parts.append(line)
    mine = [n for n in notes if getattr(n, "hypothesis_id", None) == h.id]
    if mine:
        parts.append(Text("notes:", style="bold"))
        parts.extend(Text(f"  {n.author or ''}: {n.text}") for n in mine)
    return Group(*parts)


class HistoryView(VerticalScroll):
    DEFAULT_CSS = """
    HistoryView { height: 1fr; }
    """

    def compose(self) -> ComposeResult:
        yield Static(render_history(None, []), id="history-body")

    def show_entry(self, entry: BoardEntry | None, notes: list[Any]) -> None:
        self.query_one("#history-body", Static).update(render_history(entry, notes))
