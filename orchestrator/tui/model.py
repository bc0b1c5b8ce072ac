"""What the TUI shows, built only from events: the same code serves a live session and a replay.
No Textual here (unit-testable); widgets read this model and never the runner."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.events import (
    ArtifactSaved,
    Event,
    HypothesisUpdated,
    NoteAdded,
    Output,
    OutputStream,
    ServerEvent,
    ServerEventType,
    SessionFinished,
    SessionStarted,
    SessionStatus,
    StepFinished,
    StepSection,
    StepStarted,
    StepStatus,
    all_handled,
)
from orchestrator.hypotheses.board import HypothesisBoard
from orchestrator.session.answer import account_of
from orchestrator.verdicts.flagship.account import SymptomAccount

DEFAULT_LINE_CAP = 5000  # lines kept per step; the full output is in the session's outputs/

RowStatus = Literal["pending", "running", StepStatus]  # a step's row: not started, running, or how it finished
ServerState = Literal["starting", "ready", "stopped", "failed"]
ModelStatus = Literal["starting", "running", SessionStatus]  # the session as the TUI shows it


def server_state(kind: ServerEventType) -> ServerState:
    """The state a server's row takes on each lifecycle event."""
    match kind:
        case "server_started":
            return "starting"
        case "server_ready":
            return "ready"
        case "server_stopped":
            return "stopped"
        case "server_failed":
            return "failed"


@dataclass
class StepRow:
    step_id: str
    name: str
    action: str
    section: StepSection = "steps"
    status: RowStatus = "pending"
    hosts: list[str] = field(default_factory=list)
    args: dict[str, Any] = field(default_factory=dict)
    duration: float | None = None
    error: str | None = None
    results: list[dict[str, Any]] = field(default_factory=list)
    lines: deque[str] = field(default_factory=deque)
    partial: dict[str, str] = field(default_factory=dict)  # host/stream -> text after the last newline
    total_lines: int = 0

    @property
    def result(self) -> dict[str, Any]:
        """The first host's result (what the panes show)."""
        return self.results[0].get("result", {}) if self.results else {}

    @property
    def host_label(self) -> str:
        if not self.hosts:
            return ""
        return self.hosts[0] if len(self.hosts) == 1 else f"{self.hosts[0]}+{len(self.hosts) - 1}"


@dataclass
class ServerRow:
    server_id: str
    host: str
    engine: str
    port: int | None = None
    state: ServerState = "starting"
    flags: dict[str, Any] = field(default_factory=dict)
    overrides: list[dict[str, Any]] = field(default_factory=list)
    step_id: str | None = None
    accept_length: float | None = None
    tok_s: float | None = None
    detail: str | None = None
    per_position: list[float] | None = None  # vLLM: acceptance rate by draft position (bench spec_decode)
    #: a replayed traffic file's acceptance per category (category, accept length or None, too few to tell, its
    #: prompts' mean length in tokens or None)
    by_category: list[tuple[str, float | None, bool, float | None]] | None = None
    #: a tune step's server start: its tok/s per request at each concurrency of the profile, and the
    #: concurrencies at which it is the recommended configuration
    by_concurrency: list[tuple[int, float]] | None = None
    recommended_at: list[int] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return self.state in ("starting", "ready")


class SessionModel:
    def __init__(self, *, line_cap: int = DEFAULT_LINE_CAP) -> None:
        self.line_cap = line_cap
        self.session_id = ""
        self.playbook = ""
        self.hosts: list[str] = []
        self.status: ModelStatus = "starting"
        self.steps: dict[str, StepRow] = {}
        self.servers: dict[str, ServerRow] = {}
        self.board = HypothesisBoard([])
        self.notes: list[NoteAdded] = []
        self.events = 0
        # what the answer is computed from (orchestrator/session/answer.py), and the answer once asked for
        self._record: list[Event] = []
        self._answer: tuple[int, SymptomAccount | None] = (-1, None)

    # -- queries ----------------------------------------------------------------------------------
    def running_servers(self) -> list[ServerRow]:
        return [s for s in self.servers.values() if s.running]

    def current_step(self) -> StepRow | None:
        return next((s for s in reversed(self.steps.values()) if s.status == "running"), None)

    @property
    def answer(self) -> SymptomAccount | None:
        """The investigation's answer in one line (the console's last line, the report's first), for the events so
        far; computed again only when new results or verdicts arrived."""
        if self._answer[0] != len(self._record):
            self._answer = (len(self._record), account_of(self._record))
        return self._answer[1]

    # -- applying events ----------------------------------------------------------------------------
    def apply(self, event: Event) -> set[str]:
        """Update from one event; return what changed: steps, board, servers, notes, status, output."""
        self.events += 1
        if isinstance(event, (SessionStarted, StepFinished, HypothesisUpdated)):
            self._record.append(event)
        match event:
            case Output():
                self.add_output(event.step_id, event.host, event.stream, event.text)
                return {"output"}
            case SessionStarted():
                return self._on_session_started(event)
            case StepStarted():
                return self._on_step_started(event)
            case StepFinished():
                return self._on_step_finished(event)
            case ServerEvent():
                return self._on_server_event(event)
            case HypothesisUpdated():
                return self._on_hypothesis_updated(event)
            case NoteAdded():
                return self._on_note_added(event)
            case SessionFinished():
                return self._on_session_finished(event)
            case ArtifactSaved():
                return set()
            case _:
                all_handled(event)
                return set()

    def _row(self, step_id: str, **defaults: Any) -> StepRow:
        row = self.steps.get(step_id)
        if row is None:
            row = self.steps[step_id] = StepRow(step_id=step_id, lines=deque(maxlen=self.line_cap), **defaults)
        return row

    def _on_session_started(self, e: SessionStarted) -> set[str]:
        self.session_id, self.playbook, self.hosts = e.session_id, e.playbook, list(e.hosts)
        self.status = "running"
        self.board = HypothesisBoard(e.hypotheses)
        for outline in e.steps:
            self._row(outline["step_id"], name=outline.get("name", ""), action=outline.get("action", ""),
                      section=outline.get("section", "steps"))
        return {"steps", "board", "status"}

    def _on_step_started(self, e: StepStarted) -> set[str]:
        row = self._row(e.step_id, name=e.name, action=e.action, section=e.section)
        row.name, row.action, row.section = e.name, e.action, e.section
        row.status, row.hosts, row.args = "running", list(e.hosts), dict(e.args)
        row.duration, row.error = None, None
        if e.attempt == 1:
            row.lines.clear()
            row.partial.clear()
            row.total_lines = 0
        return {"steps", "status"}

    def _on_step_finished(self, e: StepFinished) -> set[str]:
        row = self._row(e.step_id, name=e.name, action=e.action)
        row.status, row.duration, row.error = e.status, e.duration, e.error
        row.results = [r.model_dump() for r in e.results]
        if not row.hosts:
            row.hosts = [r.host for r in e.results]
        for key in list(row.partial):  # an unterminated last line is still a line
            text = row.partial.pop(key)
            if text:
                row.lines.append(text)
                row.total_lines += 1
        changed = {"steps", "status", "output"}
        if self._bench_figures(row):
            changed.add("servers")
        return changed

    def _bench_figures(self, row: StepRow) -> bool:
        """Attach accept length / tok/s from a server or bench result to the server it measured."""
        if row.action == "tune":
            return self._tune_figures(row)
        if row.action not in ("server", "bench", "sweep"):
            return False
        changed = False
        for outcome in row.results:
            res = outcome.get("result") or {}
            if res.get("accept_length") is None and res.get("tok_s") is None:
                continue
            target = self._server_for(outcome.get("host", ""), res, row.step_id)
            if target is None:
                continue
            traffic = res.get("traffic")
            if isinstance(traffic, dict):  # the user's requests: per category, not over the bundled prompts' figures
                target.by_category = [(str(e.get("category")), _number(e.get("accept_length")), bool(e.get("too_few")),
                                       _number(e.get("prompt_tokens")))
                                      for e in traffic.get("by_category") or [] if isinstance(e, dict)]
                changed = True
                continue
            if res.get("accept_length") is not None:
                target.accept_length = _number(res["accept_length"])
            if res.get("tok_s") is not None:
                target.tok_s = _number(res["tok_s"])
            stats: dict[str, Any] = res["spec_decode"] if isinstance(res.get("spec_decode"), dict) else {}
            rates = stats.get("per_position_request") or stats.get("per_position")
            if isinstance(rates, list) and rates:
                target.per_position = [float(r) for r in rates if isinstance(r, (int, float))]
            changed = True
        return changed

    def _tune_figures(self, row: StepRow) -> bool:
        """Each of a tune step's server starts (tune.py names them tune-STEP-LABEL) gets its measured tok/s per
        request at every concurrency of the profile, and where it is the recommendation: the servers pane is then
        the tuner's table, one row per configuration measured."""
        from orchestrator.tuning import server_name

        changed = False
        for outcome in row.results:
            res = outcome.get("result") or {}
            for entry in res.get("by_concurrency") or []:
                if not isinstance(entry, dict):
                    continue
                c = int(entry.get("concurrency") or 1)
                base = entry.get("baseline") or {}
                measured = [("baseline", base.get("tok_s"), None, False)] + [
                    (str(r.get("label") or f"k={r.get('k')}"), r.get("measured_tok_s"), r.get("measured_accept_length"),
                     bool(r.get("recommended"))) for r in entry.get("rows") or [] if isinstance(r, dict)]
                for label, rate, accept, recommended in measured:
                    server = self.servers.get(server_name(row.step_id, label))
                    if server is None or rate is None:
                        continue
                    server.by_concurrency = [*(server.by_concurrency or []), (c, float(rate))]
                    if recommended:
                        server.recommended_at.append(c)
                    if server.tok_s is None:
                        server.tok_s = _number(rate)
                    if server.accept_length is None and accept is not None:
                        server.accept_length = _number(accept)
                    changed = True
        return changed

    def _server_for(self, host: str, res: dict[str, Any], step_id: str) -> ServerRow | None:
        candidates = [s for s in self.servers.values() if s.step_id == step_id]
        if not candidates and res.get("port") is not None:
            candidates = [s for s in self.servers.values() if s.port == res.get("port")]
        if not candidates:
            candidates = [s for s in self.servers.values() if s.host == host and s.running]
        return candidates[-1] if candidates else None

    def _on_server_event(self, e: ServerEvent) -> set[str]:
        row = self.servers.get(e.server_id)
        if row is None:
            row = self.servers[e.server_id] = ServerRow(server_id=e.server_id, host=e.host, engine=e.engine)
        row.state = server_state(e.type)
        row.port = e.port if e.port is not None else row.port
        row.step_id = e.step_id or row.step_id
        row.flags = dict(e.flags) or row.flags
        row.overrides = list(e.overrides) or row.overrides
        row.detail = e.detail or row.detail
        if e.effective:
            for key in ("accept_length", "avg_spec_accept_length"):
                if e.effective.get(key) is not None:
                    row.accept_length = _number(e.effective[key])
        return {"servers"}

    def _on_hypothesis_updated(self, e: HypothesisUpdated) -> set[str]:
        self.board.apply(e)
        return {"board"}

    def _on_note_added(self, e: NoteAdded) -> set[str]:
        self.notes.append(e)
        return {"notes"}

    def _on_session_finished(self, e: SessionFinished) -> set[str]:
        self.status = e.status
        for row in self.steps.values():
            if row.status == "running":
                row.status = "cancelled"
        return {"status", "steps"}

    # -- output -----------------------------------------------------------------------------------
    def add_output(self, step_id: str, host: str, stream: OutputStream, text: str) -> list[str]:
        """Append output; return the complete new lines (what a live pane appends)."""
        row = self.steps.get(step_id)
        if row is None:
            row = self._row(step_id, name=step_id, action="?")
        key = f"{host}/{stream}"
        pieces = (row.partial.get(key, "") + text).split("\n")
        row.partial[key] = pieces.pop()
        if stream == "info" and pieces:  # the runner's own remarks (retries, evidence notes)
            pieces = [f"» {p}" for p in pieces]
        row.lines.extend(pieces)
        row.total_lines += len(pieces)
        return pieces


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def build_model(events: list[Event], *, line_cap: int = DEFAULT_LINE_CAP) -> SessionModel:
    """A model of the first events of a session (replay: rebuild at the timeline cursor)."""
    model = SessionModel(line_cap=line_cap)
    for event in events:
        model.apply(event)
    return model


def describe_event(event: Event) -> str:
    """One line per event for the replay timeline."""
    match event:
        case SessionStarted():
            return f"session {event.session_id} started ({event.playbook})"
        case StepStarted():
            return f"{event.step_id} ▶ {event.name}"
        case StepFinished():
            return f"{event.step_id} {event.status} {event.name} ({event.duration:.2f}s)"
        case Output():
            first = event.text.strip().splitlines()[:1]
            return f"{event.step_id} output: {first[0][:60] if first else ''}"
        case ServerEvent():
            return f"{event.type.replace('_', ' ')} {event.engine} {event.host}:{event.port or '?'}"
        case HypothesisUpdated():
            return f"{event.hypothesis_id} → {event.state} ({event.source})"
        case NoteAdded():
            return f"note: {event.text[:60]}"
        case SessionFinished():
            return f"session finished: {event.status}"
        case ArtifactSaved():
            return event.type
        case _:
            all_handled(event)
            return ""
