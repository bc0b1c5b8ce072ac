"""The servers pane: engine, host:port, state, accept length, tok/s, flags (after vLLM's per-position acceptance,
when its benchmark measured it, a replayed traffic file's accept length per category, and a tune step's tok/s per
concurrency with where it is the best configuration); overridden flags flagged."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from orchestrator.tui.model import ServerRow
from orchestrator.tui.widgets.styles import SERVER_STYLE


def _flags(row: ServerRow) -> Text:
    overridden = {str(o.get("flag") or o.get("name") or "").lstrip("-") for o in row.overrides}
    text = Text(no_wrap=True, overflow="ellipsis")
    if row.per_position:  # vLLM's per-position acceptance from the last benchmark (its /metrics counters)
        text.append("acc/pos=" + ",".join(f"{r:.2f}" for r in row.per_position) + " ", style="cyan")
    if row.by_category:  # a replayed traffic file: accept length per category ("few": too few requests to tell),
        # with its prompts' mean length in tokens (a category of longer prompts may trail for its length)
        text.append("traffic " + " ".join(f"{name}={'few' if few or value is None else f'{value:.2f}'}"
                                          + (f"({tokens:.0f}t)" if tokens is not None else "")
                                          for name, value, few, tokens in row.by_category) + " ", style="magenta")
    if row.by_concurrency:  # a tune step's configuration: tok/s per request at each concurrency, ★ where best
        text.append("tok/s@c " + " ".join(f"{c}:{rate:.0f}" for c, rate in row.by_concurrency) + " ", style="cyan")
        if row.recommended_at:
            text.append("★ best at c=" + ",".join(map(str, row.recommended_at)) + " ", style="bold green")
    for key, value in row.flags.items():
        name = str(key).lstrip("-")
        short = name.replace("speculative-", "spec-")
        style = "bold red" if name in overridden else ""
        text.append(f"{short}={value}{'!' if name in overridden else ''} ", style=style)
    return text


def _fmt(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


class ServersTable(DataTable[Text | str]):
    DEFAULT_CSS = """
    ServersTable { height: auto; max-height: 7; }
    """

    def __init__(self, **kwargs: Any) -> None:  # Widget's name, id, classes, disabled
        super().__init__(cursor_type="row", **kwargs)
        self.border_title = "Servers"

    def on_mount(self) -> None:
        for label, key, width in (("engine", "engine", 6), ("host:port", "addr", 15), ("state", "state", 8),
                                  ("acc", "acc", 4), ("tok/s", "tok", 6), ("ovr", "ovr", 3), ("flags", "flags", None)):
            self.add_column(label, key=key, width=width)

    def show(self, rows: Iterable[ServerRow]) -> None:
        self.clear()
        for row in rows:
            overrides = Text(str(len(row.overrides)), style="bold red") if row.overrides else Text("0", style="grey50")
            self.add_row(row.engine, f"{row.host}:{row.port or '?'}", Text(row.state, style=SERVER_STYLE.get(row.state, "")),
                         _fmt(row.accept_length, 2), _fmt(row.tok_s, 0), overrides, _flags(row), key=row.server_id)
