"""Adding to a saved session after the fact (notes, manual verdicts): appended as ordinary events,
numbered after the last one, so replay and reports see them in order."""

from __future__ import annotations

import getpass
from pathlib import Path

from orchestrator.errors import SessionError
from orchestrator.events import Event, HypothesisUpdated, NoteAdded
from orchestrator.hypotheses.board import HypothesisBoard
from orchestrator.session.log import SessionLog
from orchestrator.session.reader import read_session


def _author() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


def append(directory: Path, events: list[Event]) -> None:
    loaded = read_session(directory)
    seq = max((e.seq for e in loaded.events), default=0)
    log = SessionLog(directory)
    try:
        for event in events:
            seq += 1
            event.seq = seq
            log.handle(event)
    finally:
        log.close()


def add_note(directory: Path, text: str, *, hypothesis_id: str | None = None, step_id: str | None = None) -> NoteAdded:
    if not text.strip():
        raise SessionError("a note needs some text")
    if hypothesis_id:
        board = HypothesisBoard.from_events(read_session(directory).events)
        if hypothesis_id not in board.entries:
            raise SessionError(f"unknown hypothesis {hypothesis_id!r} (known: {', '.join(board.entries) or 'none'})")
    event = NoteAdded(text=text, hypothesis_id=hypothesis_id, step_id=step_id, author=_author())
    append(directory, [event])
    return event


def add_verdict(directory: Path, hypothesis_id: str, state: str, because: str) -> HypothesisUpdated:
    if not because.strip():
        raise SessionError("a verdict needs --because: the observation that decides it")
    board = HypothesisBoard.from_events(read_session(directory).events)
    event = board.decide(hypothesis_id, state, source="manual", evidence=because, author=_author())
    append(directory, [event])
    return event
