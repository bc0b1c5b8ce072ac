"""Console sinks for headless runs: a Rich line per step (live output with -v), or raw JSON lines."""

from __future__ import annotations

import json
import sys
from typing import IO, Any

from rich.console import Console
from rich.markup import escape

from orchestrator.events import Event

STATUS_STYLE = {
    "ok": ("✓", "green"), "failed": ("✗", "red"), "skipped": ("–", "dim"), "timeout": ("⏱", "yellow"),
    "cancelled": ("■", "magenta"), "unreachable": ("⚠", "red"),
}
HYP_STYLE = {"confirmed": "bold red", "supported": "yellow", "refuted": "green", "inconclusive": "cyan", "open": "dim"}


class ConsoleSink:
    def __init__(self, console: Console | None = None, *, verbose: bool = False) -> None:
        self.console = console or Console(highlight=False)
        self.verbose = verbose
        self.session_dir: str | None = None
        self._partial: dict[tuple[str, str], str] = {}

    def handle(self, event: Event) -> None:
        handler = getattr(self, f"_on_{event.type}", None)
        if handler is not None:
            handler(event)

    def close(self) -> None:
        pass

    def _on_session_started(self, e: Any) -> None:
        hosts = ", ".join(e.hosts) or "-"
        self.console.print(f"[bold]▶ {escape(e.playbook)}[/] on {escape(hosts)}  [dim]({e.session_id})[/]")

    def _on_step_started(self, e: Any) -> None:
        if self.verbose:
            self.console.print(f"[dim]  … {e.step_id} {escape(e.name)}[/]")

    def _on_output(self, e: Any) -> None:
        if not self.verbose:
            return
        key = (e.step_id, e.host)
        text = self._partial.pop(key, "") + e.text
        lines = text.split("\n")
        if not text.endswith("\n"):
            self._partial[key] = lines.pop()
        else:
            lines.pop()
        style = "dim" if e.stream in ("stderr", "progress", "info", "server_log") else ""
        for line in lines:
            self.console.print(f"    [cyan]{escape(e.host)}[/] │ {escape(line)}", style=style, soft_wrap=True)

    def _on_step_finished(self, e: Any) -> None:
        for key in [k for k in self._partial if k[0] == e.step_id]:
            rest = self._partial.pop(key)
            if self.verbose and rest:
                self.console.print(f"    [cyan]{escape(key[1])}[/] │ {escape(rest)}", soft_wrap=True)
        icon, style = STATUS_STYLE.get(e.status, ("?", ""))
        hosts = ",".join(r.host for r in e.results if r.status != "skipped") or "-"
        note = " [dim](ignored)[/]" if e.ignored else ""
        retry = f" [dim]×{e.attempts}[/]" if e.attempts > 1 else ""
        self.console.print(
            f"[{style}]{icon} {e.status:<11}[/] {escape(e.name)} [dim]{escape(hosts)} {e.duration:.2f}s[/]{retry}{note}"
        )
        if e.error and e.status not in ("ok", "skipped"):
            for line in e.error.splitlines()[:12]:
                self.console.print(f"    [{style}]{escape(line)}[/]", soft_wrap=True)

    def _on_hypothesis_updated(self, e: Any) -> None:
        style = HYP_STYLE.get(e.state, "")
        why = f" — {escape(e.evidence)}" if e.evidence else ""
        self.console.print(f"  [bold]⚑[/] hypothesis [bold]{escape(e.hypothesis_id)}[/] → [{style}]{e.state}[/]{why}")

    def _on_server_ready(self, e: Any) -> None:
        self.console.print(f"  [bold]⛁[/] server {escape(e.server_id)} ready on {escape(e.host)}:{e.port}")
        for o in e.overrides:
            self.console.print(
                f"    [yellow]override[/] {escape(str(o.get('flag')))}: requested {escape(str(o.get('requested')))}"
                f" → effective {escape(str(o.get('effective')))}"
            )

    def _on_note_added(self, e: Any) -> None:
        self.console.print(f"  [bold]✎[/] {escape(e.text)}")

    def _on_session_finished(self, e: Any) -> None:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(e.counts.items())) or "no steps"
        style = {"ok": "green", "failed": "red", "cancelled": "magenta"}.get(e.status, "red")
        self.console.print(f"[bold {style}]■ {e.status}[/] in {e.duration:.1f}s — {counts}")
        if e.error:
            self.console.print(f"  [red]{escape(e.error)}[/]")
        if self.session_dir:
            self.console.print(f"  session: {escape(self.session_dir)}")


class JsonLinesSink:
    """``--json``: the event stream itself, one object per line, for other programs."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stdout

    def handle(self, event: Event) -> None:
        self.stream.write(json.dumps(event.model_dump(mode="json"), separators=(",", ":")) + "\n")
        self.stream.flush()

    def close(self) -> None:
        self.stream.flush()
