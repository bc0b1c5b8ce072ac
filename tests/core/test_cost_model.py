"""The tuner's cost model on requests drawn from a known truth: it recovers the host's costs, predicts every chain
length within its intervals, and follows a served per-position profile where the engine gives one."""

from __future__ import annotations

import random

import pytest

from orchestrator.actions.tune import chain_flags, requests_of, served_profile
from orchestrator.tuning.cost_model import Request, fit, geometric_rate, per_request_rate, predict

T1, C = 0.012, 0.003  # seconds per plain step, seconds each draft token adds to a cycle


def truth_rate(profile: list[float], k: int) -> float:
    return (1 + sum(profile[:k])) / (T1 + C * k)


def draw(rng: random.Random, n: int, k: int, profile: list[float], c0: float = 0.0) -> list[Request]:
    """Requests of 64 tokens whose cycles cost T1 + c0 + C k (5% noise) and accept 1 + sum r_j (5% noise)."""
    out = []
    for _ in range(n):
        accept = (1 + sum(profile[:k])) * rng.uniform(0.95, 1.05) if k else None
        cycles = 64 / (accept or 1.0)
        cost = T1 + (c0 + C * k if k else 0.0)
        out.append(Request(tokens=64, seconds=cycles * cost * rng.uniform(0.95, 1.05), accept_length=accept))
    return out


def test_a_second_chain_length_separates_the_per_cycle_cost_from_the_per_token_cost() -> None:
    """A host whose speculation costs C0 per cycle whatever k (the lab: a cycle at k = 1..5 costs about the same):
    one probe at k = 8 cannot tell C0 from C and overestimates the short chains; a benchmark at k = 2 beside it
    recovers both within intervals, and then every chain length is predicted within its interval."""
    rng = random.Random(5)
    c0 = 0.010
    profile = [0.8 ** j for j in range(1, 9)]

    def truth(k: int) -> float:
        return (1 + sum(profile[:k])) / (T1 + c0 + C * k)

    baseline, probe, short = draw(rng, 24, 0, profile, c0), draw(rng, 24, 8, profile, c0), draw(rng, 24, 2, profile, c0)
    one = fit(baseline, probe, 8)
    assert one.c0 == 0.0 and one.ks_fitted == [8]
    assert {p.k: p for p in predict(one, [1])}[1].tok_s_ci[0] > truth(1)  # the one-probe model's blind spot
    two = fit(baseline, probe, 8, points={2: short})
    assert two.ks_fitted == [2, 8]
    assert two.c0_ci[0] <= c0 <= two.c0_ci[1] and two.c_ci[0] <= C <= two.c_ci[1], (two.c0_ci, two.c_ci)
    for p in predict(two, range(1, 9)):
        # eight correlated 95% intervals: each may miss by chance, so within twice its half-width (~4 sigma)
        half = (p.tok_s_ci[1] - p.tok_s_ci[0]) / 2
        assert p.tok_s_ci[0] - half <= truth(p.k) <= p.tok_s_ci[1] + half, p
    best = max(predict(two, range(1, 9)), key=lambda p: p.tok_s)
    assert best.k == max(range(1, 9), key=truth)


def test_geometric_rate_inverts_the_accept_length() -> None:
    a = 0.7
    assert geometric_rate(sum(a ** j for j in range(6)), 5) == pytest.approx(a, abs=1e-6)
    assert geometric_rate(1.0, 5) == pytest.approx(0.0, abs=1e-6)
    assert geometric_rate(6.0, 5) == pytest.approx(1.0, abs=1e-6)


def test_the_costs_and_every_chain_length_are_recovered_within_intervals() -> None:
    rng = random.Random(7)
    profile = [0.75 ** j for j in range(1, 9)]  # a constant conditional acceptance: the geometric fallback is exact
    model = fit(draw(rng, 24, 0, profile), draw(rng, 24, 8, profile), 8)
    assert model.t1_ci[0] <= T1 <= model.t1_ci[1] and model.c_ci[0] <= C <= model.c_ci[1], (model.t1_ci, model.c_ci)
    for p in predict(model, range(1, 9)):
        assert p.tok_s_ci[0] <= truth_rate(profile, p.k) <= p.tok_s_ci[1], p
        assert not p.extrapolated
    best = max(predict(model, range(1, 9)), key=lambda p: p.tok_s)
    assert best.k == max(range(1, 9), key=lambda k: truth_rate(profile, k))


def test_a_served_per_position_profile_decides_where_a_draft_stops_paying() -> None:
    """A draft right on two tokens then lost (a curve no constant rate has): the served profile finds k = 2."""
    rng = random.Random(3)
    profile = [0.95, 0.9, 0.1, 0.05, 0.02, 0.01]
    probe = draw(rng, 24, 6, profile)
    served = fit(draw(rng, 24, 0, profile), probe, 6, per_position=profile)
    assert served.profile_source.startswith("served per position")
    ranked = sorted(predict(served, range(1, 7)), key=lambda p: -p.tok_s)
    assert ranked[0].k == 2 == max(range(1, 7), key=lambda k: truth_rate(profile, k))
    geometric = fit(draw(rng, 24, 0, profile), probe, 6)
    assert "assumption" in geometric.profile_source  # said, not hidden


def test_beyond_the_probe_is_marked_extrapolated() -> None:
    rng = random.Random(1)
    profile = [0.8 ** j for j in range(1, 13)]
    model = fit(draw(rng, 12, 0, profile), draw(rng, 12, 4, profile), 4)
    by_k = {p.k: p for p in predict(model, [2, 4, 8])}
    assert not by_k[4].extrapolated and by_k[8].extrapolated
    assert by_k[8].accept_length == pytest.approx(1 + sum(profile[:8]), rel=0.1)


def test_bad_benchmarks_are_refused_with_a_reason() -> None:
    good = [Request(tokens=10, seconds=0.1, accept_length=2.0)]
    with pytest.raises(ValueError, match="baseline and a speculative"):
        fit([], good, 2)
    with pytest.raises(ValueError, match="accept length"):
        fit(good, [Request(tokens=10, seconds=0.1)], 2)
    with pytest.raises(ValueError, match="tokens > 0"):
        fit([Request(tokens=0, seconds=0.1)], good, 2)


def test_measured_rate_is_the_ratio_of_sums_with_an_interval() -> None:
    rate, ci = per_request_rate([Request(tokens=10, seconds=1.0), Request(tokens=30, seconds=1.0)])
    assert rate == 20.0 and ci[0] <= rate <= ci[1]


def test_chain_flags_per_engine() -> None:
    sglang = chain_flags({"speculative-algorithm": "EAGLE3", "speculative-num-steps": 1}, 4)
    assert (sglang["speculative-num-steps"], sglang["speculative-eagle-topk"],
            sglang["speculative-num-draft-tokens"]) == (4, 1, 5)
    vllm = chain_flags({"speculative-config": '{"method": "eagle3", "model": "/d", "num_speculative_tokens": 7}'}, 3)
    assert vllm["speculative-config"] == {"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}
    assert served_profile({"spec_decode": {"per_position_rates": [0.9, 0.5]}}) == [0.9, 0.5]
    assert served_profile({"spec_decode": None}) is None


def counted(rng: random.Random, n: int, k: int, profile: list[float]) -> list[Request]:
    """Requests of 64 tokens drafted cycle by cycle at k tokens, with the engine's per-request counts as vLLM's
    /metrics deltas give them: drafts (cycles), and per position j the cycles whose first j + 1 tokens were
    accepted (a cycle accepts j or more with probability r_j)."""
    out = []
    for _ in range(n):
        tokens, cycles, positions = 0, 0, [0] * k
        while tokens < 64:
            u, accepted = rng.random(), 0
            while accepted < k and u < profile[accepted]:
                accepted += 1
            for j in range(accepted):
                positions[j] += 1
            tokens, cycles = tokens + accepted + 1, cycles + 1
        out.append(Request(tokens=tokens, seconds=cycles * (T1 + C * k) * rng.uniform(0.95, 1.05),
                           accept_length=tokens / cycles, drafts=cycles, accepted_per_position=tuple(positions)))
    return out


def test_served_per_request_counts_give_the_profile_with_intervals() -> None:
    """vLLM's per-position counters per request (not the geometric fit): the profile is theirs, its interval
    resamples the requests, every shorter chain is predicted from the one probe, and the cliff after two tokens (a
    curve no constant rate has) decides k = 2, where the geometric fit from the same probe would not."""
    rng = random.Random(11)
    profile = [0.95, 0.9, 0.1, 0.05, 0.02, 0.01]
    baseline, probe = draw(rng, 24, 0, profile), counted(rng, 24, 6, profile)
    model = fit(baseline, probe, 6)
    assert model.profile_source.startswith("served per position") and "per request" in model.profile_source
    for j, truth in enumerate(profile):
        assert model.profile[j] == pytest.approx(truth, abs=0.06), (j, model.profile)
    spreads = {round(d[3][0], 4) for d in model.draws}
    assert len(spreads) > 1  # resampled with the requests, not held fixed
    predictions = predict(model, range(1, 7))

    def near(ci: list[float], truth: float) -> bool:
        # six correlated 95% intervals: each may miss its truth by chance, so within twice its half-width (~4 sigma)
        half = (ci[1] - ci[0]) / 2
        return ci[0] - half <= truth <= ci[1] + half

    for p in predictions:
        assert p.accept_length_ci[1] > p.accept_length_ci[0] and near(p.accept_length_ci, 1 + sum(profile[:p.k])), p
        assert near(p.tok_s_ci, truth_rate(profile, p.k)), p
    assert max(predictions, key=lambda p: p.tok_s).k == 2
    stripped = [Request(r.tokens, r.seconds, r.accept_length) for r in probe]
    geometric = {p.k: p for p in predict(fit(baseline, stripped, 6), range(1, 7))}
    assert not near(geometric[2].tok_s_ci, truth_rate(profile, 2))  # the constant rate misses it: the counts' use


def test_a_vllm_bench_result_carries_its_counts_into_the_model() -> None:
    """The bench result as the vLLM adapter leaves it (per_request rows with spec_counts at concurrency 1)."""
    result = {"accept_length": 2.0, "spec_decode": {"per_position": [0.6, 0.3]},
              "per_request": [{"completion_tokens": 40, "latency": 1.0, "accept_length": 2.0,
                               "spec_counts": {"drafts": 20, "accepted": [13, 7]}},
                              {"completion_tokens": 38, "latency": 1.1, "accept_length": 1.9,
                               "spec_counts": {"drafts": 20, "accepted": [11, 7]}},
                              {"completion_tokens": 0, "latency": 0.1}]}
    probe = requests_of(result, speculative=True)
    assert [(r.drafts, r.accepted_per_position) for r in probe] == [(20, (13, 7)), (20, (11, 7))]
    base = requests_of({"per_request": [{"completion_tokens": 40, "latency": 2.0, "spec_counts": {"drafts": 1,
                                                                                                   "accepted": [1]}}]},
                       speculative=False)
    assert base[0].drafts is None  # a baseline has no speculation to count
    model = fit(base, probe, 2, served_profile(result))
    assert model.profile == [0.6, 0.35] and "per request" in model.profile_source
