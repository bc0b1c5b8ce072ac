"""A tiny document model (headings, paragraphs, tables, code, images) rendered to Markdown or to one
self-contained HTML file. Reports build blocks; they never write markup themselves."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Para:
    text: str  # plain text; `code` spans and **bold** are kept as-is in Markdown, escaped in HTML


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]


@dataclass
class Code:
    text: str
    language: str = ""
    first_line: int | None = None  # show line numbers starting here
    marked: set[int] = field(default_factory=set)  # absolute line numbers to highlight


@dataclass
class Image:
    path: Path  # an SVG or PNG inside the session directory
    alt: str


Block = Heading | Para | Table | Code | Image


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", "<br>")


def to_markdown(blocks: list[Block], base: Path) -> str:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f"{'#' * b.level} {b.text}\n")
        elif isinstance(b, Para):
            out.append(b.text + "\n")
        elif isinstance(b, Table):
            out.append("| " + " | ".join(_md_cell(h) for h in b.header) + " |")
            out.append("|" + "---|" * len(b.header))
            out.extend("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows)
            out.append("")
        elif isinstance(b, Code):
            text = b.text
            if b.first_line is not None:
                lines = text.splitlines()
                width = len(str(b.first_line + len(lines)))
                text = "\n".join(
                    f"{'>' if b.first_line + i in b.marked else ' '}{b.first_line + i:>{width}}  {line}"
                    for i, line in enumerate(lines)
                )
            fence = "````" if "```" in text else "```"
            out.append(f"{fence}{b.language}\n{text}\n{fence}\n")
        elif isinstance(b, Image):
            try:
                rel = b.path.relative_to(base)
            except ValueError:
                rel = b.path
            out.append(f"![{b.alt}]({rel.as_posix()})\n")
    return "\n".join(out)


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#1d2330;line-height:1.45}
h1{border-bottom:2px solid #334;padding-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #ccd}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em}td,th{border:1px solid #ccd;padding:.25em .6em;vertical-align:top;text-align:left}
th{background:#eef1f6}pre{background:#f6f8fa;border:1px solid #dde;padding:.6em;overflow-x:auto;font-size:.85em}
.ln{color:#8a93a6;user-select:none;padding-right:1em}.mark{background:#fff3bf;display:block}
code{background:#f0f2f5;padding:0 .2em}img{max-width:100%}
"""


def _inline(text: str) -> str:
    import re

    escaped = html.escape(text)
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", escaped)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def image_file(path: Path, base: Path) -> Path | None:
    """Where an image block's file is: ``path`` as written (absolute, or relative to the working directory, which is
    how a relative sessions directory names it), else under ``base`` (a path relative to the session), else the file
    of that name in ``base``'s artifacts/ (a session imported from another machine, its absolute paths foreign)."""
    for candidate in (path, base / path, base / "artifacts" / path.name):
        if candidate.is_file():
            return candidate
    return None


def to_html(blocks: list[Block], base: Path, title: str) -> str:
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
           f"<style>{CSS}</style></head><body>"]
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f"<h{b.level}>{_inline(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            out.append(f"<p>{_inline(b.text)}</p>")
        elif isinstance(b, Table):
            out.append("<table><tr>" + "".join(f"<th>{_inline(h)}</th>" for h in b.header) + "</tr>")
            for row in b.rows:
                out.append("<tr>" + "".join(f"<td>{_inline(str(c))}</td>" for c in row) + "</tr>")
            out.append("</table>")
        elif isinstance(b, Code):
            lines = b.text.splitlines()
            if b.first_line is not None:
                rendered = []
                for i, line in enumerate(lines):
                    n = b.first_line + i
                    numbered = f"<span class='ln'>{n}</span>{html.escape(line)}"
                    rendered.append(f"<span class='mark'>{numbered}</span>" if n in b.marked else numbered + "\n")
                out.append("<pre>" + "".join(r if r.endswith("\n") else r for r in rendered) + "</pre>")
            else:
                out.append(f"<pre>{html.escape(b.text)}</pre>")
        elif isinstance(b, Image):
            path = image_file(b.path, base)
            if path is None:  # said in the page, never dropped in silence
                out.append(f"<p><em>(chart “{html.escape(b.alt)}” missing: {html.escape(str(b.path))} is not in "
                           f"this session's directory)</em></p>")
                continue
            mime = "image/svg+xml" if path.suffix == ".svg" else "image/png"
            data = base64.b64encode(path.read_bytes()).decode()
            out.append(f"<p><img alt='{html.escape(b.alt)}' src='data:{mime};base64,{data}'></p>")
    out.append("</body></html>")
    return "\n".join(out)
