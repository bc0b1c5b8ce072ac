"""The answer of a recorded investigation in one line: the flagship's account of the symptom
(orchestrator/verdicts/flagship/account.py) computed from the session's events alone, so that the console's last line,
the report's first, the TUI and MCP all tell the same answer, live or replayed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.events import Event, SessionStarted, StepFinished
from orchestrator.hypotheses.board import HypothesisBoard
from orchestrator.verdicts.context import RuleContext
from orchestrator.verdicts.flagship.account import SymptomAccount, account

#: verdict.json's schema (docs/verdict-json.md): raised when a field changes meaning or goes away
VERDICT_SCHEMA_VERSION = 1


def registered_variables(events: Sequence[Event]) -> dict[str, Any]:
    """The variables a rule saw at the end of the session: the playbook's vars, then every registered result as the
    runner registered it (the result, its status and the runner's keys; the last registration of a name wins). A
    step that ran on several hosts: the first host's result (the flagship investigates one host)."""
    started = next((e for e in events if isinstance(e, SessionStarted)), None)
    variables: dict[str, Any] = dict(started.vars) if started is not None else {}
    for e in events:
        if isinstance(e, StepFinished) and e.registered_as and e.results:
            o = e.results[0]
            variables[e.registered_as] = {**o.result, "status": o.status, "failed": o.status not in ("ok", "skipped"),
                                          "skipped": o.status == "skipped", "host": o.host, "error": o.error}
    return variables


def account_of(events: Sequence[Event]) -> SymptomAccount | None:
    """The account of the symptom, or None for a session that is not an investigation of a speculative server."""
    board = HypothesisBoard.from_events(list(events))
    if not board.entries:
        return None
    states = {hid: entry.state for hid, entry in board.entries.items()}
    titles = {hid: entry.hypothesis.title for hid, entry in board.entries.items()}
    evidence = {hid: next((h.evidence for h in entry.history if h.state in ("supported", "confirmed") and h.evidence),
                          "") for hid, entry in board.entries.items()}
    return account(RuleContext(variables=registered_variables(events), states=states), titles, evidence)
