"""The output pane: the selected step's output in a Textual ``Log`` (renders only visible lines) with a
line cap. It follows new output only while scrolled to the bottom (``Log`` checks that itself).

Under a flood, new lines are gathered and written at most ``FLUSH_HZ`` times a second, and never more
than the cap at once (older ones would be pruned at once): writing costs per frame, not per line.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from textual.widgets import Log

from orchestrator.tui.model import StepRow

FLUSH_HZ = 30


class OutputPane(Log):
    DEFAULT_CSS = """
    OutputPane { height: 1fr; }
    """

    def __init__(self, *, max_lines: int, **kwargs: Any) -> None:  # Widget's name, id, classes, disabled
        super().__init__(max_lines=max_lines, auto_scroll=True, **kwargs)
        self.step_id: str | None = None
        self._pending: deque[str] = deque(maxlen=max_lines)
        self._flush_scheduled = False

    def show_step(self, row: StepRow | None) -> None:
        """Replace the content with a step's kept lines."""
        self.clear()
        self._pending.clear()
        self.step_id = row.step_id if row else None
        if row is None:
            return
        header = f"── {row.step_id} {row.name} [{row.action}]"
        if row.total_lines > len(row.lines):
            header += f"  (last {len(row.lines)} of {row.total_lines} lines; all in the session's outputs/)"
        self.write_line(header)
        self.write_lines(row.lines)
        if row.error:
            self.write_line(f"✗ {row.error}")

    def append(self, step_id: str, lines: Sequence[str]) -> None:
        """New lines for ``step_id``; ignored unless it is the step shown. Only the last ``max_lines`` of a
        burst are written: the older ones would be pruned at once."""
        if step_id != self.step_id or not lines:
            return
        self._pending.extend(lines)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.set_timer(1 / FLUSH_HZ, self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        if self._pending:
            lines, self._pending = list(self._pending), deque(maxlen=self.max_lines)
            self.write_lines(lines)
