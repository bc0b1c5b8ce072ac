"""The statistics behind every measured verdict: intervals over prompts, paired comparisons, tiers, decisions.

Stdlib only (no torch): these run on any machine in well under a second.
"""

from __future__ import annotations

import math
import random

import pytest

from remote_probes.evaluation.draft_test import assign_tiers, decide, mark_beats_server
from remote_probes.evaluation.interval_stats import (
    mean_interval,
    paired_ratio_interval,
    ratio_interval,
    t_quantile,
    units_to_reach,
)
from remote_probes.evaluation.metrics import Tally, summarize


@pytest.mark.parametrize(("df", "expected"), [(1, 12.7062), (3, 3.1824), (5, 2.5706), (30, 2.0423), (10**6, 1.9600)])
def test_t_quantile_matches_the_tables(df: int, expected: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-3)
    assert t_quantile(0.025, df) == pytest.approx(-expected, abs=1e-3)


def _prompt(rng: random.Random, difficulty: float) -> tuple[int, int]:
    """(tokens, cycles) of one prompt: accept lengths 1..4 with a per-prompt difficulty (clustered data)."""
    cycles = rng.randint(15, 40)
    tokens = sum(1 + sum(rng.random() < difficulty for _ in range(3)) for _ in range(cycles))
    return tokens, cycles


def test_ratio_interval_covers_the_truth_about_95_percent_with_six_prompts() -> None:
    rng = random.Random(7)
    truth_tokens = truth_cycles = 0  # the population ratio, from a huge sample of the same process
    population = [_prompt(rng, rng.uniform(0.3, 0.9)) for _ in range(20000)]
    truth_tokens, truth_cycles = sum(p[0] for p in population), sum(p[1] for p in population)
    truth = truth_tokens / truth_cycles
    hits = trials = 0
    for _ in range(1500):
        sample = rng.sample(population, 6)
        iv = ratio_interval([p[0] for p in sample], [p[1] for p in sample])
        assert iv is not None and iv.decided
        hits += iv.lo <= truth <= iv.hi
        trials += 1
    coverage = hits / trials
    assert 0.88 <= coverage <= 0.99, coverage  # nominal 0.95; a token-level interval would cover far less


def test_fewer_than_two_units_give_no_interval_and_empty_gives_none() -> None:
    one = ratio_interval([10], [4])
    assert one is not None and one.estimate == 2.5 and not one.decided and one.as_list() is None
    assert ratio_interval([], []) is None and ratio_interval([3, 4], [0, 0]) is None
    assert mean_interval([2.0, 2.0, 2.0]).as_list() == [2.0, 2.0]


def test_paired_comparison_cancels_shared_prompt_difficulty() -> None:
    rng = random.Random(3)
    y1, x1, y2, x2 = [], [], [], []
    for _ in range(8):
        cycles, hard = 30, rng.uniform(1.5, 3.5)      # prompts differ a lot ...
        y1.append(hard * 1.10 * cycles)
        x1.append(cycles)
        y2.append(hard * cycles)                       # ... but wiring 1 is always 10% better on the same prompt
        x2.append(cycles)
    a, b = ratio_interval(y1, x1), ratio_interval(y2, x2)
    assert a is not None and b is not None and a.overlaps(b)  # the marginal intervals cannot tell them apart
    paired = paired_ratio_interval(y1, x1, y2, x2)
    assert paired is not None and paired.estimate == pytest.approx(1.10)
    assert 1.09 < paired.lo <= paired.hi < 1.11          # the paired one can


def test_units_to_reach_scales_with_the_square_of_the_width() -> None:
    assert units_to_reach(10, 0.2, 0.3) == 10
    n = units_to_reach(6, 0.4, 0.1)
    assert n is not None and 60 <= n <= 130            # ~ (0.4 / 0.1)^2 x 6, less the smaller t quantile
    assert units_to_reach(6, 0.4, 0.0) is None and units_to_reach(1, 0.4, 0.1) is None


def _tallies(per_prompt: list[list[int]], steps: int = 3) -> list[Tally]:
    """One Tally per prompt from accepted lengths per cycle (0..steps)."""
    out = []
    for lengths in per_prompt:
        tally = Tally(steps)
        hits = []
        for m in lengths:  # one anchor row per cycle start, then filler rows the cycle jumps over
            hits.append([k < m for k in range(steps)])
            hits.extend([[True] * steps] * m)
        tally.add(hits, 0)
        out.append(tally)
    return out


def test_summarize_pools_prompts_and_gives_every_figure_an_interval() -> None:
    summary = summarize(_tallies([[3, 3, 2, 3], [1, 0, 1, 1], [2, 3, 3, 2]]))
    assert summary["prompts"] == 3
    assert summary["tau_serving_ci"][0] < summary["tau_serving"] < summary["tau_serving_ci"][1]
    assert len(summary["acc_ci"]) == len(summary["alpha_ci"]) == 3
    assert summarize(_tallies([[3, 3]]))["tau_serving_ci"] is None  # one prompt: no interval


def _row(wiring: list[int], est: float, ci: list[float] | None, ratio: float | None = None,
         ratio_ci: list[float] | None = None) -> dict:
    return {"name": str(wiring), "wiring": wiring, "tau_serving": est, "tau": est, "tau_serving_ci": ci,
            "vs_server": None if ratio is None else {"ratio": ratio, "ratio_ci": ratio_ci}}


def _decide(rows: list[dict], server_wiring: list[int], margin: float = 0.1) -> dict:
    rows.sort(key=lambda r: -r["tau_serving"])
    assign_tiers(rows)
    server = next(r for r in rows if r["wiring"] == server_wiring)
    mark_beats_server(rows, server, margin)
    return decide("sglang", rows, rows[0], server, margin, 0.95, 6)


def test_clear_gap_is_a_mismatch_and_names_both_intervals() -> None:
    out = _decide([_row([0, 6, 11], 3.6, [3.3, 3.9], 2.2, [2.0, 2.4]), _row([2, 6, 9], 1.6, [1.5, 1.7], 1.0, [1.0, 1.0])],
                  [2, 6, 9])
    assert out["decision"] == "mismatch" and "[3.30, 3.90]" in out["verdict"] and "[1.50, 1.70]" in out["verdict"]


def test_overlapping_neighbours_are_tied_not_ranked_and_a_small_gain_is_fine() -> None:
    rows = [_row([2, 5, 9], 3.05, [2.8, 3.3], 1.03, [0.99, 1.07]), _row([2, 6, 9], 2.96, [2.7, 3.2], 1.0, [1.0, 1.0]),
            _row([0, 6, 11], 1.5, [1.4, 1.6], 0.5, [0.45, 0.55])]
    out = _decide(rows, [2, 6, 9])
    assert [r["tier"] for r in rows] == [1, 1, 2]
    assert out["decision"] == "fine" and "tied with [2, 6, 9]" in out["verdict"]


def test_a_sample_too_small_is_inconclusive_and_says_how_many_prompts_would_decide() -> None:
    rows = [_row([2, 5, 9], 3.3, [2.5, 4.1], 1.12, [0.95, 1.32]), _row([2, 6, 9], 2.95, [2.2, 3.7], 1.0, [1.0, 1.0])]
    out = _decide(rows, [2, 6, 9])
    assert out["decision"] == "inconclusive"
    assert out["prompts_to_decide"] is not None and out["prompts_to_decide"] > 6
    assert f"{out['prompts_to_decide']} prompts (now 6) would decide" in out["verdict"]


def test_a_draft_that_accepts_nothing_cannot_judge_the_wiring() -> None:
    rows = [_row([0, 6, 11], 1.02, [1.0, 1.04], 1.01, [1.0, 1.02]), _row([2, 6, 9], 1.01, [1.0, 1.03], 1.0, [1.0, 1.0])]
    assert _decide(rows, [2, 6, 9])["decision"] == "no_signal"


def test_served_wiring_outside_the_target_serves_nothing_so_a_working_wiring_is_the_mismatch() -> None:
    """vLLM 0.32.0 reads sglang-ids' nested [-1, 5, 10] as given: no layer is -1, fc gets two states, the first
    draft step fails (HTTP 500). Nothing is served (tau 1), so the draft's best wiring beating 1 + margin is a
    mismatch, and every wiring that does beats the server; one that does not leaves it undecided."""
    rows = [_row([0, 6, 11], 3.0, [2.8, 3.2]), _row([2, 6, 9], 1.05, [1.0, 1.1])]
    assign_tiers(rows)
    mark_beats_server(rows, None, 0.2)
    assert [r["beats_server"] for r in rows] == [True, False]
    out = decide("vllm", rows, rows[0], None, 0.2, 0.95, 6)
    assert out["decision"] == "mismatch" and "outside the target" in out["verdict"]
    assert not math.isnan(rows[0]["tau_serving"])
    weak = [_row([0, 6, 11], 1.3, [1.1, 1.5])]
    assign_tiers(weak)
    out = decide("vllm", weak, weak[0], None, 0.2, 0.95, 6)
    assert out["decision"] == "inconclusive" and "not above the 1.20x margin" in out["verdict"]


def test_an_interval_stays_inside_its_quantitys_range() -> None:
    """Issue 41: two requests at 1.0 and 2.9 gave an accept length of 1.96 [-4.44, 8.36]; an accept length is at
    least 1 and a rate lies in [0, 1], so the interval is cut there (the true value never lies past it)."""
    from remote_probes.evaluation.interval_stats import mean_interval, ratio_interval

    raw = mean_interval([1.0, 2.9])
    cut = mean_interval([1.0, 2.9], low=1.0)
    assert raw is not None and cut is not None and raw.lo is not None and raw.lo < 0
    assert cut.lo == 1.0 and cut.hi == raw.hi and cut.estimate == raw.estimate
    rate = ratio_interval([0, 1, 0], [5, 5, 5], low=0.0, high=1.0)
    assert rate is not None and rate.as_list()[0] == 0.0  # type: ignore[index]
    assert ratio_interval([4, 4], [2, 2], low=1.0) is not None  # no spread: nothing to cut


def test_a_bucket_of_two_requests_is_said_too_few(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.events import HostOutcome, SessionStarted, StepFinished
    from orchestrator.session.document import Table
    from orchestrator.session.reader import LoadedSession
    from orchestrator.session.report_acceptance import _length_blocks

    rc = {"name": "spec", "by_length": [{"bucket": [0, 32], "prompts": 2, "requests": 2, "predicted": 2.0,
                                         "predicted_ci": [1.0, 3.0], "measured": 1.96, "measured_ci": [1.0, 8.36]},
                                        {"bucket": [32, 128], "prompts": 10, "requests": 10, "predicted": 3.0,
                                         "predicted_ci": [2.5, 3.5], "measured": 3.1, "measured_ci": [2.6, 3.6]}]}
    step = StepFinished(step_id="s1", name="reconcile", action="reconcile", status="ok", duration=1.0,
                        results=[HostOutcome(host="lab", status="ok", result={})])
    session = LoadedSession(directory=tmp_path, events=[SessionStarted(session_id="t", playbook="p", hypotheses=[])])
    table = next(b for b in _length_blocks(session, [(step, "lab", rc)]) if isinstance(b, Table))
    assert table.rows[0][4] == "too few requests (2)" and "3.1" in table.rows[1][4]
