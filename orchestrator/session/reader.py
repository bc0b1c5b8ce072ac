"""Reading sessions back: tolerant of a torn last line (kill -9 mid-write) and of unknown events (a newer
writer's), but never silent about what it skipped: torn lines and malformed known events are counted and
said by ``problems``, next to the failures the session itself recorded in ``session_finished``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from orchestrator.errors import SessionError
from orchestrator.events import (
    E,
    Event,
    EventBase,
    MalformedEvent,
    SessionFinished,
    SessionStarted,
    events_of,
    parse_event,
)
from orchestrator.session.log import EVENTS_FILE

DEFAULT_SESSIONS_DIR = "sessions"


def sessions_root(explicit: str | Path | None = None) -> Path:
    return Path(explicit or os.environ.get("ORCHESTRATOR_SESSIONS_DIR") or DEFAULT_SESSIONS_DIR)


@dataclass
class LoadedSession:
    directory: Path
    events: list[Event]
    raw: list[dict[str, Any]] = field(default_factory=list)
    torn_lines: int = 0  # lines that could not be parsed (at most the last one after a crash)
    malformed: list[str] = field(default_factory=list)  # "line N: kind: field: why", one per skipped known event

    @property
    def started(self) -> SessionStarted | None:
        return next((e for e in self.events if isinstance(e, SessionStarted)), None)

    @property
    def finished(self) -> SessionFinished | None:
        return next((e for e in reversed(self.events) if isinstance(e, SessionFinished)), None)

    @property
    def name(self) -> str:
        return self.directory.name

    @overload
    def of_type(self, kind: type[E]) -> list[E]: ...
    @overload
    def of_type(self, kind: str) -> list[Any]: ...
    def of_type(self, kind: type[EventBase] | str) -> list[Any]:
        """The events of one class (typed), or of one ``type`` name (tests, scripts)."""
        return events_of(self.events, kind)

    @property
    def problems(self) -> list[str]:
        """Everything that makes this record less than the whole session, in words (empty: nothing known)."""
        found = list(self.finished.problems) if self.finished is not None else []
        if self.torn_lines:
            found.append(f"{self.torn_lines} unreadable line(s) skipped (torn write)")
        found.extend(f"malformed event skipped: {m}" for m in self.malformed)
        return found

    @property
    def incomplete(self) -> bool:
        """Not finished, or events are missing from the log (a sink failed, a line is torn or malformed)."""
        fin = self.finished
        return fin is None or fin.incomplete or bool(self.torn_lines or self.malformed)


def iter_raw(path: Path) -> Iterator[dict[str, Any] | None]:
    """Yield each line's JSON object, or None for a line that does not parse (torn write)."""
    for _number, data in iter_numbered(path):
        yield data


def iter_numbered(path: Path) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """``iter_raw`` with each line's number in the file (1-based), so a skipped line can be named."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.strip()
            if not line:
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                yield number, None
                continue
            yield number, data if isinstance(data, dict) else None


def _whole_results(directory: Path, data: dict[str, Any]) -> dict[str, Any]:
    """A step_finished line whose result the log cut to its head (session/log.py ``_capped_result``) with the whole
    result read back from the file the line names (a name under outputs/ only); the line as it is when that file is
    gone (the head, with its markers)."""
    if data.get("type") != "step_finished":
        return data
    results = []
    for outcome in data.get("results") or []:
        result = outcome.get("result") if isinstance(outcome, dict) else None
        name = result.get("full_result") if isinstance(result, dict) else None
        if isinstance(name, str) and name.startswith("outputs/") and "/" not in name[len("outputs/"):]:
            path = directory / name
            try:
                whole = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                whole = None
            if isinstance(whole, dict):
                outcome = {**outcome, "result": whole}
        results.append(outcome)
    return {**data, "results": results}


def read_session(directory: str | Path) -> LoadedSession:
    directory = Path(directory)
    path = directory / EVENTS_FILE
    if not path.exists():
        raise SessionError(f"no session at {directory} (missing {EVENTS_FILE})")
    events: list[Event] = []
    raw: list[dict[str, Any]] = []
    torn = 0
    malformed: list[str] = []
    for number, data in iter_numbered(path):
        if data is None:
            torn += 1
            continue
        raw.append(data)
        try:
            event = parse_event(_whole_results(directory, data))
        except MalformedEvent as exc:
            malformed.append(f"line {number}: {exc}")
            continue
        if event is not None:
            events.append(event)
    return LoadedSession(directory=directory, events=events, raw=raw, torn_lines=torn, malformed=malformed)


def list_sessions(root: str | Path | None = None) -> list[Path]:
    base = sessions_root(root)
    if not base.is_dir():
        return []
    return sorted((p for p in base.iterdir() if (p / EVENTS_FILE).exists()), key=lambda p: p.name)


def find_session(ref: str, root: str | Path | None = None) -> Path:
    """A session by path, by directory name, by unique prefix/substring, or ``last``."""
    candidate = Path(ref)
    if (candidate / EVENTS_FILE).exists():
        return candidate
    sessions = list_sessions(root)
    if ref in ("last", "latest"):
        if not sessions:
            raise SessionError(f"no sessions under {sessions_root(root)}")
        return sessions[-1]
    exact = [p for p in sessions if p.name == ref]
    if exact:
        return exact[0]
    matches = [p for p in sessions if p.name.startswith(ref)] or [p for p in sessions if ref in p.name]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise SessionError(f"no session matches {ref!r} under {sessions_root(root)}")
    names = ", ".join(p.name for p in matches[:5])
    raise SessionError(f"{ref!r} matches several sessions: {names}")
