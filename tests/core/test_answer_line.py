"""The answer in one line (issue 60/61), told alike by every front end: the report's first line, the console's last,
verdict.json for scripts; "No fix needed" never beside a symptom; and the board check that finds a verdict
contradicting its own evidence."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from orchestrator.console import ConsoleSink
from orchestrator.events import (
    Event,
    HostOutcome,
    HypothesisUpdated,
    SessionFinished,
    SessionStarted,
    StepFinished,
)
from orchestrator.session.board_check import contradictions, contradictions_section
from orchestrator.session.document import Para
from orchestrator.session.reader import LoadedSession
from orchestrator.session.recording import write_verdict
from orchestrator.session.report_sections import verdict_section

HYPOTHESES = [{"id": "draft_field", "title": "A field or tensor contradicts the checkpoint"},
              {"id": "lm_head_missing", "title": "No lm_head"}]


def bench(tok_s: float, accept: float) -> dict[str, Any]:
    return {"tok_s": tok_s, "tok_s_ci": [tok_s * 0.9, tok_s * 1.1], "accept_length": accept,
            "accept_length_ci": [accept - 0.01, accept + 0.01]}


def step(n: int, register: str, result: dict[str, Any], action: str = "probe") -> StepFinished:
    return StepFinished(step_id=f"s{n}", name=register, action=action, status="ok", duration=1.0,
                        registered_as=register, results=[HostOutcome(host="gpu1", status="ok", result=result)])


def events(fix: dict[str, Any], *updates: tuple[str, str, str]) -> list[Event]:
    best = {"wiring": [2, 6, 9], "tau_serving": 1.0, "tau_serving_ci": [0.99, 1.01]}
    out: list[Event] = [
        SessionStarted(session_id="t", playbook="eagle3", hypotheses=HYPOTHESES),
        step(1, "base", bench(90, 1.0), "bench"), step(2, "spec_srv", {}, "server"),
        step(3, "spec", bench(40, 1.0), "bench"),
        step(4, "dt", {"decision": "no_signal", "best": best, "server": best,
                       "ceiling": {"tau_ceiling": 5.8, "tau_ceiling_ci": [5.8, 5.8], "coverage": 1.0}}, "draft_test"),
        step(5, "fix", fix)]
    out += [HypothesisUpdated(hypothesis_id=h, state=s, previous="open", step_id="s4", evidence=e)  # type: ignore[arg-type]
            for h, s, e in updates]
    return out


NOTHING = {"fix_status": "nothing_to_fix", "summary": "nothing in the evidence calls for a config or flag change",
           "draft": None, "blockers": []}


def test_the_report_opens_with_the_answer_and_never_says_no_fix_needed_beside_a_symptom() -> None:
    session = LoadedSession(directory=Path("."), events=events(NOTHING, (
        "draft_field", "supported", "fc.weight holds 4 non-finite values (NaN or Inf) of 49152. No config changes it")))
    paras = [b.text for b in verdict_section(session) if isinstance(b, Para)]
    assert paras[0].startswith("**Found, not verified: speculation at 0.44x of no speculation (40.0 vs 90.0 tok/s); "
                               "offline the draft accepts almost nothing"), paras[0]
    assert "found: [draft_field] fc.weight holds 4 non-finite values" in paras[0]
    assert not any("No fix needed" in p for p in paras), paras
    assert any(p.startswith("**No fix derived yet**") and "the symptom stands" in p for p in paras), paras
    assert contradictions(session) == []


def test_the_console_ends_with_the_answer(tmp_path: Path) -> None:
    out = io.StringIO()
    sink = ConsoleSink(Console(file=out, width=400, highlight=False))
    sink.session_dir = str(tmp_path)
    for e in [*events(NOTHING, ("draft_field", "supported", "fc.weight holds 4 non-finite values")),
              SessionFinished(status="ok", duration=1.0)]:
        sink.handle(e)
    lines = out.getvalue().rstrip("\n").splitlines()
    assert lines[-1].startswith("■ verdict Found, not verified: speculation at 0.44x"), lines[-3:]
    assert lines[-2] == f"  session: {tmp_path}"


def test_verdict_json_holds_the_answer_for_scripts(tmp_path: Path) -> None:
    session = LoadedSession(directory=tmp_path, events=events(NOTHING, ("draft_field", "supported", "fc.weight")))
    path = write_verdict(tmp_path, session)
    assert path == tmp_path / "verdict.json"
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == 1 and doc["status"] == "found_not_verified" and doc["exit_code"] == 5
    assert [r["name"] for r in doc["rungs"] if r["state"] == "gap"] == ["speed", "offline_vs_ceiling"]
    assert doc["headline"].startswith("Found, not verified")


def test_a_finding_ruled_out_beside_the_fix_derivation_naming_it_is_a_contradiction() -> None:
    blocked = {"fix_status": "blocked", "summary": "no fix: lm_head", "draft": None,
               "blockers": [{"what": "lm_head", "why": "no lm_head.weight", "remedies": ["re-export"]}]}
    session = LoadedSession(directory=Path("."), events=events(blocked, (
        "lm_head_missing", "refuted", "contradicted by the server's measurement")))
    found = contradictions(session)
    assert found and found[0].startswith("lm_head_missing is ruled out while the fix derivation (s5) names lm_head")
    [para] = contradictions_section(session)
    assert isinstance(para, Para) and "contradicts its own evidence" in para.text
