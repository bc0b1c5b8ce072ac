"""A sweep's results as files: results.json, results.csv, a markdown table, and an SVG bar chart written
by hand (no matplotlib): output tok/s and accept length per config, the no-speculation baseline marked."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

COLUMNS = ("label", "status", "tok_s", "speedup", "accept_length", "server_accept_length", "latency_p50",
           "latency_p99", "ttft_p50", "verify_ct", "overrides", "reason")


def _cell(row: dict[str, Any], key: str) -> str:
    value = row.get(key)
    if key == "overrides":
        return "; ".join(f"{o['flag']}: {o['requested']}->{o['effective']}" for o in value or [])
    if value is None:
        return ""
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    cols = ("label", "status", "tok_s", "speedup", "accept_length", "server_accept_length", "latency_p50", "overrides")
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row, c).replace("|", "/") or "-" for c in cols) + " |")
    return "\n".join(lines)


def csv_text(rows: Sequence[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow([*COLUMNS, "flags"])
    for row in rows:
        writer.writerow([*(_cell(row, c) for c in COLUMNS), json.dumps(row.get("flags", {}), sort_keys=True)])
    return buffer.getvalue()


def svg_chart(rows: Sequence[dict[str, Any]], *, title: str) -> str:
    """Two panels of horizontal bars (tok/s | accept length), one row per config; baseline grey + dashed line."""
    label_w, panel_w, row_h, top, gap = 260, 300, 26, 58, 40
    width = label_w + 2 * panel_w + gap + 80
    height = top + row_h * max(1, len(rows)) + 40
    max_tok = max([r.get("tok_s") or 0 for r in rows] + [1e-9])
    max_acc = max([r.get("accept_length") or 0 for r in rows] + [1.0])
    x_tok, x_acc = label_w, label_w + panel_w + gap
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="10" y="20" font-size="15" font-weight="bold">{escape(title)}</text>',
        f'<text x="{x_tok}" y="{top - 12}" font-weight="bold">output tok/s</text>',
        f'<text x="{x_acc}" y="{top - 12}" font-weight="bold">accept length (tokens per verify)</text>',
    ]
    baseline = next((r for r in rows if r.get("baseline") and r.get("tok_s")), None)
    for i, row in enumerate(rows):
        y = top + i * row_h
        is_base = bool(row.get("baseline"))
        label = row["label"] + ("  [baseline]" if is_base else "") + ("  ★" if row.get("best") else "")
        out.append(f'<text x="10" y="{y + 16}">{escape(label[:42])}</text>')
        tok, acc = row.get("tok_s"), row.get("accept_length")
        if row.get("status") != "ok":
            out.append(f'<text x="{x_tok + 4}" y="{y + 16}" fill="#a00">{escape(row.get("status", ""))}: '
                       f'{escape(str(row.get("reason") or "")[:60])}</text>')
            continue
        if tok is not None:
            w = panel_w * tok / max_tok
            color = "#9e9e9e" if is_base else ("#2e7d32" if row.get("best") else "#1565c0")
            out.append(f'<rect x="{x_tok}" y="{y + 4}" width="{w:.1f}" height="{row_h - 8}" fill="{color}"/>')
            out.append(f'<text x="{x_tok + w + 4:.1f}" y="{y + 16}">{tok:.1f}</text>')
        if acc is not None:
            w = panel_w * acc / max_acc
            out.append(f'<rect x="{x_acc}" y="{y + 4}" width="{w:.1f}" height="{row_h - 8}" fill="#ef6c00"/>')
            out.append(f'<text x="{x_acc + w + 4:.1f}" y="{y + 16}">{acc:.2f}</text>')
        elif is_base:
            out.append(f'<text x="{x_acc + 4}" y="{y + 16}" fill="#666">no speculation</text>')
    if baseline is not None:
        bx = x_tok + panel_w * baseline["tok_s"] / max_tok
        out.append(f'<line x1="{bx:.1f}" y1="{top - 4}" x2="{bx:.1f}" y2="{height - 30}" stroke="#555" '
                   'stroke-dasharray="4,3"/>')
        out.append(f'<text x="{bx + 3:.1f}" y="{height - 18}" fill="#555">baseline {baseline["tok_s"]:.1f} tok/s</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_artifacts(directory: Path, stem: str, rows: Sequence[dict[str, Any]], summary: dict[str, Any],
                    *, title: str) -> dict[str, Path]:
    """Write <stem>.json/.csv/.md/.svg into ``directory``; returns kind -> path."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {
        "table": directory / f"{stem}.json", "csv": directory / f"{stem}.csv",
        "markdown": directory / f"{stem}.md", "chart": directory / f"{stem}.svg",
    }
    paths["table"].write_text(json.dumps({**summary, "rows": list(rows)}, indent=2, default=str) + "\n", encoding="utf-8")
    paths["csv"].write_text(csv_text(rows), encoding="utf-8")
    paths["markdown"].write_text(f"# {title}\n\n{markdown_table(rows)}\n", encoding="utf-8")
    paths["chart"].write_text(svg_chart(rows, title=title), encoding="utf-8")
    return paths
