"""The event model: every fact of a session is one of these, and every sink speaks only this.

Events are appended to ``events.jsonl`` one per line. Readers must accept unknown fields and unknown
event types from newer writers (``schema_version`` tells them what to expect).
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

SCHEMA_VERSION = 1

StepStatus = Literal["ok", "failed", "skipped", "timeout", "cancelled", "unreachable"]
SessionStatus = Literal["ok", "failed", "cancelled", "error"]
HypothesisState = Literal["open", "supported", "refuted", "confirmed", "inconclusive"]
ServerEventType = Literal["server_started", "server_ready", "server_stopped", "server_failed"]
OutputStream = Literal["stdout", "stderr", "progress", "server_log", "info"]
STEP_STATUSES: tuple[str, ...] = ("ok", "failed", "skipped", "timeout", "cancelled", "unreachable")


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
    section: Literal["steps", "always", "adhoc"] = "steps"
    hosts: list[str] = []
    args: dict[str, Any] = {}
    attempt: int = 1
    location: str | None = None  # file:line:col of the step in the playbook


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


class HypothesisUpdated(EventBase):
    type: Literal["hypothesis_updated"] = "hypothesis_updated"
    hypothesis_id: str
    state: HypothesisState
    previous: str | None = None
    source: Literal["rule", "manual"] = "rule"
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

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def parse_event(data: dict[str, Any]) -> Event | None:
    """Parse one logged event; ``None`` for an event type this version does not know."""
    try:
        return EVENT_ADAPTER.validate_python(data)
    except Exception:
        return None
