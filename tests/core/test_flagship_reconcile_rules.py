"""The flagship's issue-26 rules on registered results, without running anything: a reconcile's discrepancy is a
hypothesis of its own; a static finding is a root cause only when the fix that addresses it recovers the measured
acceptance, and is refuted when the server's measurement contradicts it; a wiring fix that does not recover is
"not verified"; a draft that nothing helps, with a server that agrees with the offline test, ends in a verdict
about the draft. (tests/lab/test_flagship_scenarios.py runs them end to end on the lab.)"""

from __future__ import annotations

from typing import Any

from orchestrator.hypotheses.board import evaluate_rules
from tests.core.test_flagship_server_rules import FIXED, FLAGS, INSPECT, _bench, _run_sets, _server, _steps

DT_MISMATCH = {"failed": False, "decision": "mismatch", "verdict": "[0, 6, 11] beats the served wiring",
               "best": {"wiring": [0, 6, 11], "tau_serving": 3.4, "tau_serving_ci": [3.0, 3.8]},
               "server": {"wiring": [2, 6, 9], "tau_serving": 1.7, "tau_serving_ci": [1.5, 1.9]}}
DT_NO_SIGNAL = {"failed": False, "decision": "no_signal", "verdict": "the draft accepts almost nothing on any wiring",
                "best": {"wiring": [2, 6, 9], "tau_serving": 1.02, "tau_serving_ci": [1.0, 1.05]},
                "server": {"wiring": [2, 6, 9], "tau_serving": 1.02, "tau_serving_ci": [1.0, 1.05]},
                "draft": {"records": {}}, "target": {"path": "/t"}}


def _one(decision: str, draft: str) -> dict[str, Any]:
    return {"decision": decision, "draft": draft, "verdict": f"reconcile {decision}"}


def _rc(spec: dict[str, Any], fixed: dict[str, Any] | None = None) -> dict[str, Any]:
    """The reconcile step's registered result: one entry per speculative server that served."""
    by_name = {"spec": spec, **({"fixed": fixed} if fixed else {})}
    decisions = {o["decision"] for o in by_name.values()}
    overall = "discrepancy" if "discrepancy" in decisions else "reconciled" if decisions == {"reconciled"} else \
        "undecided"
    return {"status": "ok", "failed": False, "decision": overall, "by_name": by_name,
            "verdict": "; ".join(o["verdict"] for o in by_name.values())}


def _vars(**over: Any) -> dict[str, Any]:
    v = {"candidate_flags": FLAGS, "fixed_flags": FIXED, "inspect": INSPECT, "dt": DT_MISMATCH,
         "base_srv": _server(True), "base": _bench(100.0, 1.0), "spec_srv": _server(True), "spec": _bench(80.0, 1.0),
         "fixed_srv": _server(True), "fixed": _bench(150, 3.5),
         "rc": _rc(_one("reconciled", "/d"), _one("reconciled", "/seed")), "engine": "lab"}
    v.update(over)
    return v


def _hits(step: str, variables: dict[str, Any], states: dict[str, str] | None = None) -> dict[str, tuple[str, str]]:
    steps = _steps()
    if step == "Weigh the evidence":
        _run_sets(steps, variables)
    scope = {**variables, "hypothesis_state": states or {}}
    return {h: (v, because or "") for h, v, _, because in evaluate_rules(steps[step], scope)}


def test_a_reconcile_discrepancy_is_a_hypothesis_of_its_own() -> None:
    step = "Reconcile every speculative benchmark with the draft test"
    fixed = _one("reconciled", "/seed")
    assert _hits(step, _vars(rc=_rc(_one("discrepancy", "/d"), fixed)))["serving_difference"][0] == "supported"
    assert _hits(step, _vars(rc=_rc(_one("reconciled", "/d"), fixed)))["serving_difference"][0] == "refuted"
    assert _hits(step, _vars(rc=_rc(_one("reconciled", "/d"), _one("discrepancy", "/seed")))
                 )["serving_difference"][0] == "supported"
    assert _hits(step, _vars(rc=_rc(_one("undecided", "/d"))))["serving_difference"][0] == "inconclusive"


def test_a_static_finding_needs_a_fix_that_recovers() -> None:
    supported = {"lm_head_missing": "supported"}
    # the fix served another draft and recovered the accept length on intervals: confirmed
    verdict, because = _hits("Weigh the evidence", _vars(), supported)["lm_head_missing"]
    assert verdict == "confirmed" and because.startswith("fix verified: the fixed draft /seed recovered")
    # the same draft again (a flags-only fix) does not verify a checkpoint finding
    same = _rc(_one("reconciled", "/d"), _one("reconciled", "/d"))
    verdict, because = _hits("Weigh the evidence", _vars(rc=same), supported)["lm_head_missing"]
    assert verdict == "inconclusive" and because.startswith("fix not verified")
    # a fix that does not recover: not verified, in the evidence itself
    verdict, because = _hits("Weigh the evidence", _vars(fixed=_bench(80, 1.0)), supported)["lm_head_missing"]
    assert verdict == "inconclusive" and "fix not verified" in because
    # the server accepts clearly: the finding is contradicted by the measurement, never confirmed
    verdict, because = _hits("Weigh the evidence", _vars(spec=_bench(80, 2.5)), supported)["lm_head_missing"]
    assert verdict == "refuted" and because.startswith("contradicted by the server's measurement: served accept "
                                                       "length 2.5 [2.40, 2.60]")
    # a finding that never stood is not touched
    assert "lm_head_missing" not in _hits("Weigh the evidence", _vars(), {})


def test_a_wiring_fix_that_does_not_recover_is_not_verified() -> None:
    hits = _hits("Benchmark the fix", _vars(spec=_bench(80, 1.0), fixed=_bench(80, 1.0)))
    assert hits["wiring"][0] == "inconclusive" and hits["wiring"][1].startswith("fix not verified")
    hits = _hits("Benchmark the fix", _vars(spec=_bench(80, 1.0), fixed=_bench(150, 3.5)))
    assert hits["wiring"][0] == "confirmed"


def test_a_draft_nothing_helps_ends_in_a_verdict_about_the_draft() -> None:
    # the counterfactual served parts ran (a draft that accepts nothing always asks for them) and none recovered
    cleared = {"status": "ok", "counterfactual": {"swaps": [{"part": "head"}, {"part": "norm"}], "recovering": []}}
    nothing = _vars(dt=DT_NO_SIGNAL, fixed=_bench(80, 1.0), cf=cleared)
    verdict, because = _hits("Weigh the evidence", nothing)["draft_quality"]
    assert verdict == "supported" and because.startswith("the draft does not predict this target")
    assert "training data generated by this target (/t)" in because and "(it records none)" in because
    # ... the last resort only: without the counterfactual, not explained yet
    unrun, why = _hits("Weigh the evidence", {**nothing, "cf": {"status": "skipped"}})["draft_quality"]
    assert unrun == "inconclusive" and "the counterfactual served parts did not run" in why
    # a checkpoint finding that stands explains the collapse; a server that disagrees must be explained first
    assert "draft_quality" not in _hits("Weigh the evidence", nothing, {"lm_head_missing": "supported"})
    apart = _rc(_one("discrepancy", "/d"), _one("reconciled", "/d"))
    assert "draft_quality" not in _hits("Weigh the evidence", {**nothing, "rc": apart})
    # a draft that accepts clearly on some wiring predicts this target
    assert _hits("Weigh the evidence", _vars())["draft_quality"][0] == "refuted"


def test_a_candidate_that_served_nothing_is_recovered_by_a_fix_that_clearly_accepts() -> None:
    # direct-d2t on real vLLM: every request of the candidate failed (HTTP 500), the fixed draft serves
    failed = {"status": "failed", "failed": True, "skipped": False, "error": "500"}
    rc = _rc(_one("undecided", "/d"), _one("reconciled", "/seed"))
    hits = _hits("Weigh the evidence", _vars(spec=failed, rc=rc), {"d2t_mapping": "supported"})
    assert hits["d2t_mapping"][0] == "confirmed"
    hits = _hits("Weigh the evidence", _vars(spec=failed, fixed=_bench(80, 1.05)), {"d2t_mapping": "supported"})
    assert hits["d2t_mapping"][0] == "inconclusive"


def test_a_derived_fix_verifies_only_the_findings_it_addresses() -> None:
    # no-lm-head on real vLLM 0.32.0: the derived fix corrects the wiring and leaves the head a blocker (re-export
    # it); it recovers 1.13 -> 2.03, which verifies the wiring, not the missing head
    weak = {**_bench(26.0, 1.13), "accept_length_ci": [1.04, 1.23]}
    partial = {"status": "ok", "failed": False, "fix_status": "partial", "flags": FLAGS,
               "blockers": [{"what": "lm_head", "why": "no lm_head.weight", "remedies": ["re-export"]}]}
    served = {**_server(True), "flags": FLAGS}  # the fixed server served the derived fix's flags
    derived = _vars(spec=weak, fixed=_bench(59.0, 2.03), fix=partial, fixed_srv=served)
    hits = _hits("Weigh the evidence", derived, {"lm_head_missing": "supported"})
    assert hits["lm_head_missing"][0] == "inconclusive", hits
    assert hits["lm_head_missing"][1].startswith("fix not verified: the served fix left lm_head as it was")
    # direct-d2t: the derived fix rewrites d2t as offsets (no blocker left), and the fixed draft serves
    failed = {"status": "failed", "failed": True, "skipped": False, "error": "500"}
    mended = {**partial, "fix_status": "fix", "blockers": []}
    derived = _vars(spec=failed, fixed=_bench(60.0, 1.56), fix=mended, fixed_srv=served,
                    rc=_rc(_one("undecided", "/d"), _one("reconciled", "/d.orchestrator-fix")))
    hits = _hits("Weigh the evidence", derived, {"d2t_mapping": "supported"})
    assert hits["d2t_mapping"][0] == "confirmed", hits
    # the host's own fixed checkpoint (fixed_flags, served instead of the derived fix) addresses what it serves
    hits = _hits("Weigh the evidence", _vars(spec=weak, fixed=_bench(59.0, 2.03), fix=partial,
                                             fixed_srv={**_server(True), "flags": FIXED}),
                 {"lm_head_missing": "supported"})
    assert hits["lm_head_missing"][0] == "confirmed", hits
