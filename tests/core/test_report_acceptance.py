"""The postmortem of issue 26, from events: the verdict tells one story (each observation once, a fix that did not
recover said "not verified", an unexplained serving difference named, a verdict about the draft instead of "No
hypothesis confirmed"), and the acceptance section draws predicted vs measured, per position and per prompt length
with intervals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.events import HostOutcome, HypothesisUpdated, SessionStarted, StepFinished
from orchestrator.session.document import Image, Para, Table
from orchestrator.session.reader import LoadedSession
from orchestrator.session.report_acceptance import acceptance_section
from orchestrator.session.report_sections import verdict_section

HYPOTHESES = [{"id": "wiring", "title": "Wiring"}, {"id": "serving_difference", "title": "Serving differs"},
              {"id": "draft_quality", "title": "The draft does not predict this target"}]


def _step(sid: str, action: str, result: dict[str, Any]) -> StepFinished:
    return StepFinished(step_id=sid, name=f"step {sid}", action=action, status="ok", duration=1.0,
                        results=[HostOutcome(host="lab", status="ok", result=result)])


def _update(hid: str, state: str, previous: str, sid: str, text: str) -> HypothesisUpdated:
    return HypothesisUpdated(hypothesis_id=hid, state=state, previous=previous, step_id=sid, source="rule",
                             evidence=text)


def _session(directory: Path, *events: Any) -> LoadedSession:
    return LoadedSession(directory=directory, events=[SessionStarted(session_id="t", playbook="eagle3",
                                                                     hypotheses=HYPOTHESES), *events])


def test_the_verdict_tells_one_story(tmp_path: Path) -> None:
    session = _session(tmp_path, _step("s1", "draft_test", {}), _step("s2", "bench", {}), _step("s3", "reconcile", {}),
                       _update("wiring", "supported", "open", "s1", "draft scores best on [0, 6, 11] [3.0, 3.8]"),
                       _update("wiring", "supported", "supported", "s1", "draft scores best on [0, 6, 11] [3.0, 3.8]"),
                       _update("wiring", "confirmed", "supported", "s2", "root cause verified with an engine change "
                               "the lab simulates: 1.5 [1.3, 1.8] -> 4.1 [3.4, 4.8]"),
                       _update("serving_difference", "supported", "open", "s3", "disjoint — the server serves"))
    paras = [b.text for b in verdict_section(session) if isinstance(b, Para)]
    assert paras[0] == "**Root cause: Wiring** [`wiring`]"
    assert paras[1] == "Evidence (step s1 · step s1): draft scores best on [0, 6, 11] [3.0, 3.8]"  # once
    assert paras[2].startswith("Decisive evidence (step s2 · step s2): root cause verified with an engine change "
                               "the lab simulates")
    assert paras[3].startswith("**Not explained yet: the server serves something the offline model of it does not**")


def test_a_fix_that_did_not_recover_is_not_verified_and_a_draft_nothing_helps_gets_a_verdict(tmp_path: Path) -> None:
    session = _session(tmp_path, _step("s1", "draft_test", {}), _step("s2", "bench", {}), _step("s3", "set", {}),
                       _update("wiring", "supported", "open", "s1", "draft scores best on [0, 6, 11]"),
                       _update("wiring", "supported", "supported", "s2", "fix not verified: 1.0 -> 1.0"),
                       _update("draft_quality", "supported", "open", "s3", "the draft does not predict this target"))
    paras = [b.text for b in verdict_section(session) if isinstance(b, Para)]
    assert paras[0] == ("**The draft: The draft does not predict this target** [`draft_quality`]: the draft does "
                        "not predict this target")
    assert "**No hypothesis confirmed.**" not in paras
    assert "**Supported, not confirmed: Wiring** [`wiring`] (step s2 · step s2): fix not verified: 1.0 -> 1.0" in paras


def test_a_confirmed_case_and_its_confirmed_broader_hypothesis_are_one_root_cause(tmp_path: Path) -> None:
    """rope_mismatch (case_of: served_part) and served_part confirmed by the same fix: one root cause, the specific
    one named first, each observation once and one decisive measurement; a case confirmed alone is told alone."""
    hypotheses = [{"id": "served_part", "title": "The engine serves another part"},
                  {"id": "rope_mismatch", "title": "The RoPE differs", "case_of": "served_part"}]
    events: list[Any] = [_step("s1", "probe", {}), _step("s2", "draft_test", {}), _step("s3", "bench", {}),
              _update("rope_mismatch", "supported", "open", "s1", "rope_theta 100 vs the target's 10000"),
              _update("served_part", "supported", "open", "s2", "rope swap recovers 2.1 -> 3.3"),
              _update("served_part", "confirmed", "supported", "s3", "fix verified 2.6 -> 3.8"),
              _update("rope_mismatch", "confirmed", "supported", "s3", "the fix serves the target's RoPE: verified")]
    events = [e.model_copy(update={"seq": i}) for i, e in enumerate(events, 2)]  # as the runner numbers them
    session = LoadedSession(directory=tmp_path, events=[SessionStarted(session_id="t", playbook="eagle3",
                                                                       hypotheses=hypotheses), *events])
    paras = [b.text for b in verdict_section(session) if isinstance(b, Para)]
    assert paras[:4] == [
        "**Root cause: The RoPE differs** [`rope_mismatch`] — a case of: The engine serves another part [`served_part`]",
        "Evidence (step s1 · step s1): rope_theta 100 vs the target's 10000",
        "Evidence (step s2 · step s2): rope swap recovers 2.1 -> 3.3",
        "Decisive evidence (step s3 · step s3): fix verified 2.6 -> 3.8"]
    assert sum("Root cause" in p for p in paras) == 1
    # the broader hypothesis confirmed without its case: told as itself
    alone = LoadedSession(directory=tmp_path, events=[SessionStarted(session_id="t", playbook="eagle3",
                                                                     hypotheses=hypotheses), *events[:-1]])
    paras = [b.text for b in verdict_section(alone) if isinstance(b, Para)]
    assert paras[0] == "**Root cause: The engine serves another part** [`served_part`]"
    assert any(p.startswith("**Supported, not confirmed: The RoPE differs**") for p in paras)


def _rc(server: str, predicted: float, measured: float, decision: str) -> dict[str, Any]:
    return {"name": server, "wiring": [2, 6, 9], "steps": 3, "algorithm": "EAGLE3", "decision": decision,
            "predicted": {"accept_length": predicted, "accept_length_ci": [predicted - 0.2, predicted + 0.2]},
            "measured": {"accept_length": measured, "accept_length_ci": [measured - 0.2, measured + 0.2]},
            "per_position": [{"k": 0, "predicted": 0.3, "predicted_ci": [0.2, 0.4], "measured": 0.8,
                              "measured_ci": [0.7, 0.9], "disjoint": True}],
            "by_length": [{"bucket": [0, 32], "prompts": 5, "requests": 5, "predicted": predicted,
                           "predicted_ci": [predicted - 0.3, predicted + 0.3], "measured": measured,
                           "measured_ci": None}]}


def test_the_acceptance_section_draws_predicted_vs_measured(tmp_path: Path) -> None:
    dt = {"server_wiring": [2, 6, 9], "wirings": [
        {"wiring": [2, 6, 9], "tau_serving": 1.5, "tau_serving_ci": [1.3, 1.7]},
        {"wiring": [0, 6, 11], "tau_serving": 3.4, "tau_serving_ci": [2.9, 3.9],
         "as_trained": {"tau_serving": 3.5, "tau_serving_ci": [3.0, 4.0]}}]}
    both = {"decision": "discrepancy", "servers": [_rc("spec", 1.5, 1.6, "reconciled"),
                                                   _rc("fixed", 1.5, 4.1, "discrepancy")]}
    blocks = acceptance_section(_session(tmp_path, _step("s1", "draft_test", dt), _step("s2", "reconcile", both)))
    tables = [b for b in blocks if isinstance(b, Table)]
    assert tables[0].rows == [["spec", "[2, 6, 9]", "3", "EAGLE3", "1.50 [1.30, 1.70]", "1.60 [1.40, 1.80]",
                               "reconciled"],
                              ["fixed", "[2, 6, 9]", "3", "EAGLE3", "1.50 [1.30, 1.70]", "4.10 [3.90, 4.30]",
                               "discrepancy"]]
    assert tables[1].rows[0] == ["spec", "k=0", "0.30 [0.20, 0.40]", "0.80 [0.70, 0.90]", "**disjoint**"]
    assert tables[2].rows[0][1] == "0-31 tok" and tables[2].rows[0][4] == "1.60"
    images = [b for b in blocks if isinstance(b, Image)]
    assert [i.path.name for i in images] == ["acceptance-s1-wirings.svg", "acceptance-predicted-vs-measured.svg",
                                            "acceptance-per-position.svg", "acceptance-by-length.svg"]
    svg = images[0].path.read_text()
    assert svg.startswith("<svg") and "ringed: what the server feeds" in svg and "offline, as trained" in svg
    assert acceptance_section(_session(tmp_path)) == []


def test_a_difference_the_fix_accounts_for_is_said_so(tmp_path: Path) -> None:
    session = _session(tmp_path, _step("s3", "reconcile", {}),
                       _update("serving_difference", "supported", "open", "s3", "accounted for by the fix: predicted "
                               "3.84, measured 1.57: disjoint; the server with the fixed draft (x) reconciles"))
    paras = [b.text for b in verdict_section(session) if isinstance(b, Para)]
    said = [p for p in paras if "serving_difference" in p]
    assert said and said[0].startswith("**Accounted for by the fix: the server served something the offline model")
    assert not any(p.startswith("**Not explained yet") for p in paras)
