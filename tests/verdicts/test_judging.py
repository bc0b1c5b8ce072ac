"""The board judges a step's rules one at a time: a rule that fails (a YAML template that errs, a registered rule
that raises or returns something else than a Verdict) is said as a note, and every other rule of the step still
decides. A playbook can mix the two kinds of rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.events import HypothesisUpdated, NoteAdded, StepFinished
from orchestrator.hypotheses.board import HypothesisBoard, judge_step, rule_hook
from orchestrator.playbook.loader import load_playbook
from orchestrator.verdicts import registry
from orchestrator.verdicts.registry import RegisteredRule, Verdict

PLAYBOOK = """\
name: mixed rules
hypotheses:
  - {id: wiring, title: wiring}
  - {id: flags_override, title: flags}
  - {id: draft_quality, title: draft}
  - {id: served_part, title: parts}
steps:
  - shell: echo hi
    register: dt
    evidence:
      wiring: {rule: wiring_by_draft_test}
      flags_override: {support_if: "dt.missing.deeper == 1", because: "never"}
      draft_quality: {rule: test_raises}
      served_part: {support_if: "dt.rc == 0", because: "rc {{ dt.rc }}"}
"""


@pytest.fixture
def raising_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(ctx: object) -> Verdict | None:
        raise KeyError("a defect in the rule")

    rules = registry.registered_rules()
    monkeypatch.setattr(registry, "_RULES", {**rules, "test_raises": RegisteredRule("test_raises", boom, (), ())})


def _step(tmp_path: Path):  # noqa: ANN202
    path = tmp_path / "p.yaml"
    path.write_text(PLAYBOOK)
    return load_playbook(path).steps[0]


def test_one_failing_rule_never_silences_another(tmp_path: Path, raising_rule: None) -> None:
    variables = {"dt": {"status": "ok", "rc": 0, "decision": "fine", "verdict": "the wiring is fine"}}
    judged = judge_step(_step(tmp_path), variables)
    assert {(h.hypothesis_id, h.state) for h in judged.hits} == {("served_part", "supported"), ("wiring", "refuted")}
    assert {f.hypothesis_id for f in judged.failures} == {"flags_override", "draft_quality"}
    raised = next(f for f in judged.failures if f.hypothesis_id == "draft_quality")
    assert raised.rule == "test_raises" and "a defect in the rule" in raised.message


async def test_the_hook_says_each_failure_and_records_the_rest(tmp_path: Path, raising_rule: None) -> None:
    step = _step(tmp_path)
    pb = load_playbook(tmp_path / "p.yaml")
    board = HypothesisBoard(pb.hypotheses)
    events: list[object] = []
    hook = rule_hook(board, events.append)
    finished = StepFinished(step_id=step.step_id, name="echo", action="shell", status="ok", duration=0.1)
    variables = {"dt": {"status": "ok", "rc": 0, "decision": "mismatch", "verdict": "V"}}
    await hook(step, finished, variables)
    updates = {e.hypothesis_id: e.state for e in events if isinstance(e, HypothesisUpdated)}
    assert updates == {"wiring": "supported", "served_part": "supported"}
    notes = [e.text for e in events if isinstance(e, NoteAdded)]
    assert len(notes) == 2 and any("test_raises for draft_quality failed" in n for n in notes)
    assert next(e for e in events if isinstance(e, HypothesisUpdated) and e.hypothesis_id == "wiring").rule == \
        "wiring_by_draft_test"
