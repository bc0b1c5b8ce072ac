"""The step list: status glyph, id, name, host, duration. Highlighting a row selects that step."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from orchestrator.tui.messages import StepSelected
from orchestrator.tui.model import StepRow
from orchestrator.tui.widgets.sidebar.fit import fit_column
from orchestrator.tui.widgets.styles import status_glyph


def _duration(row: StepRow) -> str:
    if row.duration is None:
        return "    …" if row.status == "running" else ""
    text = f"{row.duration:.1f}s" if row.duration < 100 else f"{row.duration / 60:.0f}m"
    return text.rjust(5)


def _host(row: StepRow) -> Text:
    return Text(f" {row.host_label}", overflow="ellipsis", no_wrap=True)


class StepTable(DataTable[Text | str]):
    DEFAULT_CSS = """
    StepTable { height: 1fr; }
    """

    def __init__(self, **kwargs: Any) -> None:  # Widget's name, id, classes, disabled
        # No cell padding: the sidebar is narrow at 80 columns; cells carry their own spacing.
        super().__init__(cursor_type="row", cell_padding=0, **kwargs)
        self.border_title = "Steps"
        self._ids: list[str] = []
        self._echoes: set[str] = set()  # rows we moved to ourselves: their highlight is not a user's pick

    def on_mount(self) -> None:
        self.add_column(" ", key="status", width=2)
        self.add_column("id", key="id", width=4)
        self.add_column("step", key="step", width=10)
        self.add_column("host", key="host", width=10)
        self.add_column(" time", key="time", width=5)

    def on_resize(self) -> None:
        fit_column(self, "step")

    @property
    def selected_id(self) -> str | None:
        if not self._ids or self.cursor_row < 0 or self.cursor_row >= len(self._ids):
            return None
        return self._ids[self.cursor_row]

    def show(self, rows: Iterable[StepRow]) -> None:
        rows = list(rows)
        ids = [r.step_id for r in rows]
        if ids == self._ids:  # same rows: update cells in place (keeps cursor and scroll)
            for row in rows:
                self.update_cell(row.step_id, "status", status_glyph(row.status))
                self.update_cell(row.step_id, "host", _host(row))
                self.update_cell(row.step_id, "time", _duration(row))
                self.update_cell(row.step_id, "step", self._step_label(row))
            return
        selected = self.selected_id
        self.clear()
        self._ids = ids
        for row in rows:
            self.add_row(status_glyph(row.status), row.step_id, self._step_label(row), _host(row), _duration(row),
                         key=row.step_id)
        if selected in ids:
            self.select(selected)
        fit_column(self, "step")

    @staticmethod
    def _step_label(row: StepRow) -> Text:
        style = "italic" if row.section == "adhoc" else ("grey62" if row.section == "always" else "")
        return Text(row.name, style=style, overflow="ellipsis", no_wrap=True, end="")

    def select(self, step_id: str) -> None:
        """Move the cursor without announcing a selection (the caller already shows the step)."""
        if step_id in self._ids and self.selected_id != step_id:
            self._echoes.add(step_id)
            self.move_cursor(row=self._ids.index(step_id))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        if event.row_key is None or event.row_key.value is None:
            return
        step_id = str(event.row_key.value)
        if step_id in self._echoes:
            self._echoes.discard(step_id)
            return
        self.post_message(StepSelected(step_id))
