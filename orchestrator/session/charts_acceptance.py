"""The acceptance pictures of a postmortem: points with their 95% interval bars, grouped by category (a wiring, a
draft position, a prompt-length bucket, a server), one colour per series (predicted offline, measured by the
server; before and after the fix). Hand-written SVG, like the tuner's and the sweep's charts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

COLORS = ("#1565c0", "#ef6c00", "#2e7d32", "#6a1b9a")


@dataclass(frozen=True)
class Point:
    category: str
    series: str
    value: float | None
    ci: Sequence[float] | None = None
    highlight: bool = False   # drawn with a ring (the served wiring)


def svg_points(points: Sequence[Point], *, title: str, ylabel: str, floor: float = 0.0) -> str:
    """A dot per (category, series) with its interval bar; categories left to right in first-seen order."""
    width, height, left, right, top, bottom = 680, 340, 60, 20, 44, 70
    categories = list(dict.fromkeys(p.category for p in points))
    series = list(dict.fromkeys(p.series for p in points))
    values = [float(v) for p in points for v in ([p.value] if p.value is not None else []) + list(p.ci or [])]
    hi = max(values + [floor + 1.0]) * 1.08
    lo = min(values + [floor])
    span = max(hi - lo, 1e-9)
    slot = (width - left - right) / max(1, len(categories))

    def x(cat: str, s: str) -> float:
        i, j = categories.index(cat), series.index(s)
        return left + slot * (i + (j + 1) / (len(series) + 1))

    def y(v: float) -> float:
        return top + (height - top - bottom) * (1 - (v - lo) / span)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           'font-size="12">', f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="20" font-size="15" font-weight="bold">{escape(title)}</text>',
           f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#333"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#333"/>',
           f'<text x="8" y="{top - 8}">{escape(ylabel)}</text>']
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        v = lo + span * frac
        out.append(f'<text x="6" y="{y(v) + 4:.1f}" fill="#666">{v:.2f}</text>')
        out.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{width - right}" y2="{y(v):.1f}" stroke="#eee"/>')
    for i, cat in enumerate(categories):
        cx = left + slot * (i + 0.5)
        out.append(f'<text x="{cx:.1f}" y="{height - bottom + 16}" text-anchor="middle">{escape(cat[:22])}</text>')
    for p in points:
        if p.value is None:
            continue
        color = COLORS[series.index(p.series) % len(COLORS)]
        cx = x(p.category, p.series)
        if p.ci:
            out.append(f'<line x1="{cx:.1f}" y1="{y(float(p.ci[0])):.1f}" x2="{cx:.1f}" y2="{y(float(p.ci[1])):.1f}" '
                       f'stroke="{color}" stroke-width="2"/>')
            for end in p.ci:
                out.append(f'<line x1="{cx - 4:.1f}" y1="{y(float(end)):.1f}" x2="{cx + 4:.1f}" '
                           f'y2="{y(float(end)):.1f}" stroke="{color}" stroke-width="2"/>')
        out.append(f'<circle cx="{cx:.1f}" cy="{y(float(p.value)):.1f}" r="4.5" fill="{color}"/>')
        if p.highlight:
            out.append(f'<circle cx="{cx:.1f}" cy="{y(float(p.value)):.1f}" r="8" fill="none" stroke="#c62828" '
                       'stroke-width="2"/>')
    for j, s in enumerate(series):
        lx = left + 10 + j * 170
        out.append(f'<circle cx="{lx}" cy="{height - 22}" r="4.5" fill="{COLORS[j % len(COLORS)]}"/>')
        out.append(f'<text x="{lx + 9}" y="{height - 18}">{escape(s[:24])}</text>')
    if any(p.highlight for p in points):
        out.append(f'<text x="{width - right - 190}" y="{top - 8}" fill="#c62828">ringed: what the server feeds</text>')
    out.append("</svg>")
    return "\n".join(out)
