"""The reconcile of a benchmark with the draft test's prediction for its configuration (orchestrator/actions/
reconcile.py), on registered results: disjoint intervals are a discrepancy, overlapping ones reconcile, a missing
interval decides nothing; the served configuration is read from what the server resolved before what it was asked;
SGLang's accept histograms give the per-position counts vLLM's counters give; the offline tally counts them the same
way (remote_probes/evaluation/metrics.py)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.actions.base import StepFailed
from orchestrator.actions.reconcile import ServedBench, compare, profile_lines, served_config
from orchestrator.servers.vllm import per_position_intervals
from remote_probes.engine.server_client import _histogram_counts  # noqa: E402
from remote_probes.evaluation.metrics import Tally, by_length, summarize  # noqa: E402


def _predicted(tau: float, ci: list[float]) -> dict[str, Any]:
    return {"tau_serving": tau, "tau_serving_ci": ci, "prompts": 12, "per_position": [0.8, 0.5],
            "per_position_ci": [[0.7, 0.9], [0.4, 0.6]],
            "by_length": [{"bucket": [0, 32], "prompts": 12, "tau_serving": tau, "tau_serving_ci": ci}]}


def _bench(accept: float, ci: list[float] | None, positions: list[float] | None = None) -> dict[str, Any]:
    rows = [{"accept_length": accept + d, "prompt_tokens": 10} for d in (-0.1, 0.0, 0.1)]
    out: dict[str, Any] = {"accept_length": accept, "accept_length_ci": ci, "completed": 3, "per_request": rows,
                           "server": "spec"}
    if positions is not None:
        out["spec_decode"] = {"per_position_request": positions, "per_position_ci": [[p - 0.05, p + 0.05]
                                                                                    for p in positions]}
    return out


def test_disjoint_intervals_are_a_discrepancy_overlapping_ones_reconcile() -> None:
    far = compare(_predicted(3.4, [3.0, 3.8]), _bench(1.0, [1.0, 1.05], [0.0, 0.0]))
    assert far["decision"] == "discrepancy"
    assert "the server serves something the offline model of it does not" in far["verdict"]
    assert [r["disjoint"] for r in far["per_position"]] == [True, True]
    assert "position(s) 0, 1" in far["verdict"]
    near = compare(_predicted(3.4, [3.0, 3.8]), _bench(3.2, [2.9, 3.5], [0.78, 0.52]))
    assert near["decision"] == "reconciled" and "overlap" in near["verdict"]
    assert [r["disjoint"] for r in near["per_position"]] == [False, False]
    assert near["by_length"][0]["requests"] == 3 and near["by_length"][0]["disjoint"] is False
    assert compare(_predicted(3.4, [3.0, 3.8]), _bench(3.2, None))["decision"] == "undecided"
    assert any("disjoint" in line for line in profile_lines({**far, "server": "spec", "wiring": [2, 6, 9],
                                                              "steps": 2}))


def test_the_served_configuration_comes_from_what_the_server_resolved() -> None:
    sglang = served_config(ServedBench(
        bench={}, effective={"speculative_num_steps": 1, "speculative_algorithm": "EAGLE"},
        flags={"speculative-draft-model-path": "/d", "speculative-num-steps": 7, "lab-capture-layers": "0,6,11"}),
        "sglang")
    assert sglang == {"draft": "/d", "algorithm": "EAGLE", "steps": 1, "wiring": [0, 6, 11]}
    vllm = served_config(ServedBench(
        bench={}, flags={"speculative-config": {"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}},
        decisions={"aux_layers": {"layers": [1, 6, 9]}}), "vllm")
    assert vllm == {"draft": "/d", "algorithm": "EAGLE3", "steps": 3, "wiring": [1, 6, 9]}
    plain = served_config(ServedBench(bench={}, flags={"speculative-draft-model-path": "/d",
                                                       "speculative-num-steps": 5}), "sglang")
    assert plain["wiring"] == "served" and plain["steps"] == 5
    with pytest.raises(StepFailed, match="name no draft"):
        served_config(ServedBench(bench={}, flags={"speculative-num-steps": 5}), "sglang")


def test_sglang_histograms_count_positions_as_vllm_counters_do() -> None:
    # cycles that accepted 0, 1, 2, 3 drafts: 2, 1, 0, 1 -> position 0 accepted in 2 of 4 cycles, 1 and 2 in 1
    assert _histogram_counts([2, 1, 0, 1]) == {"drafts": 4, "accepted": [2, 1, 1]}
    assert _histogram_counts(None) is None and _histogram_counts([1]) is None and _histogram_counts([1, "x"]) is None
    rows = [{"spec_counts": _histogram_counts([2, 1, 0, 1])}, {"spec_counts": _histogram_counts([0, 0, 0, 4])}]
    stats = per_position_intervals(rows)
    assert stats["per_position_request"] == [0.75, 0.625, 0.625] and stats["per_position_n"] == 2


def test_the_offline_tally_counts_positions_as_the_server_does() -> None:
    # one prompt (first anchor 0), K = 3: the chain walk takes cycles at anchors 0 (2 accepted) and 3 (0 accepted)
    hits = [[True, True, False], [None] * 3, [None] * 3, [False, True, True], [None] * 3]
    tally = Tally(3)
    tally.add(hits, 0)
    assert (tally.cycles, tally.tokens, tally.pos_right) == (2, 4, [1, 1, 0])
    other = Tally(3)
    other.add([[True, True, True], [None] * 3, [None] * 3, [None] * 3, [True, False, False]], 0)
    out = summarize([tally, other])
    assert out["per_position"] == [round(3 / 4, 4), round(2 / 4, 4), round(1 / 4, 4)]
    assert all(0.0 <= lo <= hi <= 1.0 for lo, hi in out["per_position_ci"])
    buckets = by_length([tally, other], [10, 40])
    assert [b["bucket"] for b in buckets] == [[0, 32], [32, 128]] and [b["prompts"] for b in buckets] == [1, 1]
