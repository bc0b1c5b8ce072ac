"""The source viewer: ``read_source`` results, syntax highlighted with line numbers, the read range
(or the matched lines) marked."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static


def _lexer(path: str | None) -> str:
    if path and path.endswith((".yaml", ".yml")):
        return "yaml"
    if path and path.endswith(".json"):
        return "json"
    return "python"


def render_reads(result: dict[str, Any]) -> RenderableType:
    """One block per read span: a header (file, range, version) and highlighted code."""
    version = result.get("version") or "?"
    blocks: list[RenderableType] = []
    for read in result.get("reads") or []:
        err = read.get("error") or read.get("not_found")  # a broken read, or one this version has nothing for
        if err:
            message = err.get("message") if isinstance(err, dict) else str(err)
            blocks.append(Text(f"✗ {read.get('file') or read.get('symbol') or read.get('pattern')}: {message}",
                               style="bold red"))
            continue
        for span in read.get("matches") or [read]:
            lines = span.get("lines") or []
            if not lines:
                continue
            start, end = span.get("start") or lines[0][0], span.get("end") or lines[-1][0]
            label = span.get("symbol") or read.get("symbol") or read.get("pattern") or read.get("lines_spec") or ""
            blocks.append(Text.assemble((f"{span.get('file') or read.get('file')}", "bold"),
                                        f":{start}-{end} ", (f"[{label}] " if label else "", "cyan"),
                                        (f"{result.get('package', '')} {version}", "grey62")))
            marks = set(span.get("match_lines") or [])
            first, last = lines[0][0], lines[-1][0]
            if not marks and (first < start or last > end):  # context around the range: mark the range
                marks = set(range(start, end + 1))
            code = "\n".join(text for _, text in lines)
            blocks.append(Syntax(code, _lexer(span.get("file") or read.get("file")), line_numbers=True,
                                 start_line=first, highlight_lines=marks, word_wrap=False, theme="monokai"))
    if not blocks:
        return Text("(no source read yet — a read_source step's result shows here; press R to read a range)",
                    style="grey62")
    return Group(*blocks)


class SourceView(VerticalScroll):
    DEFAULT_CSS = """
    SourceView { height: 1fr; }
    SourceView > Static { width: auto; }
    """

    def compose(self) -> ComposeResult:
        yield Static(render_reads({}), id="source-body")

    def show_result(self, result: dict[str, Any]) -> None:
        self.query_one("#source-body", Static).update(render_reads(result))
        self.scroll_home(animate=False)
