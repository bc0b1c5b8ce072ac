"""The event model: every fact of a session is one of these, and every sink speaks only this.

Events are appended to ``events.jsonl`` one per line. Readers must accept unknown fields and unknown
event types from newer writers (``schema_version`` tells them what to expect).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Annotated, Any, Literal, NoReturn, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

SCHEMA_VERSION = 1

# The states and kinds every part speaks, defined once here. Where a part needs the values themselves
# (a menu, a check), it derives them from the type with ``get_args``, never from a second list.
# The values are what the session log holds on disk: renaming one breaks reading older sessions.
StepStatus = Literal["ok", "failed", "skipped", "timeout", "cancelled", "unreachable"]
SessionStatus = Literal["ok", "failed", "cancelled", "error"]
HypothesisState = Literal["open", "supported", "refuted", "confirmed", "inconclusive"]
ServerEventType = Literal["server_started", "server_ready", "server_stopped", "server_failed"]
OutputStream = Literal["stdout", "stderr", "progress", "server_log", "info"]
StepSection = Literal["steps", "always", "adhoc"]  # where a step sits in the playbook (adhoc: run from the TUI)
VerdictSource = Literal["rule", "manual"]

STEP_STATUSES: tuple[StepStatus, ...] = get_args(StepStatus)
SESSION_STATUSES: tuple[SessionStatus, ...] = get_args(SessionStatus)
HYPOTHESIS_STATES: tuple[HypothesisState, ...] = get_args(HypothesisState)
SERVER_EVENT_TYPES: tuple[ServerEventType, ...] = get_args(ServerEventType)
OUTPUT_STREAMS: tuple[OutputStream, ...] = get_args(OutputStream)
STEP_SECTIONS: tuple[StepSection, ...] = get_args(StepSection)


class EventBase(BaseModel):
    model_config = ConfigDict(extra="allow")

    schema_version: int = SCHEMA_VERSION
    seq: int = 0  # assigned by the emitter, strictly increasing within a session
    ts: float = Field(default_factory=time.time)


class SessionStarted(EventBase):
    type: Literal["session_started"] = "session_started"
    session_id: str
    playbook: str  # playbook name
    playbook_path: str | None = None
    description: str | None = None
    hosts: list[str] = []
    vars: dict[str, Any] = {}
    hypotheses: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []  # outline: step_id, name, action, section
    orchestrator_version: str = ""
    argv: list[str] = []


class StepStarted(EventBase):
    type: Literal["step_started"] = "step_started"
    step_id: str
    name: str
    action: str
    section: StepSection = "steps"
    hosts: list[str] = []
    args: dict[str, Any] = {}
    attempt: int = 1
    location: str | None = None  # file:line:col of the step in the playbook
    author: str | None = None  # who asked for an ad-hoc step (a user name, "mcp"); None for playbook steps


class Output(EventBase):
    type: Literal["output"] = "output"
    step_id: str
    host: str
    stream: OutputStream = "stdout"
    text: str


class HostOutcome(BaseModel):
    model_config = ConfigDict(extra="allow")

    host: str
    status: StepStatus
    result: dict[str, Any] = {}
    error: str | None = None
    duration: float = 0.0


class StepFinished(EventBase):
    type: Literal["step_finished"] = "step_finished"
    step_id: str
    name: str
    action: str
    status: StepStatus
    duration: float
    attempts: int = 1
    ignored: bool = False  # failed, but ignore_errors let the play go on
    error: str | None = None
    results: list[HostOutcome] = []
    registered_as: str | None = None


class ServerEvent(EventBase):
    """A server's lifecycle: ``type`` says which moment."""

    type: ServerEventType
    server_id: str
    step_id: str | None = None
    host: str
    engine: str
    port: int | None = None
    pgid: int | None = None
    flags: dict[str, Any] = {}
    effective: dict[str, Any] = {}
    overrides: list[dict[str, Any]] = []
    detail: str | None = None
    ranks: list[str] = []  # a multi-node server: the host of each rank, rank 0 (``host``) first; empty for one node


class HypothesisUpdated(EventBase):
    type: Literal["hypothesis_updated"] = "hypothesis_updated"
    hypothesis_id: str
    state: HypothesisState
    previous: str | None = None
    source: VerdictSource = "rule"
    step_id: str | None = None
    rule: str | None = None  # the expression that decided it
    evidence: str | None = None  # one sentence: what was observed
    author: str | None = None
    conflicts_with: str | None = None  # the earlier state this evidence contradicts (shown, never hidden)


class NoteAdded(EventBase):
    type: Literal["note_added"] = "note_added"
    text: str
    step_id: str | None = None
    hypothesis_id: str | None = None
    author: str | None = None


class ArtifactSaved(EventBase):
    """A file written into the session directory (chart, table, full output)."""

    type: Literal["artifact_saved"] = "artifact_saved"
    path: str  # relative to the session directory
    kind: str
    step_id: str | None = None
    description: str | None = None


class SessionFinished(EventBase):
    type: Literal["session_finished"] = "session_finished"
    status: SessionStatus
    duration: float
    counts: dict[str, int] = {}
    error: str | None = None
    problems: list[str] = []  # failures that did not stop the session: a sink that raised, a failed cleanup
    incomplete: bool = False  # a sink missed events (a full disk under the log): the record is not whole


Event = Annotated[
    SessionStarted
    | StepStarted
    | Output
    | StepFinished
    | ServerEvent
    | HypothesisUpdated
    | NoteAdded
    | ArtifactSaved
    | SessionFinished,
    Field(discriminator="type"),
]


def all_handled(event: NoReturn) -> None:
    """The last ``case _:`` of a ``match event:`` over the event classes: mypy reports the call when a class is
    left unmatched (it is then not ``NoReturn``), so a new event kind reaches every consumer. Does nothing at run time."""


E = TypeVar("E", bound=EventBase)


def events_of(events: Iterable[Event], kind: type[E] | str) -> list[Any]:
    """The events of one class, or of one ``type`` name (``server_ready``: one moment of ``ServerEvent``).
    The callers' ``of_type`` overloads give the class form its typed result."""
    if isinstance(kind, str):
        return [e for e in events if e.type == kind]
    return [e for e in events if isinstance(e, kind)]


EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
EVENT_CLASSES: tuple[type[EventBase], ...] = get_args(get_args(Event)[0])  # the union inside Annotated
KNOWN_TYPES: frozenset[str] = frozenset(
    name for model in EVENT_CLASSES for name in get_args(model.model_fields["type"].annotation)
)


class MalformedEvent(ValueError):
    """A logged event of a type this version knows, whose fields do not fit it (a bug or a hand edit):
    unlike an unknown type from a newer writer, this is a hole in the record and is reported."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


def parse_event(data: dict[str, Any]) -> Event | None:
    """Parse one logged event; ``None`` for an event type this version does not know (a newer writer's).
    Raises ``MalformedEvent`` for a known type with a missing or ill-typed field."""
    kind = data.get("type")
    if not isinstance(kind, str) or kind not in KNOWN_TYPES:
        return None
    try:
        return EVENT_ADAPTER.validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"][1:]) or "event"  # loc[0] is the union's tag
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise MalformedEvent(kind, f"{where}: {first['msg']}{more}") from exc
