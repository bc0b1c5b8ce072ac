"""The tuner's picture: predicted tok/s per chain length (line, interval band) and the measured points (dots with
interval bars), SGLang's trees as dashed series per (topk, draft tokens) with square measured points, the
no-speculation baseline as a dashed line. Hand-written SVG, like the sweep's chart."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from xml.sax.saxutils import escape

#: one dashed series per tree shape (topk, draft tokens) beside the chains' curve
TREE_COLORS = ("#6a1b9a", "#00838f", "#ad1457", "#4e342e", "#558b2f", "#283593")


def svg_curve(rows: Sequence[dict[str, Any]], baseline: dict[str, Any] | None, *, title: str) -> str:
    """``rows``: one per k with ``predicted_tok_s(_ci)`` and, where measured, ``measured_tok_s(_ci)``; rows with a
    ``topk`` are trees (tree_space.py), drawn as one dashed series per (topk, draft tokens) with square points."""
    trees = [r for r in rows if r.get("topk")]
    every = list(rows)
    rows = [r for r in rows if not r.get("topk")]
    width, height, left, right, top, bottom = 640, 360, 60, 20, 40, 50
    ks = [int(r["k"]) for r in every] or [1]
    values = [float(v) for r in every for v in (r.get("predicted_tok_s_ci") or []) + (r.get("measured_tok_s_ci") or [])]
    values += [float(v) for v in (baseline or {}).get("tok_s_ci") or []]
    hi: float = max(values + [1.0]) * 1.08
    x0, x1 = min(ks + [0]), max(ks)

    def x(k: float) -> float:
        return float(left + (width - left - right) * (k - x0) / max(1, x1 - x0))

    def y(v: float) -> float:
        return top + (height - top - bottom) * (1 - v / hi)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           'font-size="12">', f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="20" font-size="15" font-weight="bold">{escape(title)}</text>',
           f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#333"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#333"/>',
           f'<text x="{width / 2 - 80}" y="{height - 12}">draft tokens per cycle (k)</text>',
           f'<text x="8" y="{top - 8}">tok/s per request</text>']
    for k in sorted(set(ks + [0])):
        out.append(f'<text x="{x(k) - 4:.1f}" y="{height - bottom + 16}">{k}</text>')
    for frac in (0.25, 0.5, 0.75, 1.0):
        v = hi * frac
        out.append(f'<text x="6" y="{y(v) + 4:.1f}" fill="#666">{v:.0f}</text>')
    # the curve is the last model's (refitted on every measurement: ``model_tok_s``); a verified point's own
    # prediction, made before it was measured, is the hollow circle beside its measurement
    curve = [(r["k"], r.get("model_tok_s", r.get("predicted_tok_s")), r.get("model_tok_s_ci", r.get("predicted_tok_s_ci")))
             for r in rows]
    band = [(k, v, ci) for k, v, ci in curve if ci and v is not None]
    if band:
        upper = " ".join(f"{x(k):.1f},{y(ci[1]):.1f}" for k, _, ci in band)
        lower = " ".join(f"{x(k):.1f},{y(ci[0]):.1f}" for k, _, ci in reversed(band))
        out.append(f'<polygon points="{upper} {lower}" fill="#90caf9" fill-opacity="0.45"/>')
        line = " ".join(f"{x(k):.1f},{y(v):.1f}" for k, v, _ in band)
        out.append(f'<polyline points="{line}" fill="none" stroke="#1565c0" stroke-width="2"/>')
    for r in rows:
        if r.get("measured_tok_s") is not None and not r.get("probe") and r.get("predicted_tok_s") is not None \
                and r.get("model_tok_s") is not None:
            out.append(f'<circle cx="{x(r["k"]) + 7:.1f}" cy="{y(r["predicted_tok_s"]):.1f}" r="4" fill="none" '
                       'stroke="#1565c0" stroke-width="1.5"/>')
    for r in rows:
        if r.get("measured_tok_s") is None:
            continue
        cx = x(r["k"])
        lo, hi_ = (float(v) for v in (r.get("measured_tok_s_ci") or [r["measured_tok_s"]] * 2))
        color = "#2e7d32" if r.get("recommended") else "#ef6c00"
        out.append(f'<line x1="{cx:.1f}" y1="{y(lo):.1f}" x2="{cx:.1f}" y2="{y(hi_):.1f}" stroke="{color}" '
                   'stroke-width="2"/>')
        out.append(f'<circle cx="{cx:.1f}" cy="{y(r["measured_tok_s"]):.1f}" r="5" fill="{color}"/>')
    shapes = sorted({(int(r["topk"]), int(r["draft_tokens"])) for r in trees})
    for i, shape in enumerate(shapes):
        color = TREE_COLORS[i % len(TREE_COLORS)]
        series = sorted((r for r in trees if (int(r["topk"]), int(r["draft_tokens"])) == shape), key=lambda r: r["k"])
        points = " ".join(f"{x(r['k']):.1f},{y(r['predicted_tok_s']):.1f}" for r in series)
        out.append(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="1.5" '
                   'stroke-dasharray="6,3"/>')
        out.append(f'<text x="{width - right - 150}" y="{top + 14 + 14 * i}" fill="{color}">tree topk {shape[0]}, '
                   f'{shape[1]} tokens</text>')
        for r in series:
            if r.get("measured_tok_s") is None:
                continue
            cx = x(r["k"]) + 4
            lo, hi_ = (float(v) for v in (r.get("measured_tok_s_ci") or [r["measured_tok_s"]] * 2))
            fill = "#2e7d32" if r.get("recommended") else color
            out.append(f'<line x1="{cx:.1f}" y1="{y(lo):.1f}" x2="{cx:.1f}" y2="{y(hi_):.1f}" stroke="{fill}" '
                       'stroke-width="2"/>')
            out.append(f'<rect x="{cx - 4:.1f}" y="{y(r["measured_tok_s"]) - 4:.1f}" width="8" height="8" '
                       f'fill="{fill}"/>')
    if baseline and baseline.get("tok_s"):
        by = y(baseline["tok_s"])
        out.append(f'<line x1="{left}" y1="{by:.1f}" x2="{width - right}" y2="{by:.1f}" stroke="#555" '
                   'stroke-dasharray="5,4"/>')
        out.append(f'<text x="{width - right - 170}" y="{by - 5:.1f}" fill="#555">no speculation '
                   f'{baseline["tok_s"]:.1f} tok/s</text>')
    out.append(f'<text x="{left + 10}" y="{top + 14}" fill="#1565c0">predicted (95% band; hollow: a verified '
               'point\'s prediction before it was measured)</text>')
    out.append(f'<text x="{left + 10}" y="{top + 30}" fill="#ef6c00">measured (95% CI); green: recommended</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def svg_concurrency(entries: Sequence[dict[str, Any]], crossover: dict[str, Any] | None, *, title: str) -> str:
    """The answer per concurrency (tune.py ``by_concurrency``): the fastest measured configuration's speedup over
    the baseline at the same concurrency, with the range its and the baseline's intervals allow, on a log
    concurrency axis, coloured by whether it pays there (green yes, red no, grey inconclusive); the line at 1x and
    the crossover estimate (orchestrator/tuning/concurrency.py) where there is one."""
    import math

    width, height, left, right, top, bottom = 640, 360, 60, 20, 40, 50
    points = []
    for e in entries:
        rec, base = e.get("recommended") or {}, e.get("baseline") or {}
        if not rec or not base.get("tok_s"):
            continue
        lo = float(rec["tok_s_ci"][0]) / float(base["tok_s_ci"][1]) if base.get("tok_s_ci") else rec["speedup"]
        hi = float(rec["tok_s_ci"][1]) / float(base["tok_s_ci"][0]) if base.get("tok_s_ci") else rec["speedup"]
        points.append((int(e["concurrency"]), float(rec["speedup"]), lo, hi, str(rec.get("beats_baseline")),
                       str(rec.get("label") or f"k={rec.get('k')}")))
    cs = [p[0] for p in points] or [1]
    span = max(math.log(max(cs)) - math.log(min(cs)), 1e-9)
    ymax = max([p[3] for p in points] + [1.2]) * 1.08

    def x(c: float) -> float:
        if len(set(cs)) == 1:
            return (left + width - right) / 2
        return float(left + (width - left - right) * (math.log(c) - math.log(min(cs))) / span)

    def y(v: float) -> float:
        return top + (height - top - bottom) * (1 - v / ymax)

    colors = {"yes": "#2e7d32", "no": "#c62828"}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           'font-size="12">', f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="20" font-size="15" font-weight="bold">{escape(title)}</text>',
           f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#333"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#333"/>',
           f'<text x="{width / 2 - 90}" y="{height - 12}">concurrency (requests in flight)</text>',
           f'<text x="8" y="{top - 8}">speedup over no speculation</text>',
           f'<line x1="{left}" y1="{y(1.0):.1f}" x2="{width - right}" y2="{y(1.0):.1f}" stroke="#555" '
           'stroke-dasharray="5,4"/>', f'<text x="{width - right - 120}" y="{y(1.0) - 5:.1f}" fill="#555">1x: '
                                       'no speculation</text>']
    for frac in (0.25, 0.5, 0.75, 1.0):
        out.append(f'<text x="6" y="{y(ymax * frac) + 4:.1f}" fill="#666">{ymax * frac:.2f}x</text>')
    if len(points) > 1:
        out.append('<polyline points="' + " ".join(f"{x(c):.1f},{y(s):.1f}" for c, s, *_ in points)
                   + '" fill="none" stroke="#1565c0" stroke-width="1.5"/>')
    for c, speedup, lo, hi, pays, name in points:
        color = colors.get(pays, "#757575")
        out.append(f'<text x="{x(c) - 4:.1f}" y="{height - bottom + 16}">{c}</text>')
        out.append(f'<line x1="{x(c):.1f}" y1="{y(lo):.1f}" x2="{x(c):.1f}" y2="{y(hi):.1f}" stroke="{color}" '
                   'stroke-width="2"/>')
        out.append(f'<circle cx="{x(c):.1f}" cy="{y(speedup):.1f}" r="5" fill="{color}"/>')
        out.append(f'<text x="{x(c) + 8:.1f}" y="{y(speedup) - 6:.1f}" fill="{color}">{escape(name)} '
                   f'{speedup:.2f}x</text>')
    estimate = (crossover or {}).get("crossover") or {}
    if isinstance(estimate, dict) and estimate.get("estimate"):
        cx = x(float(estimate["estimate"]))
        out.append(f'<line x1="{cx:.1f}" y1="{top}" x2="{cx:.1f}" y2="{height - bottom}" stroke="#c62828" '
                   'stroke-dasharray="3,3"/>')
        out.append(f'<text x="{cx + 4:.1f}" y="{top + 12}" fill="#c62828">crossover ~{estimate["estimate"]:g} '
                   '(interpolated)</text>')
    out.append(f'<text x="{left + 10}" y="{top + 14}" fill="#333">the fastest measured configuration per '
               'concurrency; bars: the range its and the baseline\'s 95% intervals allow</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
