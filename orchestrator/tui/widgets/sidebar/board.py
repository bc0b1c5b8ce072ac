"""The hypothesis board: state (coloured), id and title, evidence count. Select a row for its history."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from orchestrator.hypotheses.board import HypothesisBoard
from orchestrator.tui.messages import HypothesisSelected
from orchestrator.tui.widgets.sidebar.fit import fit_column
from orchestrator.tui.widgets.styles import state_text


class BoardTable(DataTable[Text | str]):
    DEFAULT_CSS = """
    BoardTable { height: auto; max-height: 40%; }
    """

    def __init__(self, **kwargs: Any) -> None:  # Widget's name, id, classes, disabled
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self.border_title = "Hypotheses"

    def on_mount(self) -> None:
        self.add_column("state", key="state", width=10)
        self.add_column("hypothesis", key="hypothesis", width=10)
        self.add_column("ev", key="ev", width=2)

    def on_resize(self) -> None:
        fit_column(self, "hypothesis")

    def show(self, board: HypothesisBoard) -> None:
        keep = self.cursor_row
        self.clear()
        for hid, entry in board.entries.items():
            mark = " ⚡" if entry.conflicted else ""
            self.add_row(state_text(entry.state), Text(f"{hid}{mark}", overflow="ellipsis"),
                         str(entry.evidence_count), key=hid)
        if self.row_count:
            self.move_cursor(row=min(keep, self.row_count - 1))
        fit_column(self, "hypothesis")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.post_message(HypothesisSelected(str(event.row_key.value)))
