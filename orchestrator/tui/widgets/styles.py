"""Colours and glyphs shared by the panes (pure data)."""

from __future__ import annotations

from rich.text import Text

from orchestrator.events import HypothesisState
from orchestrator.tui.model import RowStatus, ServerState

STATE_STYLE: dict[HypothesisState, str] = {
    "open": "grey62",
    "supported": "yellow",
    "confirmed": "bold green",
    "refuted": "red",
    "inconclusive": "magenta",
}

STATUS_GLYPH: dict[RowStatus, tuple[str, str]] = {
    "pending": ("·", "grey50"),
    "running": ("▶", "bold cyan"),
    "ok": ("✓", "green"),
    "failed": ("✗", "bold red"),
    "skipped": ("↷", "grey50"),
    "timeout": ("⏱", "red"),
    "cancelled": ("■", "yellow"),
    "unreachable": ("⚠", "red"),
}

SERVER_STYLE: dict[ServerState, str] = {"starting": "cyan", "ready": "green", "stopped": "grey50", "failed": "bold red"}


def state_text(state: HypothesisState) -> Text:
    return Text(state, style=STATE_STYLE.get(state, ""))


def status_glyph(status: RowStatus) -> Text:
    glyph, style = STATUS_GLYPH.get(status, ("?", ""))
    return Text(glyph, style=style)
