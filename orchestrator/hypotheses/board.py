"""HypothesisBoard: the scientific-debugging logbook (Zeller): hypothesis -> prediction -> experiment
(a step) -> observation (its registered result) -> conclusion (a state), every change an event.

State changes: ``open`` becomes whatever the evidence says. Later evidence may strengthen
(supported -> confirmed), and may contradict (confirmed -> refuted): then the new state is taken and
the event carries ``conflicts_with`` so the report shows the contradiction instead of hiding it.
Evidence that does not change the state (a second "supports") is still recorded: it counts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, TypeGuard

from orchestrator.errors import OrchestratorError, UserInputError
from orchestrator.events import (
    HYPOTHESIS_STATES,
    Event,
    HypothesisState,
    HypothesisUpdated,
    NoteAdded,
    SessionStarted,
)
from orchestrator.playbook.models import VERDICT_KEYS, EvidenceRule, Hypothesis, Step, VerdictKey
from orchestrator.templating import evaluate, render
from orchestrator.verdicts import RuleContext, Verdict, rule_named

if TYPE_CHECKING:
    from orchestrator.events import StepFinished

#: where the board's events go (the session's ``emit``): the board never holds the runner
Emit = Callable[[Event], None]

RULE_STATE: dict[VerdictKey, HypothesisState] = {"confirm_if": "confirmed", "support_if": "supported", "refute_if": "refuted", "inconclusive_if": "inconclusive"}
POSITIVE: set[HypothesisState] = {"supported", "confirmed"}


def is_state(value: str) -> TypeGuard[HypothesisState]:
    return value in HYPOTHESIS_STATES


@dataclass
class BoardEntry:
    hypothesis: Hypothesis
    state: HypothesisState = "open"
    history: list[HypothesisUpdated] = field(default_factory=list)

    @property
    def evidence_count(self) -> int:
        return len(self.history)

    @property
    def conflicted(self) -> bool:
        return any(h.conflicts_with for h in self.history)


def next_state(current: HypothesisState, verdict: HypothesisState) -> tuple[HypothesisState, HypothesisState | None]:
    """The state after a verdict, and the contradicted state if any."""
    if verdict == "inconclusive":
        return (current if current != "open" else "inconclusive"), None
    if current in POSITIVE and verdict == "refuted":
        return "refuted", current
    if current == "refuted" and verdict in POSITIVE:
        return verdict, current
    if current == "confirmed" and verdict == "supported":
        return "confirmed", None
    return verdict, None


class HypothesisBoard:
    def __init__(self, hypotheses: list[Hypothesis] | list[dict[str, Any]]) -> None:
        self.entries: dict[str, BoardEntry] = {}
        for h in hypotheses:
            hyp = h if isinstance(h, Hypothesis) else Hypothesis.model_validate(h)
            self.entries[hyp.id] = BoardEntry(hyp)

    @classmethod
    def from_events(cls, events: list[Event]) -> HypothesisBoard:
        """Rebuild the board of a saved session (replay, report, CLI verdicts)."""
        start = next((e for e in events if isinstance(e, SessionStarted)), None)
        board = cls(start.hypotheses if start else [])
        for e in events:
            if isinstance(e, HypothesisUpdated):
                board.apply(e)
        return board

    def apply(self, event: HypothesisUpdated) -> None:
        entry = self.entries.get(event.hypothesis_id)
        if entry is None:  # a verdict on a hypothesis added after the fact (manual)
            entry = self.entries[event.hypothesis_id] = BoardEntry(Hypothesis(id=event.hypothesis_id, title=event.hypothesis_id))
        entry.state = event.state
        entry.history.append(event)

    def decide(self, hid: str, verdict: str, **fields: Any) -> HypothesisUpdated:
        """Build (not emit) the event for a verdict on ``hid``."""
        if hid not in self.entries:
            known = ", ".join(self.entries) or "none"
            raise UserInputError(f"unknown hypothesis {hid!r} (known: {known})")
        if not is_state(verdict):
            raise UserInputError(f"state must be one of {', '.join(HYPOTHESIS_STATES)} (got {verdict!r})")
        current = self.entries[hid].state
        if fields.get("source") == "manual":
            state, conflict = verdict, (current if (current in POSITIVE and verdict == "refuted")
                                        or (current == "refuted" and verdict in POSITIVE) else None)
        else:
            state, conflict = next_state(current, verdict)
        return HypothesisUpdated(hypothesis_id=hid, state=state, previous=current, conflicts_with=conflict, **fields)

    def confirmed(self) -> list[BoardEntry]:
        return [e for e in self.entries.values() if e.state == "confirmed"]

    def open_entries(self) -> list[BoardEntry]:
        return [e for e in self.entries.values() if e.state in ("open", "supported", "inconclusive")]


class _States(dict[str, str]):
    """Hypothesis id -> state; a hypothesis with no evidence yet (or none the caller knows) is ``open``."""

    def __missing__(self, key: str) -> str:
        return "open"


class RuleHit(NamedTuple):
    """A rule that holds: the hypothesis it decides, the verdict, the rule (a registered name or the expression),
    and the observation."""

    hypothesis_id: str
    state: HypothesisState
    rule: str
    because: str | None


@dataclass
class RuleFailure:
    """A rule that could not be judged (a template error, a rule that raised): said, never silently dropped."""

    hypothesis_id: str
    rule: str
    message: str


@dataclass
class Judgement:
    hits: list[RuleHit] = field(default_factory=list)
    failures: list[RuleFailure] = field(default_factory=list)


def _judge_registered(name: str, hid: str, variables: dict[str, Any], states: _States,
                      register: str | None) -> RuleHit | None:
    verdict = rule_named(name).function(RuleContext(variables=variables, hypothesis_id=hid, states=states,
                                                    step_register=register))
    if verdict is None:
        return None
    if not isinstance(verdict, Verdict) or verdict.state not in RULE_STATE.values():
        raise TypeError(f"returned {verdict!r}, not a Verdict(state, because)")
    return RuleHit(hid, verdict.state, name, verdict.because)


def _judge_expressions(rule: EvidenceRule, hid: str, variables: dict[str, Any],
                       states: _States) -> list[RuleHit]:
    # ``hypothesis``: the one this rule decides, as the board has it (one rule block can serve several)
    scope = {**variables, "hypothesis_state": states, "hypothesis": {"id": hid, "state": states[hid]}}
    matched = [(key, expr) for key in VERDICT_KEYS if (expr := getattr(rule, key)) and bool(evaluate(expr, scope))]
    because = str(render(rule.because, scope)) if rule.because and matched else None
    return [RuleHit(hid, RULE_STATE[key], expr, because) for key, expr in matched]


def judge_step(step: Step, variables: dict[str, Any]) -> Judgement:
    """Every rule on ``step``, one at a time: the hits, and each rule that failed (the others are judged anyway)."""
    judgement = Judgement()
    states = _States(variables.get("hypothesis_state") or {})
    for hid, rule in step.evidence.items():
        name = rule.rule or "expressions"
        try:
            if rule.rule:
                hit = _judge_registered(rule.rule, hid, variables, states, step.register_as)
                judgement.hits.extend([hit] if hit else [])
            else:
                judgement.hits.extend(_judge_expressions(rule, hid, variables, states))
        except OrchestratorError as exc:
            judgement.failures.append(RuleFailure(hid, name, exc.message))
        except Exception as exc:  # a rule's own defect: counted and said, the step's other rules still judged
            judgement.failures.append(RuleFailure(hid, name, f"{type(exc).__name__}: {exc}"))
    return judgement


def evaluate_rules(step: Step, variables: dict[str, Any]) -> list[RuleHit]:
    """(hypothesis id, verdict, rule, because) for every rule on ``step`` that holds; raises the first rule failure
    (the board's hook judges them one by one instead: ``judge_step``)."""
    judgement = judge_step(step, variables)
    if judgement.failures:
        raise OrchestratorError(judgement.failures[0].message)
    return judgement.hits


def rule_hook(board: HypothesisBoard, emit: Emit) -> Callable[[Step, StepFinished, dict[str, Any]], Awaitable[None]]:
    """The runner's step hook that evaluates a step's evidence rules against ``board`` after it finishes."""

    async def on_step(step: Step, finished: StepFinished, variables: dict[str, Any]) -> None:
        if not step.evidence:
            return
        if finished.status != "ok":
            for hid in step.evidence:
                emit(NoteAdded(text=f"evidence for {hid} not evaluated: step {finished.status}",
                                      step_id=step.step_id, hypothesis_id=hid, author="engine"))
            return
        # rules may read the board as it stands (``hypothesis_state.wiring == 'supported'``): a later experiment
        # confirms what an earlier one supported only when both hold (a root cause needs a verified fix)
        variables = {**variables, "hypothesis_state": {hid: e.state for hid, e in board.entries.items()}}
        judgement = judge_step(step, variables)
        for failure in judgement.failures:
            emit(NoteAdded(text=f"evidence rule {failure.rule} for {failure.hypothesis_id} failed at {step.location}: "
                                f"{failure.message}", step_id=step.step_id, hypothesis_id=failure.hypothesis_id,
                           author="engine"))
        for hid, verdict, rule, because in judgement.hits:
            event = board.decide(hid, verdict, source="rule", step_id=step.step_id, rule=rule,
                                 evidence=because or f"{rule} held after '{step.display_name}'")
            board.apply(event)
            emit(event)

    return on_step


def manual_verdict(board: HypothesisBoard, emit: Emit, hid: str, state: str, because: str, *,
                   author: str | None = None) -> HypothesisUpdated:
    """A person's verdict during a live session (TUI): recorded exactly like a rule's."""
    event = board.decide(hid, state, source="manual", evidence=because, author=author)
    board.apply(event)
    emit(event)
    return event
