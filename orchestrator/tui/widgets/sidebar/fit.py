"""Give one DataTable column whatever width the others leave (so names use the space there is)."""

from __future__ import annotations

from typing import Any

from textual.widgets import DataTable


def fit_column(table: DataTable[Any], key: str, *, minimum: int = 6) -> None:
    width = table.scrollable_content_region.width
    if width <= 0 or key not in {c.value for c in table.columns}:
        return
    pad = 2 * table.cell_padding
    others = sum(c.width + pad for k, c in table.columns.items() if k.value != key)
    column = table.columns[next(k for k in table.columns if k.value == key)]
    new = max(minimum, width - others - pad)
    if column.width != new or column.auto_width:
        column.auto_width = False
        column.width = new
        # Textual (8.x) has no public call to re-measure after a column's width changes; this is the flag
        # its own column-width updates set. Revisit when Textual grows one.
        table._require_update_dimensions = True
        table.refresh()
