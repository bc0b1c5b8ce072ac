"""Console sinks for headless runs: a Rich line per step (live output with -v), or raw JSON lines."""

from __future__ import annotations

import errno
import json
import os
import sys
from typing import IO

from rich.color import ColorSystem
from rich.console import COLOR_SYSTEMS, Console
from rich.control import strip_control_codes
from rich.markup import escape
from rich.style import Style

from orchestrator.events import (
    ArtifactSaved,
    Event,
    HypothesisState,
    HypothesisUpdated,
    NoteAdded,
    Output,
    ServerEvent,
    SessionFinished,
    SessionStarted,
    SessionStatus,
    StepFinished,
    StepStarted,
    StepStatus,
    all_handled,
)
from orchestrator.session.answer import account_of
from orchestrator.verdicts.flagship.account import AccountStatus

STATUS_STYLE: dict[StepStatus, tuple[str, str]] = {
    "ok": ("✓", "green"), "failed": ("✗", "red"), "skipped": ("–", "dim"), "timeout": ("⏱", "yellow"),
    "cancelled": ("■", "magenta"), "unreachable": ("⚠", "red"),
}
HYP_STYLE: dict[HypothesisState, str] = {"confirmed": "bold red", "supported": "yellow", "refuted": "green", "inconclusive": "cyan", "open": "dim"}
FINISHED_STYLE: dict[SessionStatus, str] = {"ok": "green", "failed": "red", "cancelled": "magenta", "error": "red"}
ANSWER_STYLE: dict[AccountStatus, str] = {"verified": "green", "nothing_wrong": "green", "partly_verified": "yellow",
                                          "found_not_servable": "yellow", "found_not_verified": "yellow",
                                          "not_explained": "red"}
# The lines a run prints per step and per output line, styled without Rich's markup parser and render pipeline
# (~0.3 ms a line, most of the console's per-step cost): the styles are built once here.
_STATUS_STYLES = {status: Style.parse(colour) for status, (_, colour) in STATUS_STYLE.items()}
_DIM, _CYAN = Style(dim=True), Style(color="cyan")
Segment = tuple[str, Style | None]


def _styled(text: str, own: Style | None, line: Style | None, system: ColorSystem) -> str:
    """A segment in the console's colours: its own style over the line's."""
    style = line + own if line is not None and own is not None else own or line
    return style.render(text, color_system=system) if style is not None else text


class _LineWriter:
    """Writes one line of styled segments straight to the console's file, as Rich would render it (the console's
    colour system, or plain text when it has none; control codes stripped as Rich's Text strips them), flushed at
    once. A console that records, or a Jupyter one, gets the line through Rich instead."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def line(self, segments: list[Segment], *, style: Style | None = None) -> None:
        console = self.console
        segments = [(strip_control_codes(t), st) for t, st in segments]
        if console.record or console.is_jupyter:
            from rich.text import Text

            console.print(Text.assemble(*((t, st) if st else t for t, st in segments), style=style or ""),
                          soft_wrap=True)
            return
        system = COLOR_SYSTEMS.get(console.color_system or "")
        if system is None or console.no_color:
            text = "".join(t for t, _ in segments)
        else:
            text = "".join(_styled(t, st, style, system) for t, st in segments)
        # One write of the whole line, as Console.print does; sinks are called from the runner's one thread.
        console.file.write(text + "\n")
        console.file.flush()


class ReaderAwareConsole(Console):
    """Rich's Console, except that a reader who stopped reading is the caller's to handle: Rich's own answer
    (``Console.on_broken_pipe``) points stdout at /dev/null and raises SystemExit(1), which would end the
    investigation from inside a sink; here the BrokenPipeError goes up to ConsoleSink.handle, which ends the showing
    only."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError(32, "the reader closed the pipe")


class ConsoleSink:
    def __init__(self, console: Console | None = None, *, verbose: bool = False) -> None:
        self.console = console or ReaderAwareConsole(highlight=False)
        self.verbose = verbose
        self.session_dir: str | None = None
        self._partial: dict[tuple[str, str], str] = {}
        # what the answer is computed from at the end (orchestrator/session/answer.py): the board and the results
        self._record: list[Event] = []
        self._lines = _LineWriter(self.console)
        self.closed = False  # the reader stopped reading: nothing more is shown

    def handle(self, event: Event) -> None:
        """Show one event. A reader that stopped reading (``orchestrator run ... | head``) ends the showing, never
        the investigation: the session log, the reports and the servers' stop go on (issue 41)."""
        if self.closed:
            return
        try:
            self._show(event)
        except BrokenPipeError:
            self._reader_gone()
        except OSError as exc:  # a terminal that hung up answers EIO until SIGHUP's handler points it elsewhere
            if exc.errno != errno.EIO:
                raise
            self._reader_gone()

    def _reader_gone(self) -> None:
        self.closed = True
        _to_devnull(self.console.file)

    def _show(self, event: Event) -> None:
        if isinstance(event, (SessionStarted, StepFinished, HypothesisUpdated)):
            self._record.append(event)
        match event:
            case SessionStarted():
                self._on_session_started(event)
            case StepStarted():
                self._on_step_started(event)
            case Output():
                self._on_output(event)
            case StepFinished():
                self._on_step_finished(event)
            case HypothesisUpdated():
                self._on_hypothesis_updated(event)
            case ServerEvent(type="server_ready"):
                self._on_server_ready(event)
            case NoteAdded():
                self._on_note_added(event)
            case SessionFinished():
                self._on_session_finished(event)
            case ServerEvent() | ArtifactSaved():  # the other server moments and saved files: not shown
                pass
            case _:
                all_handled(event)

    def close(self) -> None:
        pass

    def _on_session_started(self, e: SessionStarted) -> None:
        hosts = ", ".join(e.hosts) or "-"
        self.console.print(f"[bold]▶ {escape(e.playbook)}[/] on {escape(hosts)}  [dim]({e.session_id})[/]")

    def _on_step_started(self, e: StepStarted) -> None:
        if self.verbose:
            self._lines.line([(f"  … {e.step_id} {e.name}", _DIM)])

    def _on_output(self, e: Output) -> None:
        if not self.verbose:
            return
        key = (e.step_id, e.host)
        text = self._partial.pop(key, "") + e.text
        lines = text.split("\n")
        if not text.endswith("\n"):
            self._partial[key] = lines.pop()
        else:
            lines.pop()
        style = _DIM if e.stream in ("stderr", "progress", "info", "server_log") else None
        for line in lines:
            self._lines.line([("    ", None), (e.host, _CYAN), (f" │ {line}", None)], style=style)

    def _on_step_finished(self, e: StepFinished) -> None:
        for key in [k for k in self._partial if k[0] == e.step_id]:
            rest = self._partial.pop(key)
            if self.verbose and rest:
                self._lines.line([("    ", None), (key[1], _CYAN), (f" │ {rest}", None)])
        icon = STATUS_STYLE.get(e.status, ("?", ""))[0]
        style = _STATUS_STYLES.get(e.status)
        hosts = ",".join(r.host for r in e.results if r.status != "skipped") or "-"
        segments: list[Segment] = [(f"{icon} {e.status:<11}", style), (f" {e.name} ", None),
                                   (f"{hosts} {e.duration:.2f}s", _DIM)]
        if e.attempts > 1:
            segments += [(" ", None), (f"×{e.attempts}", _DIM)]
        if e.ignored:
            segments += [(" ", None), ("(ignored)", _DIM)]
        self._lines.line(segments)
        if e.error and e.status not in ("ok", "skipped"):
            for line in e.error.splitlines()[:12]:
                self._lines.line([(f"    {line}", style)])

    def _on_hypothesis_updated(self, e: HypothesisUpdated) -> None:
        style = HYP_STYLE.get(e.state, "")
        why = f" — {escape(e.evidence)}" if e.evidence else ""
        self.console.print(f"  [bold]⚑[/] hypothesis [bold]{escape(e.hypothesis_id)}[/] → [{style}]{e.state}[/]{why}")

    def _on_server_ready(self, e: ServerEvent) -> None:
        self.console.print(f"  [bold]⛁[/] server {escape(e.server_id)} ready on {escape(e.host)}:{e.port}")
        for o in e.overrides:
            self.console.print(
                f"    [yellow]override[/] {escape(str(o.get('flag')))}: requested {escape(str(o.get('requested')))}"
                f" → effective {escape(str(o.get('effective')))}"
            )

    def _on_note_added(self, e: NoteAdded) -> None:
        self.console.print(f"  [bold]✎[/] {escape(e.text)}")

    def _on_session_finished(self, e: SessionFinished) -> None:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(e.counts.items())) or "no steps"
        style = FINISHED_STYLE[e.status]
        self.console.print(f"[bold {style}]■ {e.status}[/] in {e.duration:.1f}s — {counts}")
        if e.error:
            self.console.print(f"  [red]{escape(e.error)}[/]")
        if self.session_dir:
            self.console.print(f"  session: {escape(self.session_dir)}")
        answer = account_of(self._record)
        if answer is not None:  # the answer is the last line: where a person looks
            style = ANSWER_STYLE[answer.status]
            # one line however wide: a terminal wraps it for the eye, a pipe or a log keeps it whole for grep
            self.console.print(f"[bold {style}]■ verdict[/] {escape(answer.headline)}", soft_wrap=True)


class JsonLinesSink:
    """``--json``: the event stream itself, one object per line, for other programs."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stdout
        self.closed = False

    def handle(self, event: Event) -> None:
        if self.closed:
            return
        try:
            self.stream.write(json.dumps(event.model_dump(mode="json"), separators=(",", ":")) + "\n")
            self.stream.flush()
        except BrokenPipeError:  # the reader stopped reading: the investigation goes on (ConsoleSink.handle)
            self.closed = True
            _to_devnull(self.stream)

    def close(self) -> None:
        if not self.closed:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self.closed = True
                _to_devnull(self.stream)


def _to_devnull(stream: IO[str]) -> None:
    """Point ``stream``'s file at /dev/null, so that the interpreter's own flush at exit cannot raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (a test's StringIO): skipping is enough
        pass
