"""The flagship's server-start rules on registered results, without running anything: when the speculative server
serves, everything reads as before (server_start refuted, the fix compared); when it fails, the benchmarks are
skipped, server_start is confirmed with the failure's cause, and no rule or reason trips over what was not measured.
(tests/lab/test_flagship_server_failure.py runs the failing path end to end against the lab.)"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from orchestrator.hypotheses.board import evaluate_rules
from orchestrator.playbook.loader import load_playbook
from orchestrator.templating import evaluate, render
from orchestrator.verdicts.in_templates import TEMPLATE_FUNCTIONS

FLAGSHIP = Path(__file__).resolve().parents[2] / "playbooks" / "eagle3.yaml"
FLAGS = {"speculative-algorithm": "EAGLE3", "speculative-num-steps": 7}
FIXED = {**FLAGS, "speculative-num-draft-tokens": 8}
INSPECT = {"severity": {"architecture": "info", "lm_head": "info"}, "feeds": {"sglang": [2, 6, 9], "vllm": None}}
DT = {"failed": False, "decision": "mismatch", "verdict": "[0, 6, 11] beats the served wiring"}


def _bench(tok_s: float, accept: float) -> dict[str, Any]:
    return {"status": "ok", "failed": False, "skipped": False, "tok_s": tok_s, "tok_s_ci": [tok_s - 1, tok_s + 1],
            "accept_length": accept, "accept_length_ci": [accept - 0.1, accept + 0.1], "completed": 12}


SKIPPED = {"status": "skipped", "failed": False, "skipped": True}


def _server(ok: bool, failure: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"status": "ok" if ok else "failed", "failed": not ok, "skipped": False, "ready_s": 3.2,
            "overrides": [], "effective": {"speculative_algorithm": "EAGLE3"} if ok else {}, "failure": failure,
            "error": None if ok else "server 'spec' (lab) on lab exited with code 2 during start-up"}


@cache
def _playbook() -> Any:
    return load_playbook(FLAGSHIP, extra_names={"target", "draft", "candidate_flags", "fixed_flags", "engine"})


def _steps() -> dict[str, Any]:
    return {s.display_name: s for s in _playbook().steps}


def _run_sets(steps: dict[str, Any], variables: dict[str, Any]) -> dict[str, Any]:
    for key, value in _playbook().vars.items():
        variables.setdefault(key, value)  # the playbook's own vars (wiring_margin, ...)
    variables.update(TEMPLATE_FUNCTIONS)  # fact(...), as the runner binds it
    for name in ("The symptom", "Weigh the evidence"):
        variables.update(render(steps[name].args, variables))
    return variables


def test_a_server_that_serves_refutes_server_start() -> None:
    steps = _steps()
    variables = {**TEMPLATE_FUNCTIONS, "candidate_flags": FLAGS, "fixed_flags": FIXED, "inspect": INSPECT, "dt": DT,
                 "base_srv": _server(True), "base": _bench(100.0, 1.0), "spec_srv": _server(True),
                 "spec": _bench(80.0, 1.9), "fixed_srv": _server(True), "fixed": _bench(150, 3.5)}
    for name in ("Baseline benchmark", "Speculative benchmark", "Restart with the fix", "Benchmark the fix"):
        assert evaluate(steps[name].when, variables) is True, name
    _run_sets(steps, variables)
    assert variables["speedup"] == 0.8 and variables["symptom"] is True
    assert variables["weighed"]["accept_recovered"] is True
    hits = evaluate_rules(steps["The symptom"], variables)
    assert [(h, v) for h, v, _, _ in hits] == [("server_start", "refuted")]
    assert hits[0][3] == "the speculative server started in 3.2s"
    wiring = evaluate_rules(steps["Benchmark the fix"], variables)
    assert [(h, v) for h, v, _, _ in wiring] == [("wiring", "confirmed"), ("residual_symptom", "refuted")]
    assert wiring[0][3].startswith("fix verified: accept length 1.9 [1.80, 2.00] -> 3.5 [3.40, 3.60]")
    assert "(baseline 100.0 [99.00, 101.00])" in wiring[0][3]
    assert wiring[1][3].endswith("faster than no speculation: the fix removes the symptom"), wiring[1][3]
    # the same fix still slower than no speculation (one fault hid another): another cause remains, said so;
    # overlapping intervals cannot say
    for fixed, state, said in ((_bench(60, 3.5), "supported", "still slower than no speculation"),
                               (_bench(100.5, 3.5), "inconclusive", "the interval includes no change")):
        hits = {h: (v, why) for h, v, _, why in evaluate_rules(steps["Benchmark the fix"], {**variables, "fixed": fixed})}
        assert hits["residual_symptom"][0] == state and said in hits["residual_symptom"][1], hits["residual_symptom"]


def test_a_server_that_cannot_start_confirms_server_start_and_skips_what_needs_it() -> None:
    steps = _steps()
    failure = {"cause": "unknown_flag", "label": "unknown flag", "reason": "exited", "exit_code": 2,
               "summary": "the server does not accept a flag (unrecognized arguments: --cuda-graph-max-bs-decode 8)"}
    variables = {**TEMPLATE_FUNCTIONS, "candidate_flags": FLAGS, "fixed_flags": FIXED, "inspect": INSPECT, "dt": DT,
                 "base_srv": _server(True), "base": _bench(100.0, 1.0), "spec_srv": _server(False, failure)}
    assert evaluate(steps["Speculative benchmark"].when, variables) is False
    assert evaluate(steps["Restart with the fix"].when, variables) is True  # the fixed flags differ
    variables.update(spec=SKIPPED, fixed_srv=_server(True), fixed=_bench(150, 3.5))
    _run_sets(steps, variables)
    assert variables["speedup"] is None and variables["symptom"] is False
    assert not variables["weighed"]["accept_recovered"]
    hits = evaluate_rules(steps["The symptom"], variables)
    assert [(h, v) for h, v, _, _ in hits] == [("server_start", "confirmed")]
    assert hits[0][3] == ("the speculative server did not start (exited, exit code 2): unknown flag — the server "
                          "does not accept a flag (unrecognized arguments: --cuda-graph-max-bs-decode 8)")
    # no wiring to verify against a candidate that never served; the fix's own speed against the baseline is said
    assert [(h, v) for h, v, _, _ in evaluate_rules(steps["Benchmark the fix"], variables)] == [
        ("residual_symptom", "refuted")]
    assert evaluate_rules(steps["Weigh the evidence"], variables) == []

    # the same flags again would fail again: no second start
    assert evaluate(steps["Restart with the fix"].when, {**variables, "fixed_flags": FLAGS}) is False
    # a start refused before anything ran (a bad flag name) registers no failure: the step's error says why
    refused = {"status": "failed", "failed": True, "skipped": False, "error": "flags: 'x;y' is not a flag name"}
    hits = evaluate_rules(steps["The symptom"], {**variables, "spec_srv": refused})
    assert hits[0][3] == "the speculative server did not start: flags: 'x;y' is not a flag name"


def test_a_fix_that_only_the_lab_can_serve_is_said_to_be_simulated() -> None:
    """On the lab the seed's fix is the lab's own capture flag, an engine change no SGLang has: the recovery
    verifies the root cause, and the verdict says the fix is simulated, not servable."""
    steps = _steps()
    simulated = {**FIXED, "lab-capture-layers": "0,6,11"}
    variables = {**TEMPLATE_FUNCTIONS, "candidate_flags": FLAGS, "fixed_flags": simulated, "inspect": INSPECT, "dt": DT,
                 "base_srv": _server(True), "base": _bench(100.0, 1.0), "spec_srv": _server(True),
                 "spec": _bench(80.0, 1.9), "fixed_srv": _server(True), "fixed": _bench(150, 3.5)}
    _run_sets(steps, variables)
    wiring = evaluate_rules(steps["Benchmark the fix"], variables)
    assert [(h, v) for h, v, _, _ in wiring] == [("wiring", "confirmed"), ("residual_symptom", "refuted")]
    because = wiring[0][3]
    assert because.startswith("root cause verified with an engine change the lab simulates (lab-capture-layers "
                              "0,6,11: no engine flag does this; not a servable fix): accept length 1.9"), because
    assert "fix verified" not in because


def test_the_fix_is_weighed_against_the_baseline_paired_by_request_where_the_requests_pair() -> None:
    """Each prompt's length cancels when the two benchmarks sent the same prompts: the fix at 0.9x the baseline on
    every request is slower, though the marginal intervals (prompts of very different lengths) overlap."""
    from orchestrator.bench_compare import speed_against as _speed_against

    rows = [{"prompt_tokens": p, "completion_tokens": 64, "latency": s} for p, s in ((20, 0.5), (400, 2.0), (90, 1.0))]
    base = {"tok_s": 64.0, "tok_s_ci": [20.0, 140.0], "per_request": rows}
    fixed = {"tok_s": 58.0, "tok_s_ci": [18.0, 126.0],
             "per_request": [dict(r, latency=r["latency"] / 0.9) for r in rows]}
    paired = _speed_against(fixed, base)
    assert paired["how"] == "paired" and paired["decision"] == "slower" and paired["n"] == 3
    assert abs(paired["ratio"] - 0.9) < 1e-3 and paired["ci"][1] < 1
    # requests that do not pair (another prompt order): the marginal intervals, which overlap here
    other = dict(fixed, per_request=list(reversed(fixed["per_request"])))
    marginal = _speed_against(other, base)
    assert marginal["how"] == "marginal" and marginal["decision"] == "undecided", marginal
    assert _speed_against({"tok_s": 1.0, "tok_s_ci": None}, base)["decision"] is None  # nothing to weigh
