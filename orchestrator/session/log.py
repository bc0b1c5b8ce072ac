"""SessionLog: the sink that writes ``events.jsonl`` (+ ``outputs/``) for one session.

One JSON object per line. Large outputs go to ``outputs/<step>.<host>.log`` in full; the log keeps the first
``INLINE_OUTPUT`` characters of each step's output inline.

Durability, and what it costs (docs/benchmarks-history.md states the same guarantee):

* **The orchestrator killed (``kill -9``, OOM, a crash):** nothing that was handed to the sink is lost. Every event is
  written to the file with one ``write(2)`` before ``handle`` returns, so it sits in the kernel's page cache and
  outlives our process. At most the line being written when the signal landed is torn, and the reader drops a torn
  last line. So a kill loses at most the step in flight (its result was not emitted yet), never a finished step.
* **The machine dies (power, kernel panic):** the page cache is lost, so step and session boundaries (the events in
  ``SYNC_EVENTS``) are ``fsync``'d, but by a background thread (group commit): the runner does not wait for the disk,
  which costs ms per step on a busy disk. Each boundary is on disk within ``COMMIT_WINDOW`` (20 ms) plus one fsync's
  time of being written; a machine that dies in that window loses the events since the previous completed fsync
  (the steps that ended in those milliseconds).
  ``close`` waits for the last fsync, so a finished session is on disk when ``orchestrator run`` returns.
* An fsync that fails is not swallowed: the next ``handle`` or ``close`` raises it (the runner records a sink failure
  as a session problem).
"""

from __future__ import annotations

import json
import os
import re
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from orchestrator.events import (
    Event,
    HypothesisUpdated,
    NoteAdded,
    Output,
    SessionFinished,
    SessionStarted,
    StepFinished,
)

EVENTS_FILE = "events.jsonl"
INLINE_OUTPUT = 64 * 1024  # per step and host; the rest is only in outputs/
SYNC_EVENTS = (StepFinished, SessionFinished, SessionStarted, HypothesisUpdated, NoteAdded)  # fsync'd when written
COMMIT_WINDOW = 0.02  # s: boundaries this close together share one fsync (see _BackgroundSync)


class SessionLogLost(OSError):
    """The session log can no longer be written (disk full, quota, I/O error). The log was cut back to its
    last whole event, so it reads cleanly as an unfinished session; the runner stops the run on this error:
    an investigation nobody can read afterwards is not worth continuing."""

    stops_session = True


def session_stamp(now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ")


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()[:48] or "session"


def new_session_dir(root: Path, playbook_name: str) -> Path:
    """``<root>/<UTC stamp>-<playbook>``, made unique if two sessions start in the same second."""
    base = f"{session_stamp()}-{slug(playbook_name)}"
    path = Path(root) / base
    n = 1
    while path.exists():
        n += 1
        path = Path(root) / f"{base}-{n}"
    (path / "outputs").mkdir(parents=True)
    return path


def _cap(value: object) -> object:
    """A registered result keeps its whole output in memory; the log keeps its head (all of it is in
    outputs/), else one chatty step would write its output twice more (stdout and stdout_lines)."""
    if isinstance(value, str) and len(value) > INLINE_OUTPUT:
        return value[:INLINE_OUTPUT] + f"\n[{len(value) - INLINE_OUTPUT} more characters in outputs/]\n"
    if isinstance(value, list):
        kept: list[object] = []
        size = 0
        for item in value:
            item = _cap(item)
            size += len(str(item))
            if size > INLINE_OUTPUT and kept:
                return [*kept, f"[{len(value) - len(kept)} more items in outputs/]"]
            kept.append(item)
        return kept
    return value


class _BackgroundSync:
    """fsync off the critical path (group commit): ``request`` marks the file dirty and returns at once; one thread
    fsyncs whatever was written by then, so ten boundaries in a row cost one or two fsyncs, not ten.

    The thread waits ``COMMIT_WINDOW`` after the first request before it fsyncs, gathering the boundaries of a run
    of short steps into one fsync; and a request made while a sync is pending wakes nobody. Both matter on the
    runner's path more than they seem: a write(2) to a page under writeback waits for it, and each wake-up of the
    thread is a GIL hand-over the runner pays for."""

    def __init__(self, fileno: int) -> None:
        self.fileno = fileno
        self.wanted = 0  # requests made
        self.done = 0  # requests covered by a completed fsync
        self.error: OSError | None = None
        self.closing = False
        self.idle = False  # the thread waits for a request (only then does a request notify it)
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._loop, name="session-log-fsync", daemon=True)
        self.thread.start()

    def request(self) -> None:
        with self.cond:
            self.wanted += 1
            if self.idle:
                self.cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self.cond:
                while self.wanted == self.done and not self.closing:
                    self.idle = True
                    self.cond.wait()
                self.idle = False
                if self.wanted == self.done and self.closing:
                    return
                if not self.closing:  # gather what the next few ms write into this fsync (close cuts it short)
                    self.cond.wait_for(lambda: self.closing, COMMIT_WINDOW)
                target = self.wanted
            try:
                os.fsync(self.fileno)
            except OSError as exc:
                with self.cond:
                    self.error = self.error or exc
            with self.cond:
                self.done = target
                self.cond.notify_all()

    def raise_error(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise OSError(error.errno, f"fsync of the session log failed: {error.strerror}")

    def close(self) -> None:
        """Wait for every requested fsync, stop the thread, and raise a failure it met."""
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        self.thread.join()
        self.raise_error()


class SessionLog:
    """Writes events to ``<dir>/events.jsonl``. Use as a sink; can also reopen a finished session to append
    (manual notes and verdicts after the fact)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        (self.directory / "outputs").mkdir(parents=True, exist_ok=True)
        self.path = self.directory / EVENTS_FILE
        # Unbuffered bytes: a write the disk refused is never retried from a buffer on close (which would
        # append a torn line after the cut-back in ``_lost``).
        self._file: IO[bytes] | None = open(self.path, "ab", buffering=0)  # noqa: SIM115 - lives as long as the sink
        self._outputs: dict[tuple[str, str], IO[str]] = {}
        self._inline: dict[tuple[str, str], int] = {}
        self.count = 0
        self._whole = self._file.tell()  # bytes of the log that end with a whole event
        self._sync = _BackgroundSync(self._file.fileno())

    def handle(self, event: Event) -> None:
        if self._file is None:
            return
        try:
            self._sync.raise_error()  # an fsync that failed since the last event: the disk is gone
        except OSError as exc:
            self._lost(exc)
        data = event.model_dump(mode="json")
        if isinstance(event, Output):
            routed = self._route_output(data)
            if routed is None:
                return
            data = routed
        elif isinstance(event, StepFinished):
            for outcome in data.get("results", []):
                if isinstance(outcome.get("result"), dict):
                    outcome["result"] = self._capped_result(event.step_id, str(outcome.get("host", "")),
                                                            outcome["result"])
        encoded = (json.dumps(data, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8")
        line = memoryview(encoded)
        try:
            while line:  # a raw write may take part of the line
                line = line[self._file.write(line) or 0:]
        except OSError as exc:
            self._lost(exc)
        self._whole += len(encoded)  # (the file is only appended to, by us: no tell() per event)
        self.count += 1
        if isinstance(event, SYNC_EVENTS):
            self._sync.request()  # on disk shortly, without the runner waiting for it (see the module's doc)
        if isinstance(event, StepFinished):
            self._close_outputs(event.step_id)

    def _lost(self, exc: OSError) -> None:
        """Cut the log back to its last whole event (truncating needs no free space), stop writing, and say why."""
        handle, self._file = self._file, None
        try:
            self._sync.close()
        except OSError:
            pass  # a later fsync failure of the same lost disk: the SessionLogLost raised below reports it
        for out in self._outputs.values():
            try:
                out.close()
            except OSError:
                pass  # its buffered tail is lost with the disk; the log says the session did not finish
        self._outputs.clear()
        try:
            if handle is not None:
                os.ftruncate(handle.fileno(), self._whole)
                handle.close()
        except OSError:
            pass  # the file buffer may fail to flush again on close: the truncation is what matters
        reason = exc.strerror or str(exc)
        raise SessionLogLost(exc.errno or 0, f"cannot write {self.path}: {reason}; the log is kept up to its "
                             f"last whole event ({self.count} events)") from exc

    def _route_output(self, data: dict[str, Any]) -> dict[str, Any] | None:
        key = (data["step_id"], data["host"])
        out = self._outputs.get(key)
        if out is None:
            name = f"{slug(data['step_id'])}.{slug(data['host'])}.log"
            out = self._outputs[key] = open(self.directory / "outputs" / name, "a", encoding="utf-8")  # noqa: SIM115
        try:
            out.write(data["text"])
        except OSError as exc:
            self._lost(exc)
        used = self._inline.get(key, 0)
        if used > INLINE_OUTPUT:  # the "continues" note is written already
            return None
        room = INLINE_OUTPUT - used
        if room == 0:  # an earlier chunk filled the budget exactly: the note goes alone
            data = {**data, "text": ""}
        if len(data["text"]) > room or room == 0:
            data = {**data, "text": data["text"][:room] + f"\n[output continues in outputs/{Path(out.name).name}]\n"}
        self._inline[key] = used + len(data["text"])
        return data

    def _capped_result(self, step_id: str, host: str, result: dict[str, Any]) -> dict[str, Any]:
        """The result as the log line keeps it (each long value's head, ``_cap``); when anything was cut, the whole
        result goes to ``outputs/<step>.<host>.result.json`` and the line names it (``full_result``), where
        read_session takes it back: a big structured result (a tuner's rows at every concurrency) is kept whole."""
        capped = {k: _cap(v) for k, v in result.items()}
        cut = [k for k in result if capped[k] != result[k]]
        # an output's text and lines are in outputs/<step>.<host>.log already; rows of data are nowhere else
        if not any(isinstance(result[k], list) and any(not isinstance(i, str) for i in result[k]) for k in cut):
            return capped
        name = f"{slug(step_id)}.{slug(host)}.result.json"
        try:
            (self.directory / "outputs" / name).write_text(json.dumps(result, separators=(",", ":"),
                                                                      ensure_ascii=False), encoding="utf-8")
        except OSError as exc:
            self._lost(exc)
        return {**capped, "full_result": f"outputs/{name}"}

    def _close_outputs(self, step_id: str) -> None:
        for key in [k for k in self._outputs if k[0] == step_id]:
            self._outputs.pop(key).close()
            self._inline.pop(key, None)

    def close(self) -> None:
        for out in self._outputs.values():
            out.close()
        self._outputs.clear()
        if self._file is not None:
            try:
                self._sync.request()
                self._sync.close()  # the last fsync done (or its failure raised) before the file is closed
            finally:
                self._file.close()
                self._file = None
