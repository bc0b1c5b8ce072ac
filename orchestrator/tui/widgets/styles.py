"""Colours and glyphs shared by the panes (pure data)."""

from __future__ import annotations

from rich.text import Text

STATE_STYLE = {
    "open": "grey62",
    "supported": "yellow",
    "confirmed": "bold green",
    "refuted": "red",
    "inconclusive": "magenta",
}

STATUS_GLYPH = {
    "pending": ("·", "grey50"),
    "running": ("▶", "bold cyan"),
    "ok": ("✓", "green"),
    "failed": ("✗", "bold red"),
    "skipped": ("↷", "grey50"),
    "timeout": ("⏱", "red"),
    "cancelled": ("■", "yellow"),
    "unreachable": ("⚠", "red"),
}

SERVER_STYLE = {"starting": "cyan", "ready": "green", "stopped": "grey50", "failed": "bold red"}


def state_text(state: str) -> Text:
    return Text(state, style=STATE_STYLE.get(state, ""))


def status_glyph(status: str) -> Text:
    glyph, style = STATUS_GLYPH.get(status, ("?", ""))
    return Text(glyph, style=style)
