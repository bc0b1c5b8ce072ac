"""The report's verdict names the derived fix (or why none can be served), and the draft-test table shows the
"as trained" column exactly when the engine serves other parts than the draft's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.events import HostOutcome, SessionStarted, StepFinished
from orchestrator.session.document import Para, Table
from orchestrator.session.reader import LoadedSession
from orchestrator.session.report_sections import draft_test_section, verdict_section


def _session(action: str, result: dict[str, Any]) -> LoadedSession:
    start = SessionStarted(session_id="t", playbook="eagle3", hypotheses=[{"id": "wiring", "title": "Wiring"}])
    step = StepFinished(step_id="s1", name="step", action=action, status="ok", duration=1.0,
                        results=[HostOutcome(host="gpu1", status="ok", result=result)])
    return LoadedSession(directory=Path("."), events=[start, step])


def _row(wiring: list[int], tau: float, own: float | None) -> dict[str, Any]:
    row: dict[str, Any] = {"tier": 1, "name": str(wiring), "wiring": wiring, "tau_serving": tau,
                           "tau_serving_ci": [tau - 0.1, tau + 0.1], "tau": tau, "acc": [0.5], "seconds": 1.0}
    if own is not None:
        row["as_trained"] = {"tau_serving": own, "tau_serving_ci": [own - 0.1, own + 0.1]}
    return row


def test_as_trained_column_only_when_parts_are_swapped() -> None:
    swapped = {"part": "head", "served": "target lm_head", "trained": "own lm_head", "why": "EAGLE swaps the head"}
    with_parts = draft_test_section(_session("draft_test", {
        "decision": "no_signal", "verdict": "v", "parts": {"swapped": [swapped]},
        "wirings": [_row([12], 0.05, 1.9)]}))
    table = next(b for b in with_parts if isinstance(b, Table))
    assert "as trained: tau (serving), 95% CI" in table.header
    assert table.rows[0][5] == "1.90 1.80–2.00"
    assert any(isinstance(b, Para) and "head: served target lm_head, trained own lm_head" in b.text
               for b in with_parts)
    plain = draft_test_section(_session("draft_test", {"decision": "fine", "verdict": "v", "parts": {"swapped": []},
                                                       "wirings": [_row([2, 6, 9], 1.5, None)]}))
    assert not any("as trained" in h for b in plain if isinstance(b, Table) for h in b.header)


def test_verdict_names_the_fix_or_why_none_can_be_served() -> None:
    blocked = {"fix_status": "blocked", "summary": "no fix SGLang 0.5.12.post1 can serve by config: wiring: x",
               "draft": None}
    paras = [b.text for b in verdict_section(_session("probe", blocked)) if isinstance(b, Para)]
    assert "**No servable fix** (step s1 on gpu1): no fix SGLang 0.5.12.post1 can serve by config: wiring: x" in paras
    fixed = {"fix_status": "fix", "summary": "servable fix on SGLang 0.5.23: ids", "draft": "/m/d.orchestrator-fix"}
    paras = [b.text for b in verdict_section(_session("probe", fixed)) if isinstance(b, Para)]
    assert "**Fix** (step s1 on gpu1): servable fix on SGLang 0.5.23: ids" in paras
    assert "Corrected draft written beside the original: `/m/d.orchestrator-fix`" in paras
    other = {"decision": "fine"}  # any other probe's result is not a fix
    assert not any("Fix" in b.text for b in verdict_section(_session("probe", other)) if isinstance(b, Para))


def test_the_derived_fix_is_said_once_in_the_verdict() -> None:
    """The draft_fix step's summary both confirms the root cause further and is the fix paragraph: shown once."""
    from orchestrator.events import HypothesisUpdated

    summary = "no fix SGLang 0.5.12.post1 can serve by config or flags: wiring: x"
    session = _session("probe", {"fix_status": "blocked", "summary": summary, "draft": None})
    session.events += [
        HypothesisUpdated(hypothesis_id="wiring", state="confirmed", previous="open", step_id="s0",
                          evidence="draft scores best on [0, 6, 11]"),
        HypothesisUpdated(hypothesis_id="wiring", state="confirmed", previous="confirmed", step_id="s1",
                          evidence=summary)]
    paras = [b.text for b in verdict_section(session) if isinstance(b, Para)]
    assert sum(summary in p for p in paras) == 1, paras
    assert any(p.startswith("Decisive evidence") and "[0, 6, 11]" in p for p in paras)
    assert f"**No servable fix** (step s1 on gpu1): {summary}" in paras


def test_no_fix_needed_never_stands_beside_what_is_unexplained() -> None:
    """A fix derivation that found nothing to change says "No fix needed" only when nothing is left unexplained: not
    beside a server that did not start, nor beside a reconcile whose prediction and measurement are disjoint."""
    from orchestrator.events import HypothesisUpdated

    nothing = {"fix_status": "nothing_to_fix", "summary": "the evidence names nothing to fix", "draft": None}
    hypotheses = [{"id": "server_start", "title": "start"}, {"id": "serving_difference", "title": "difference"}]

    def paras(*updates: tuple[str, str]) -> list[str]:
        session = _session("probe", nothing)
        session.events[0] = SessionStarted(session_id="t", playbook="eagle3", hypotheses=hypotheses)
        session.events += [HypothesisUpdated(hypothesis_id=h, state=s, previous="open", step_id="s0", evidence="e")
                           for h, s in updates]
        return [b.text for b in verdict_section(session) if isinstance(b, Para)]

    assert "**No fix needed** (step s1 on gpu1): the evidence names nothing to fix" in paras(
        ("server_start", "refuted"), ("serving_difference", "refuted"))
    for updates, said in (((("server_start", "confirmed"),), "the server could not serve"),
                          ((("serving_difference", "supported"),), "does not serve what the offline model")):
        shown = paras(*updates)
        assert not any("No fix needed" in p for p in shown), shown
        fix = next(p for p in shown if p.startswith("**No fix derived yet**"))
        assert said in fix and "not explained yet" in fix
