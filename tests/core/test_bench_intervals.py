"""`bench` reports n, spread and 95% intervals, with the prompt as the unit (greedy repeats are not new evidence)."""

from __future__ import annotations

import statistics

import pytest

from orchestrator.actions.bench import with_intervals


def _result(accepts: list[float], latencies: list[float], tokens: int = 64) -> dict:
    rows = [{"accept_length": a, "latency": t, "completion_tokens": tokens} for a, t in zip(accepts, latencies, strict=True)]
    wall = sum(latencies)
    return {"n": len(rows), "completed": len(rows), "tok_s": tokens * len(rows) / wall, "per_request": rows}


def test_intervals_bracket_the_figures_and_carry_n_and_spread() -> None:
    out = with_intervals(_result([3.0, 3.4, 2.8, 3.6, 3.1, 3.3], [0.20, 0.22, 0.19, 0.25, 0.21, 0.20]), distinct=12)
    lo, hi = out["accept_length_ci"]
    assert lo < sum([3.0, 3.4, 2.8, 3.6, 3.1, 3.3]) / 6 < hi and out["accept_length_n"] == 6
    assert out["accept_length_sd"] == pytest.approx(statistics.stdev([3.0, 3.4, 2.8, 3.6, 3.1, 3.3]), abs=1e-4)
    assert out["tok_s_ci"][0] < out["tok_s"] < out["tok_s_ci"][1] and out["tok_s_sd"] > 0


def test_repeated_prompts_are_one_unit_each() -> None:
    # 8 requests over 4 prompts: request i used prompt i % 4, and greedy repeats are identical
    accepts = [2.0, 3.0, 4.0, 5.0] * 2
    out = with_intervals(_result(accepts, [0.2] * 8), distinct=4)
    assert out["accept_length_n"] == 4
    unique = with_intervals(_result([2.0, 3.0, 4.0, 5.0], [0.2] * 4), distinct=4)
    assert out["accept_length_ci"] == unique["accept_length_ci"]  # repeating a prompt narrows nothing


def test_one_request_gives_no_interval() -> None:
    out = with_intervals(_result([3.0], [0.2]), distinct=12)
    assert out["accept_length_ci"] is None and out["tok_s_ci"] is None and out["accept_length_sd"] is None


def test_the_interval_filter_prints_a_pair_or_says_there_is_none() -> None:
    from orchestrator.templating import render

    assert render("accept {{ ci | interval }}", {"ci": [1.7379, 1.9022]}) == "accept [1.74, 1.90]"
    assert render("{{ ci | interval(3) }}", {"ci": [1, 2]}) == "[1.000, 2.000]"
    assert render("{{ ci | interval }}", {"ci": None}) == "[no interval]"
