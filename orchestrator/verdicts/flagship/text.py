"""How the flagship's reasons write figures: a value rounded as a reader wants it, an interval as "[lo, hi]"."""

from __future__ import annotations

from typing import Any

from orchestrator.bench_compare import interval_text


def num(value: Any, digits: int = 2, missing: str = "None") -> str:
    """``value`` rounded to ``digits`` (an int stays an int), or ``missing`` when there is none."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return missing if value is None else str(value)
    return str(round(value, digits))


def ci(value: Any) -> str:
    return interval_text(value)
