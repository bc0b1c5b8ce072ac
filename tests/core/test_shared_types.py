"""The states and kinds are defined once (orchestrator/events.py); every table keyed by them covers them all,
and every consumer of events dispatches on the event classes."""

from __future__ import annotations

from typing import get_args

from rich.console import Console

from orchestrator.console import FINISHED_STYLE, HYP_STYLE, STATUS_STYLE, ConsoleSink
from orchestrator.events import (
    EVENT_CLASSES,
    HYPOTHESIS_STATES,
    KNOWN_TYPES,
    SESSION_STATUSES,
    STEP_SECTIONS,
    STEP_STATUSES,
    ArtifactSaved,
    HypothesisState,
    ServerEvent,
    SessionStatus,
    StepSection,
    StepStatus,
    parse_event,
)
from orchestrator.hypotheses.board import RULE_STATE
from orchestrator.playbook.models import VERDICT_KEYS, EvidenceRule
from orchestrator.session.report_sections import STATE_MARK
from orchestrator.tui.model import RowStatus, ServerState, SessionModel, describe_event, server_state
from orchestrator.tui.widgets.styles import SERVER_STYLE, STATE_STYLE, STATUS_GLYPH


def test_value_tuples_come_from_the_types() -> None:
    assert STEP_STATUSES == get_args(StepStatus)
    assert SESSION_STATUSES == get_args(SessionStatus)
    assert HYPOTHESIS_STATES == get_args(HypothesisState) == ("open", "supported", "refuted", "confirmed", "inconclusive")
    assert STEP_SECTIONS == get_args(StepSection)
    assert set(get_args(RowStatus)) == {"pending", "running", *STEP_STATUSES}


def test_tables_cover_every_value() -> None:
    assert set(STATUS_STYLE) == set(STEP_STATUSES)
    assert set(FINISHED_STYLE) == set(SESSION_STATUSES)
    assert set(HYP_STYLE) == set(STATE_STYLE) == set(STATE_MARK) == set(HYPOTHESIS_STATES)
    assert set(STATUS_GLYPH) == set(get_args(RowStatus))
    assert set(SERVER_STYLE) == set(get_args(ServerState))
    assert set(RULE_STATE) == set(VERDICT_KEYS) == set(EvidenceRule.model_fields) - {"because", "rule"}


def test_every_known_type_has_a_class_and_a_server_state() -> None:
    assert {t for cls in EVENT_CLASSES for t in get_args(cls.model_fields["type"].annotation)} == KNOWN_TYPES
    for kind in get_args(ServerEvent.model_fields["type"].annotation):
        assert server_state(kind) in get_args(ServerState)


def test_logged_json_still_parses_to_the_classes() -> None:
    """Values on disk are unchanged: a session written before reads back into the classes the consumers match."""
    logged = [
        {"type": "session_started", "session_id": "s", "playbook": "p", "hosts": ["localhost"]},
        {"type": "step_started", "step_id": "s1", "name": "n", "action": "shell", "section": "always"},
        {"type": "output", "step_id": "s1", "host": "localhost", "stream": "server_log", "text": "x\n"},
        {"type": "step_finished", "step_id": "s1", "name": "n", "action": "shell", "status": "unreachable",
         "duration": 0.5},
        {"type": "server_ready", "server_id": "srv", "host": "localhost", "engine": "lab", "port": 1},
        {"type": "hypothesis_updated", "hypothesis_id": "h", "state": "inconclusive", "source": "manual"},
        {"type": "note_added", "text": "t"},
        {"type": "artifact_saved", "path": "a.svg", "kind": "chart"},
        {"type": "session_finished", "status": "error", "duration": 1.0},
    ]
    events = [parse_event(d) for d in logged]
    assert all(e is not None for e in events)
    model, lines = SessionModel(), []
    console = Console(record=True, width=100, color_system=None)
    sink = ConsoleSink(console, verbose=True)
    for event in events:
        assert event is not None
        model.apply(event)
        sink.handle(event)
        lines.append(describe_event(event))
    assert model.steps["s1"].status == "unreachable" and model.servers["srv"].state == "ready"
    assert model.status == "error" and isinstance(events[7], ArtifactSaved)
    assert lines[-2] == "artifact_saved"
    assert "server srv ready on localhost:1" in console.export_text()
