"""The flagship's rules on what a real vLLM server registers, without running anything (the real runs are
tests/lab/test_flagship_real_vllm.py): a server that starts and then fails every request confirms server_start
with the server's own error; vLLM's start-up decisions (lm_head sharing, the aux layers it logs) weigh on
lm_head_sharing and wiring; an SGLang server, which has no such decisions, trips no rule over them."""

from __future__ import annotations

from typing import Any

from orchestrator.hypotheses.board import evaluate_rules
from orchestrator.templating import evaluate
from tests.core.test_flagship_server_rules import (
    DT,
    FIXED,
    FLAGS,
    INSPECT,
    SKIPPED,
    _bench,
    _run_sets,
    _server,
    _steps,
)

SERVER_ERROR = {"summary": "IndexError: index 1500 is out of bounds for dimension 0 with size 1024",
                "error_lines": ['(EngineCore pid=6) File "/v/vllm/v1/spec_decode/eagle.py", line 3, in f',
                                "IndexError: index 1500 is out of bounds for dimension 0 with size 1024"]}


def _vllm_server(decisions: dict[str, Any] | None) -> dict[str, Any]:
    return {**_server(True), "effective": {"speculative_config.method": "eagle3"}, "decisions": decisions}


def _share(state: str, why: str) -> dict[str, Any]:
    return {"state": state, "why": why, "line": f"Detected EAGLE model with {why} lm_head weights."}


def test_a_server_that_fails_every_request_confirms_server_start_with_its_own_error() -> None:
    steps = _steps()
    failed_bench = {"status": "failed", "failed": True, "skipped": False, "tok_s": None, "completed": 0,
                    "server_error": SERVER_ERROR, "error": "bench: no request succeeded"}
    variables = {"candidate_flags": FLAGS, "fixed_flags": FIXED, "inspect": INSPECT, "dt": DT,
                 "base_srv": _server(True), "base": _bench(100.0, 1.0), "spec_srv": _vllm_server(None),
                 "spec": failed_bench, "fixed_srv": _server(True), "fixed": _bench(150, 3.5)}
    assert steps["Speculative benchmark"].ignore_errors  # the investigation goes on past it
    _run_sets(steps, variables)
    assert variables["speedup"] is None and variables["symptom"] is False
    hits = evaluate_rules(steps["The symptom"], variables)
    assert [(h, v) for h, v, _, _ in hits] == [("server_start", "confirmed")]
    assert hits[0][3] == ("the speculative server started in 3.2s but failed while serving: IndexError: index 1500 "
                          "is out of bounds for dimension 0 with size 1024")
    assert evaluate(steps["Stop the speculative server"].when, variables) is True  # and it is still stopped


def test_vllms_lm_head_decision_weighs_on_lm_head_sharing() -> None:
    steps = _steps()
    base = {"candidate_flags": FLAGS, "inspect": INSPECT, "dt": DT}
    own = evaluate_rules(steps["Speculative server with the candidate flags"],
                         {**base, "spec_srv": _vllm_server({"lm_head": _share("own", "distinct")})})
    assert ("lm_head_sharing", "refuted") in [(h, v) for h, v, _, _ in own]
    shared = evaluate_rules(steps["Speculative server with the candidate flags"],
                            {**base, "spec_srv": _vllm_server({"lm_head": _share("shared", "unconditional")})})
    assert ("lm_head_sharing", "supported") in [(h, v) for h, v, _, _ in shared]
    for decisions in (None, {"lm_head": None}, {"lm_head": _share("shared", "missing")}):  # SGLang; no line; none
        hits = evaluate_rules(steps["Speculative server with the candidate flags"],
                              {**base, "spec_srv": {**_vllm_server(decisions)}})
        assert "lm_head_sharing" not in [h for h, _v, _, _ in hits], decisions


def test_the_fixed_servers_logged_aux_layers_support_the_wiring_fix() -> None:
    steps = _steps()
    dt = {**DT, "best": {"wiring": [0, 6, 11]}}
    line = "Using auxiliary layers from speculative config: (0, 6, 11)"
    served = {"aux_layers": {"layers": [0, 6, 11], "source": "speculative config", "line": line}}
    hits = evaluate_rules(steps["Restart with the fix"], {"dt": dt, "fixed_srv": _vllm_server(served)})
    assert [(h, v) for h, v, _, _ in hits] == [("wiring", "supported")]
    assert hits[0][3] == f"the fixed server at start-up: {line}"
    other = {"aux_layers": {**served["aux_layers"], "layers": [2, 6, 9]}}
    for fixed_srv in (_vllm_server(other), _vllm_server(None), _server(True)):
        assert evaluate_rules(steps["Restart with the fix"], {"dt": dt, "fixed_srv": fixed_srv}) == []


def test_ids_vllm_cannot_feed_confirm_the_convention_and_a_fix_that_serves_is_verified_on_the_baseline() -> None:
    """vLLM 0.32.0 (V1 runner) reads sglang-ids' nested [-1, 5, 10] as given: nothing is served (every request
    HTTP 500), the draft test has no served wiring (``server`` None) and calls the best wiring the mismatch. The
    layer_id_convention reason used to fail on the missing served score (the rule errored, no hypothesis moved);
    the fix, which serves, is verified against the baseline."""
    steps = _steps()
    row = {"wiring": [0, 6, 11], "tau_serving": 3.36, "tau_serving_ci": [2.53, 4.19], "beats_server": True,
           "vs_server": None}
    dt = {"failed": False, "decision": "mismatch", "server_wiring": None, "server": None, "wirings": [row],
          "best": row, "verdict": "vLLM would feed hidden states outside the target, so it serves nothing"}
    inspect = {**INSPECT, "feeds": {"sglang": [0, 6, 11], "vllm": None}}
    variables = {"engine": "vllm", "vllm_engines": ["vllm", "lab-vllm"], "candidate_flags": FLAGS,
                 "inspect": inspect, "dt": dt}
    hits = {h: (v, why) for h, v, _, why in evaluate_rules(steps["Standalone draft test over candidate wirings"],
                                                           variables)}
    # supported: only the fix's benchmark confirms a root cause (issue 26), below
    assert hits["wiring"][0] == "supported" and hits["layer_id_convention"][0] == "supported", hits
    assert "vs nothing served" in hits["layer_id_convention"][1]
    failed_bench = {"status": "failed", "failed": True, "skipped": False, "tok_s": None, "completed": 0,
                    "server_error": SERVER_ERROR}
    variables.update({"fixed_flags": FIXED, "base_srv": _server(True), "base": _bench(2.0, 1.0),
                      "spec_srv": _vllm_server(None), "spec": failed_bench, "fixed_srv": _server(True),
                      "fixed": _bench(5.0, 3.6)})
    _run_sets(steps, variables)
    assert variables["weighed"]["fix_verified"] is True
    # the candidate accepted nothing: a fix whose accept length clears 1 + margin on its interval recovered it, so
    # the wiring is the root cause (verified), and the convention whose reading the fix serves with it
    hits = {h: (v, why) for h, v, _, why in evaluate_rules(steps["Benchmark the fix"], variables)}
    assert hits["wiring"][0] == "confirmed", hits
    because = hits["wiring"][1]
    assert because.startswith("the candidate flags never served; the fix serves: accept length 3.6 [3.50, 3.70]")
    assert "vs baseline 2.0 [1.00, 3.00]" in because and "fix verified: above the 1.2" in because
    weighed = {h: v for h, v, _, _ in evaluate_rules(steps["Weigh the evidence"], {
        **variables, "hypothesis_state": {"wiring": "confirmed", "layer_id_convention": "supported"}})}
    assert weighed["layer_id_convention"] == "confirmed"
    # a fix that serves but accepts no more than a server that accepts nothing verifies nothing
    for fixed in (_bench(5.0, 1.15), {**_bench(5.0, 1.5), "accept_length_ci": None}):
        hits = {h: (v, why) for h, v, _, why in evaluate_rules(steps["Benchmark the fix"], {**variables,
                                                                                           "fixed": fixed})}
        assert hits["wiring"][0] == "inconclusive", hits
        if fixed["accept_length_ci"]:
            assert "fix not verified: not clearly above the 1.2" in hits["wiring"][1]
    # the speculative server did not start at all (its benchmark skipped): the same bar
    started = {**variables, "spec_srv": _server(False), "spec": SKIPPED}
    hits = {h: v for h, v, _, _ in evaluate_rules(steps["Benchmark the fix"], started)}
    assert hits["wiring"] == "confirmed", hits


def test_a_d2t_of_target_ids_read_through_its_offsets_lets_the_fix_verify_the_wiring_under_it() -> None:
    """direct-d2t on real vLLM: every request of the candidate fails (its d2t sends drafted tokens past the
    vocabulary), and the draft test, which read the map through its derived offsets (``parts.d2t_derived``),
    finds the seed's wiring fault under it. The derived fix serves both; clearing 1 + margin verifies the wiring,
    and the reason shows the offline split. Without the derived reading, a candidate that served nothing for a
    reason the draft test does not account for verifies no wiring."""
    steps = _steps()
    best = {"wiring": [0, 6, 11], "tau_serving": 3.42, "tau_serving_ci": [2.90, 3.94], "beats_server": True}
    server = {"wiring": [2, 6, 9], "tau_serving": 1.76, "tau_serving_ci": [1.50, 2.03]}
    derived = {"reason": "distinct values that are not offsets", "note": "d2t holds target ids"}
    dt = {"failed": False, "decision": "mismatch", "server_wiring": [2, 6, 9], "server": server,
          "wirings": [best, server], "best": best, "verdict": "draft scores best on [0, 6, 11]",
          "parts": {"d2t_derived": derived}}
    failed_bench = {"status": "failed", "failed": True, "skipped": False, "tok_s": None, "completed": 0,
                    "server_error": SERVER_ERROR}
    variables = {"engine": "vllm", "vllm_engines": ["vllm", "lab-vllm"], "candidate_flags": FLAGS,
                 "inspect": INSPECT, "dt": dt, "fixed_flags": FIXED, "base_srv": _server(True),
                 "base": _bench(2.0, 1.0), "spec_srv": _vllm_server(None), "spec": failed_bench,
                 "fixed_srv": _server(True), "fixed": _bench(5.0, 4.19)}
    _run_sets(steps, variables)
    hits = {h: (v, why) for h, v, _, why in evaluate_rules(steps["Benchmark the fix"], variables)}
    assert hits["wiring"][0] == "confirmed", hits
    assert "fix verified: above the 1.2" in hits["wiring"][1]
    assert "with the d2t mended, the served wiring accepts 1.76 [1.50, 2.03] against 3.42 [2.90, 3.94]" \
        in hits["wiring"][1]
    # the fix that does not clear the bar leaves the wiring inconclusive, said so
    low = {h: (v, why) for h, v, _, why in evaluate_rules(steps["Benchmark the fix"],
                                                          {**variables, "fixed": _bench(5.0, 1.15)})}
    assert low["wiring"][0] == "inconclusive" and "fix not verified" in low["wiring"][1], low
    # the same draft test without the derived reading: the candidate's failure is not the wiring's doing
    plain = {**variables, "dt": {**dt, "parts": {}}}
    hits = {h: v for h, v, _, _ in evaluate_rules(steps["Benchmark the fix"], plain)}
    assert "wiring" not in hits, hits
