"""The account of the symptom (orchestrator/verdicts/flagship/account.py): the ladder's rungs on intervals, each
hypothesis told by what it explains, and a status that never says "nothing wrong" beside a gap."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.verdicts.context import RuleContext
from orchestrator.verdicts.flagship.account import SymptomAccount, account

TITLES = {"wiring": "The server feeds other aux hidden states", "draft_field": "A draft-config field or tensor",
          "flags_override": "A flag is overridden", "serving_difference": "The server serves something else"}


def bench(tok_s: float, accept: float, spread: float = 0.2) -> dict[str, Any]:
    return {"status": "ok", "tok_s": tok_s, "tok_s_ci": [tok_s * 0.9, tok_s * 1.1], "accept_length": accept,
            "accept_length_ci": [accept - spread, accept + spread]}


def draft_test(tau: float, ceiling: float = 5.8, spread: float = 0.3) -> dict[str, Any]:
    best = {"wiring": [2, 6, 9], "tau_serving": tau, "tau_serving_ci": [tau - spread, tau + spread]}
    return {"status": "ok", "decision": "fine", "best": best, "server": best,
            "ceiling": {"tau_ceiling": ceiling, "tau_ceiling_ci": [ceiling, ceiling], "coverage": 1.0}}


def run(states: dict[str, str], evidence: dict[str, str] | None = None, **variables: Any) -> SymptomAccount:
    base = {"spec_srv": {"status": "ok"}, "base": bench(90, 1.0, 0)}
    answer = account(RuleContext(variables={**base, **variables}, states=states), TITLES, evidence)
    assert answer is not None
    return answer


def test_a_verified_fix_that_beats_no_speculation_is_the_answer() -> None:
    answer = run({"wiring": "confirmed"}, {"wiring": "draft scores best on [0, 6, 11] (tau 3.4)"},
                 spec=bench(60, 1.5), dt=draft_test(3.4), fixed=bench(140, 4.1),
                 fix={"status": "ok", "fix_status": "fix", "summary": "servable fix"})
    assert answer.status == "verified" and answer.exit_code == 0
    assert answer.headline.startswith("Cause found, fix verified: speculation at 0.67x of no speculation "
                                      "(60.0 vs 90.0 tok/s); accept length 1.5 [1.30, 1.70] served where the draft "
                                      "reaches 3.4 [3.10, 3.70] offline"), answer.headline
    assert "cause: [wiring] draft scores best on [0, 6, 11] — fix verified: accept length 4.1" in answer.headline
    assert [r.state for r in answer.rungs] == ["gap", "gap"]


def test_nothing_wrong_only_where_every_rung_holds_and_nothing_stands() -> None:
    healthy = run({"wiring": "refuted"}, spec=bench(140, 3.9), dt=draft_test(3.4))
    assert healthy.status == "nothing_wrong" and not healthy.symptom_stands
    assert healthy.headline.startswith("Nothing wrong: speculation at 1.56x")


def test_a_finding_with_no_fix_served_is_found_not_verified_and_names_what_it_found() -> None:
    answer = run({"draft_field": "supported"}, {"draft_field": "fc.weight holds 4 non-finite values. Re-export it"},
                 spec=bench(40, 1.0, 0), dt=draft_test(1.0, ceiling=5.8, spread=0.02),
                 fix={"status": "ok", "fix_status": "nothing_to_fix", "summary": "nothing to change"})
    assert answer.status == "found_not_verified" and answer.exit_code == 5
    assert [r.name for r in answer.rungs if r.state == "gap"] == ["speed", "offline_vs_ceiling"]
    assert "found: [draft_field] fc.weight holds 4 non-finite values (no fix that addresses it" in answer.headline
    assert "No fix needed" not in answer.headline


def test_a_finding_whose_served_fix_recovered_nothing_explains_nothing() -> None:
    answer = run({"flags_override": "supported"}, spec=bench(40, 1.5), dt=draft_test(3.4), fixed=bench(41, 1.5),
                 fix={"status": "ok", "fix_status": "fix"})
    assert answer.status == "not_explained"
    assert [(e.hypothesis, e.explains) for e in answer.explanations] == [("flags_override", "nothing")]
    assert "explains nothing: flags_override" in answer.headline


def test_a_rung_that_could_not_be_measured_is_never_nothing_wrong() -> None:
    answer = run({}, spec=bench(100, 2.4), dt={"status": "failed", "failed": True})
    assert [r.state for r in answer.rungs] == ["holds", "unmeasured"]
    assert answer.status == "not_explained"


def test_a_server_that_cannot_serve_the_candidate_is_a_gap() -> None:
    answer = run({}, spec_srv={"status": "failed", "failed": True}, spec={"status": "skipped", "skipped": True})
    assert answer.rungs[0].name == "serves" and answer.status == "not_explained"


def test_a_session_that_never_served_speculation_has_no_account() -> None:
    assert account(RuleContext(variables={"base": bench(90, 1.0)}, states={}), TITLES) is None


@settings(max_examples=200, deadline=None)
@given(spec_tok=st.floats(10, 200), base_tok=st.floats(10, 200), served=st.floats(1.0, 5.0),
       offline=st.floats(1.0, 5.0), ceiling=st.floats(1.0, 6.0),
       states=st.dictionaries(st.sampled_from(sorted(TITLES)),
                              st.sampled_from(["supported", "confirmed", "refuted", "inconclusive", "open"])),
       fixed=st.none() | st.tuples(st.floats(10, 200), st.floats(1.0, 5.0)))
def test_nothing_wrong_never_stands_beside_a_gap_or_a_finding(spec_tok: float, base_tok: float, served: float,
                                                              offline: float, ceiling: float,
                                                              states: dict[str, str],
                                                              fixed: tuple[float, float] | None) -> None:
    extra = {"fixed": bench(*fixed)} if fixed else {}
    answer = run(states, spec=bench(spec_tok, served), base=bench(base_tok, 1.0, 0),
                 dt=draft_test(offline, ceiling), **extra)
    if answer.status == "nothing_wrong":
        assert not answer.symptom_stands, answer.rungs
        assert all(r.state == "holds" for r in answer.rungs), answer.rungs
        assert not any(s in ("supported", "confirmed") for h, s in states.items() if h != "serving_difference")
    if answer.symptom_stands:
        assert answer.status != "nothing_wrong"


def test_a_greedy_output_that_speculation_changes_is_the_first_finding() -> None:
    def rows(shas: list[str]) -> list[dict[str, Any]]:
        return [{"output_sha": sha, "prompt_tokens": 10 + i, "completion_tokens": 64, "latency": 1.0}
                for i, sha in enumerate(shas)]

    same = run({}, spec={**bench(140, 3.9), "per_request": rows(["a", "b", "c"])},
               base={**bench(90, 1.0, 0), "per_request": rows(["a", "b", "c"])}, dt=draft_test(3.4))
    assert same.rungs[0].name == "lossless" and same.rungs[0].state == "holds" and same.status == "nothing_wrong"
    changed = run({}, spec={**bench(140, 3.9), "per_request": rows(["a", "x", "c"])},
                  base={**bench(90, 1.0, 0), "per_request": rows(["a", "b", "c"])}, dt=draft_test(3.4))
    assert changed.rungs[0].state == "gap" and changed.status == "not_explained"
    assert changed.headline.startswith("Not explained yet: speculation changed the greedy output of 1 of 3 requests "
                                       "(the first: request 1)"), changed.headline
