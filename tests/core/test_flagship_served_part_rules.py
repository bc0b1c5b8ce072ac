"""The flagship's counterfactual step and its `served_part` rules on registered results, without running anything:
the step runs only when the wiring test explains nothing and speculation does not clearly pay (the healthy path
pays nothing); a part is supported by the swap that recovers offline and confirmed only by the fix's benchmark,
marginal or paired by request (the `paired_gain` filter)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.hypotheses.board import evaluate_rules
from orchestrator.playbook.loader import load_playbook
from orchestrator.templating import evaluate
from orchestrator.verdicts.in_templates import TEMPLATE_FUNCTIONS

FLAGSHIP = Path(__file__).resolve().parents[2] / "playbooks" / "eagle3.yaml"
STEP = "Counterfactual served parts"
SWAP = {"part": "attention", "served": "16 heads", "swapped": "4 heads", "recovers": True, "refs": []}
CF = {"status": "ok", "failed": False, "skipped": False, "counterfactual": {
    "recovering": ["attention"], "swaps": [SWAP, {"part": "norm", "recovers": False}], "verdict": "attention: ..."}}


def _bench(tok_s: float, per_request: list[tuple[int, int]], ci: list[float]) -> dict[str, Any]:
    rows = [{"completion_tokens": t, "verify_ct": c, "prompt_tokens": 20 + i} for i, (t, c) in enumerate(per_request)]
    accept = sum(t for t, _ in per_request) / sum(c for _, c in per_request)
    return {"status": "ok", "failed": False, "skipped": False, "tok_s": tok_s, "tok_s_ci": [tok_s - 2, tok_s + 2],
            "accept_length": accept, "accept_length_ci": ci, "completed": len(rows), "per_request": rows}


def _steps() -> dict[str, Any]:
    playbook = load_playbook(FLAGSHIP, extra_names={"target", "draft", "candidate_flags", "fixed_flags", "engine"})
    return {s.display_name: s for s in playbook.steps}


def _vars(**over: Any) -> dict[str, Any]:
    base = {"dt": {"failed": False, "decision": "fine"}, "base": _bench(24.0, [(64, 64)] * 4, [1.0, 1.0]),
            "spec": _bench(20.0, [(64, 37), (64, 44), (64, 11), (64, 19)], [1.6, 3.4]), "cf": CF,
            "engine": "lab", "vllm_engines": ["vllm", "lab-vllm"], "fix": {"summary": "config fix", "flags": {}},
            "fixed_flags": {"speculative-algorithm": "EAGLE3"}, **TEMPLATE_FUNCTIONS}
    return {**base, **over}


def _states(step: Any, variables: dict[str, Any]) -> dict[str, str]:
    return {hid: state for hid, state, _rule, _because in evaluate_rules(step, variables)}


def test_the_counterfactual_runs_only_when_nothing_explains_the_symptom() -> None:
    when = _steps()[STEP].when
    assert evaluate(when, _vars()) is True  # wiring fine, speculation not clearly faster
    assert evaluate(when, _vars(spec=_bench(40.0, [(64, 20)] * 4, [3.0, 3.4]))) is False  # healthy: clearly faster
    assert evaluate(when, _vars(dt={"failed": False, "decision": "mismatch"})) is False  # the wiring explains it
    assert evaluate(when, _vars(dt={"failed": False, "decision": "no_signal"},
                                spec=_bench(40.0, [(64, 60)] * 4, [1.0, 1.1]))) is True
    assert evaluate(when, _vars(dt={"failed": True})) is False


def test_a_recovering_swap_supports_and_only_a_recovered_fix_confirms() -> None:
    steps = _steps()
    assert _states(steps[STEP], _vars()) == {"served_part": "supported"}
    none = {**CF, "counterfactual": {"recovering": [], "swaps": [{"part": "norm", "recovers": False}]}}
    assert _states(steps[STEP], _vars(cf=none)) == {"served_part": "refuted"}
    fix = steps["Benchmark the fix"]
    # the marginal intervals overlap, but every request accepts more with the fix: verified by the paired ratio
    paired = _bench(30.0, [(64, 20), (64, 20), (64, 10), (64, 12)], [3.0, 4.6])
    states = _states(fix, _vars(fixed=paired))
    assert states["served_part"] == "confirmed"
    text = next(b for h, _s, _r, b in evaluate_rules(fix, _vars(fixed=paired)) if h == "served_part") or ""
    assert "paired by request" in text and "fix verified" in text
    # a fix that accepts the same: not verified, the hypothesis stays inconclusive
    same = _bench(20.0, [(64, 37), (64, 44), (64, 11), (64, 19)], [1.6, 3.4])
    assert _states(fix, _vars(fixed=same))["served_part"] == "inconclusive"
    assert "fix not verified" in next(b for h, _s, _r, b in evaluate_rules(fix, _vars(fixed=same))
                                      if h == "served_part")


def test_requests_that_do_not_pair_give_no_paired_gain() -> None:
    from orchestrator.bench_compare import paired_gain as _paired_gain

    a = _bench(1.0, [(64, 20), (64, 30)], [1, 2])
    b = _bench(1.0, [(64, 20), (64, 40)], [1, 2])
    assert _paired_gain(a, b)["ratio"] > 1
    b["per_request"][1]["prompt_tokens"] = 99  # another prompt in that place: no pairing
    assert _paired_gain(a, b) is None
    assert _paired_gain(a, {"per_request": b["per_request"][:1]}) is None
    assert _paired_gain(a, {"status": "skipped"}) is None


def test_vllm_requests_pair_by_their_spec_counters() -> None:
    from orchestrator.bench_compare import paired_gain as _paired_gain

    def bench(per: list[tuple[int, list[int]]]) -> dict[str, Any]:
        return {"per_request": [{"completion_tokens": 64, "prompt_tokens": 26 + i, "verify_ct": None,
                                 "spec_counts": {"drafts": d, "accepted": acc}} for i, (d, acc) in enumerate(per)]}

    spec = bench([(37, [16, 9, 1]), (44, [15, 3, 1]), (40, [12, 6, 2])])
    fixed = bench([(20, [14, 11, 6]), (20, [16, 15, 10]), (21, [15, 12, 9])])
    gain = _paired_gain(fixed, spec)
    assert gain is not None and gain["ci"][0] > 1 and gain["n"] == 3
    assert _paired_gain(fixed, {"per_request": [{"prompt_tokens": 26 + i} for i in range(3)]}) is None


AFTER = "Counterfactual served parts, after a reconcile that failed"
DISAGREE = {"status": "ok", "failed": False, "skipped": False, "decision": "discrepancy",
            "verdict": "spec: offline 3.1 [2.8, 3.4], server measured 1.2 [1.1, 1.3]: the intervals are apart"}


def test_a_failed_reconcile_runs_the_counterfactual_when_it_has_not_run() -> None:
    """Issue 26: "when acceptance is low on every wiring, OR A RECONCILE FAILS": the reconcile sits after the fix, so
    a second counterfactual step runs there, only where the first did not, and only on a discrepancy."""
    when = _steps()[AFTER].when
    skipped = {"status": "skipped", "failed": False, "skipped": True}
    mismatch = {"failed": False, "decision": "mismatch"}
    assert evaluate(when, _vars(cf=skipped, dt=mismatch, rc=DISAGREE)) is True
    assert evaluate(when, _vars(cf=CF, dt=mismatch, rc=DISAGREE)) is False  # the first one ran: no second
    assert evaluate(when, _vars(cf=skipped, dt=mismatch, rc={**DISAGREE, "decision": "reconciled"})) is False
    assert evaluate(when, _vars(cf=skipped, dt=mismatch, rc={**DISAGREE, "decision": "undecided"})) is False
    assert evaluate(when, _vars(cf=skipped, dt={"failed": True}, rc=DISAGREE)) is False


def test_the_part_it_names_is_supported_never_confirmed() -> None:
    step = _steps()[AFTER]
    variables = _vars(cf_rc=CF, rc=DISAGREE)
    assert _states(step, variables) == {"served_part": "supported"}
    because = next(b for hid, _s, _r, b in evaluate_rules(step, variables) if hid == "served_part")
    assert "the reconcile failed" in because and "attention" in because and "not verified" in because
    none = {**CF, "counterfactual": {"recovering": [], "swaps": [{"part": "norm", "recovers": False}]}}
    assert _states(step, _vars(cf_rc=none, rc=DISAGREE)) == {}
