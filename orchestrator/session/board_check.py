"""A board that cannot contradict itself, checked on every recorded investigation: what the verdict says must agree
with the evidence the session holds. Each violation is one sentence naming the hypothesis or the words at fault; the
report shows them (never hidden), and the tests that run the flagship fail on any.

The checks:
- no hypothesis ruled out while the fix derivation names its part as what blocks a fix (the same evidence calling it
  the cause);
- "No fix needed" only when nothing is slower than it should be (the account's status ``nothing_wrong``);
- no finding told as "supported" whose own served fix recovered nothing (the account says it explains nothing);
- no account of "nothing wrong" beside a rung of the symptom's ladder that shows a gap."""

from __future__ import annotations

from orchestrator.hypotheses.board import HypothesisBoard
from orchestrator.session.answer import account_of
from orchestrator.session.document import Block, Para
from orchestrator.session.reader import LoadedSession
from orchestrator.verdicts.flagship.weighing import CHECKPOINT_PARTS

#: a part the fix derivation names as a blocker -> the hypothesis that says it is at fault
PART_HYPOTHESIS = {part: hid for hid, part in CHECKPOINT_PARTS.items()}


def contradictions(session: LoadedSession) -> list[str]:
    """Every way the session's verdict contradicts its own evidence (empty: none)."""
    from orchestrator.session.report_sections import (
        verdict_section,  # the rendered verdict is what is checked
    )

    board = HypothesisBoard.from_events(session.events)
    if not board.entries:
        return []
    out: list[str] = []
    for step in session.of_type("step_finished"):
        for r in step.results:
            for b in (r.result or {}).get("blockers") or [] if "fix_status" in (r.result or {}) else []:
                hid = PART_HYPOTHESIS.get(str(b.get("what")))
                if hid in board.entries and board.entries[hid].state == "refuted":
                    out.append(f"{hid} is ruled out while the fix derivation ({step.step_id}) names {b.get('what')} "
                               f"as what blocks the fix: {b.get('why')}")
    answer = account_of(session.events)
    if answer is None:
        return out
    text = "\n".join(block.text for block in verdict_section(session) if isinstance(block, Para))
    if "No fix needed" in text and answer.status != "nothing_wrong":
        out.append(f"the verdict says \"No fix needed\" while the account is {answer.status}: {answer.symptom}")
    if answer.status == "nothing_wrong" and answer.symptom_stands:
        out.append(f"the account says nothing is wrong beside a gap: {answer.symptom}")
    for e in answer.explanations:
        if e.explains == "nothing" and f"Supported, not confirmed: {e.title}" in text:
            out.append(f"{e.hypothesis} is told as supported while its served fix recovered nothing ({e.text})")
    return out


def contradictions_section(session: LoadedSession) -> list[Block]:
    """Right under the verdict: where it contradicts its own evidence, said (nothing when it does not)."""
    found = contradictions(session)
    if not found:
        return []
    return [Para("**The verdict contradicts its own evidence** (a defect of this tool: please report it): "
                 + "; ".join(found))]
