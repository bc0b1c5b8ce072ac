"""A per-host cost model of chain speculative decoding, and predictions from it, on intervals.

The model (greedy chain drafting, topk 1, the request as the unit):

- one decode cycle with k draft tokens costs ``T(k) = t1 + c0 + c * k`` seconds per request: ``t1`` is a plain
  decode step (target forward for one token plus the serving overhead), measured without speculation; ``c`` is what
  each further draft token adds to a cycle (one draft step plus the target verifying one more token); ``c0`` is what
  speculating costs per cycle whatever k (the draft's own pass over the verified tokens, the acceptance and
  KV-cache bookkeeping, the engine's per-cycle scheduling: on the lab a cycle at k = 1..5 costs about the same).
  Both engines' chain decoding (SGLang ``--speculative-num-steps k`` with ``num-draft-tokens k + 1``; vLLM
  ``num_speculative_tokens k``) run k draft forwards and one target forward over k + 1 tokens per cycle, and the
  draft's and the verifier's share of ``c`` cannot be told apart with chain configurations alone, so only their sum
  is fitted (and only it is needed). From one speculative benchmark (the probe at ``k_probe``) ``c0`` and ``c``
  cannot be told apart either: ``c0 = 0`` then, ``c = (cycle time - t1) / k_probe`` (said as an assumption, and it
  overestimates short chains when ``c0`` is large); every further benchmark at another k (the tuner's verify
  restarts) refits both by least squares over the cycle times (``fit(..., points=...)``);
- a cycle yields ``L(k) = 1 + sum_{j<=k} r_j`` tokens, ``r_j`` = P(the first j draft tokens are all accepted): the
  acceptance profile, from the engine's per-position counters where it has them (vLLM
  ``spec_decode_num_accepted_tokens_per_pos``: per request when the bench scraped them around each request, so
  the profile's interval is the requests' too; else the whole run's), else from the measured accept length at
  ``k_probe`` under a constant conditional acceptance (``r_j = a^j``; said as an assumption in the result). A
  probe at the largest chain length measures every shorter chain's positions, so one probe serves every k;
- so tok/s per request at k is ``L(k) / T(k)``, and ``1 / t1`` without speculation.

Positions beyond ``k_probe`` are extrapolated with the last measured conditional rate (marked ``extrapolated``).
Every figure carries a percentile-bootstrap interval over requests (both benchmarks resampled together, a fixed
seed so a session replays the same intervals).

Public API: ``Request``, ``CostFit``, ``served_counts(probe)``,
``fit(baseline, probe, k_probe, per_position=None, points=None)``,
``predict(fit, ks) -> list[Prediction]``, ``geometric_rate(accept_length, k)``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

BOOTSTRAP = 400
SEED = 20261201
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Request:
    """One benchmark request: tokens generated, wall seconds, and its accept length (None without speculation)."""

    tokens: int
    seconds: float
    accept_length: float | None = None
    # the engine's own counts for this request (vLLM at concurrency 1: the /metrics counters' change around it):
    # drafts, and per draft position j the drafts whose first j + 1 tokens were all accepted
    drafts: int | None = None
    accepted_per_position: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Prediction:
    k: int
    accept_length: float
    accept_length_ci: list[float]
    tok_s: float
    tok_s_ci: list[float]
    extrapolated: bool


@dataclass
class CostFit:
    t1: float                                # seconds per plain decode step
    c: float                                 # seconds each draft token adds to a cycle
    k_probe: int
    profile: list[float]                     # r_1..r_kprobe
    profile_source: str                      # "served per position" | "geometric from the accept length"
    t1_ci: list[float] = field(default_factory=list)
    c_ci: list[float] = field(default_factory=list)
    c0: float = 0.0                          # seconds speculation adds per cycle whatever k (0: one probe only)
    c0_ci: list[float] = field(default_factory=lambda: [0.0, 0.0])
    ks_fitted: list[int] = field(default_factory=list)   # the chain lengths whose benchmarks fitted c0 and c
    # the resamples behind every interval: (t1, c0, c, profile) per bootstrap draw
    draws: list[tuple[float, float, float, list[float]]] = field(default_factory=list, repr=False)


def geometric_rate(accept_length: float, k: int) -> float:
    """The constant conditional acceptance ``a`` with ``1 + a + ... + a^k = accept_length`` (bisection)."""
    target = min(max(accept_length, 1.0), k + 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid ** j for j in range(k + 1)) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _t1(baseline: Sequence[Request]) -> float:
    return sum(r.seconds for r in baseline) / sum(r.tokens for r in baseline)


def _cycle(probe: Sequence[Request]) -> float:
    """Seconds per cycle: wall time over cycles (tokens / accept length per request)."""
    return sum(r.seconds for r in probe) / sum(r.tokens / (r.accept_length or 1.0) for r in probe)


def served_counts(probe: Sequence[Request]) -> bool:
    """Whether every probe request carries the engine's per-position counts (the profile is then theirs)."""
    return bool(probe) and all(r.drafts and r.accepted_per_position is not None for r in probe)


def _counted_profile(probe: Sequence[Request], k: int) -> list[float]:
    """r_j = sum over requests of accepted at position j / sum of drafts: vLLM's own per-position rate, over the
    requests given (so a bootstrap resample of the requests resamples the profile with them)."""
    drafts = sum(r.drafts or 0 for r in probe)
    return [min(max(sum((r.accepted_per_position or ())[j] if j < len(r.accepted_per_position or ()) else 0
                        for r in probe) / drafts, 0.0), 1.0) if drafts else 0.0 for j in range(k)]


def _profile(probe: Sequence[Request], k: int, per_position: Sequence[float] | None) -> list[float]:
    if served_counts(probe):
        return _counted_profile(probe, k)
    if per_position:
        return [min(max(float(x), 0.0), 1.0) for x in per_position[:k]]
    accept = sum(r.tokens for r in probe) / sum(r.tokens / (r.accept_length or 1.0) for r in probe)
    a = geometric_rate(accept, k)
    return [a ** j for j in range(1, k + 1)]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def _ci(values: list[float]) -> list[float]:
    alpha = (1 - CONFIDENCE) / 2
    return [round(_percentile(values, alpha), 4), round(_percentile(values, 1 - alpha), 4)]


def _costs(t1: float, cycles: dict[int, float]) -> tuple[float, float]:
    """(c0, c) from the cycle time at each chain length: ``cycle(k) - t1 = c0 + c * k`` by least squares, neither
    below zero (a fit that would make one negative is refitted without it); one chain length: ``c0 = 0``."""
    ys = {k: cycle - t1 for k, cycle in cycles.items()}
    if len(ys) == 1:
        (k, y), = ys.items()
        return 0.0, y / k
    mk, my = sum(ys) / len(ys), sum(ys.values()) / len(ys)
    sxx = sum((k - mk) ** 2 for k in ys)
    c = sum((k - mk) * (y - my) for k, y in ys.items()) / sxx
    c0 = my - c * mk
    if c < 0:
        return my, 0.0
    if c0 < 0:
        return 0.0, sum(k * y for k, y in ys.items()) / sum(k * k for k in ys)
    return c0, c


def fit(baseline: Sequence[Request], probe: Sequence[Request], k_probe: int,
        per_position: Sequence[float] | None = None,
        points: Mapping[int, Sequence[Request]] | None = None) -> CostFit:
    """The cost model from a no-speculation benchmark and a speculative one at ``k_probe`` draft tokens (its
    acceptance profile); ``points``: speculative benchmarks at other chain lengths, which fit ``c0`` beside ``c``.
    :raises ValueError: an empty benchmark, a request without tokens, or a probe without accept lengths."""
    spec = {k: list(reqs) for k, reqs in (points or {}).items() if k != k_probe and reqs}
    spec[k_probe] = list(probe)
    if not baseline or not probe:
        raise ValueError("the cost model needs a baseline and a speculative benchmark with completed requests")
    if any(r.tokens <= 0 or r.seconds <= 0 for r in (*baseline, *(r for reqs in spec.values() for r in reqs))):
        raise ValueError("every request needs tokens > 0 and seconds > 0")
    if any(r.accept_length is None for reqs in spec.values() for r in reqs):
        raise ValueError("the speculative benchmark's requests need their accept length")
    if k_probe < 1 or any(k < 1 for k in spec):
        raise ValueError("k_probe must be >= 1")
    t1 = _t1(baseline)
    c0, c = _costs(t1, {k: _cycle(reqs) for k, reqs in spec.items()})
    profile = _profile(probe, k_probe, per_position)
    rng = random.Random(SEED)
    draws = []
    for _ in range(BOOTSTRAP):
        bt1 = _t1([rng.choice(baseline) for _ in baseline])
        resampled = {k: [rng.choice(reqs) for _ in reqs] for k, reqs in spec.items()}
        d0, dc = _costs(bt1, {k: _cycle(reqs) for k, reqs in resampled.items()})
        # per-request counts resample with their requests; an aggregate-only served profile is kept as it is
        draws.append((bt1, d0, dc, _profile(resampled[k_probe], k_probe, per_position)))
    source = ("served per position (the engine's counters, per request)" if served_counts(probe)
              else "served per position (the engine's counters, whole run)" if per_position
              else "geometric from the accept length (constant conditional acceptance: an assumption)")
    return CostFit(t1=t1, c=c, k_probe=k_probe, profile=profile, profile_source=source,
                   t1_ci=_ci([d[0] for d in draws]), c_ci=_ci([d[2] for d in draws]), c0=c0,
                   c0_ci=_ci([d[1] for d in draws]), ks_fitted=sorted(spec), draws=draws)


def _accept(profile: Sequence[float], k: int) -> float:
    """``1 + r_1 + ... + r_k``, the tail beyond the profile at its last conditional rate."""
    rates = list(profile[:k])
    if k > len(profile) and profile:
        last = profile[-1] / profile[-2] if len(profile) > 1 and profile[-2] > 0 else profile[-1]
        r = profile[-1]
        for _ in range(k - len(profile)):
            r *= min(max(last, 0.0), 1.0)
            rates.append(r)
    return 1.0 + sum(rates)


def _tok_s(t1: float, c0: float, c: float, profile: Sequence[float], k: int) -> float:
    cycle = t1 + (c0 + c * k if k else 0.0)
    return _accept(profile, k) / cycle if cycle > 0 else float("inf")


def predict(model: CostFit, ks: Sequence[int]) -> list[Prediction]:
    """Accept length and tok/s per request for each chain length ``k`` (0: no speculation)."""
    out = []
    for k in ks:
        accepts = [_accept(p, k) for _, _, _, p in model.draws]
        rates = [_tok_s(t1, c0, c, p, k) for t1, c0, c, p in model.draws]
        out.append(Prediction(k=k, accept_length=round(_accept(model.profile, k), 4), accept_length_ci=_ci(accepts),
                              tok_s=round(_tok_s(model.t1, model.c0, model.c, model.profile, k), 3),
                              tok_s_ci=_ci(rates),
                              extrapolated=k > model.k_probe))
    return out


def per_request_rate(requests: Sequence[Request]) -> tuple[float, list[float]]:
    """Measured tok/s per request (ratio of sums) with its bootstrap interval: comparable with ``Prediction``."""
    rng = random.Random(SEED)
    estimate = sum(r.tokens for r in requests) / sum(r.seconds for r in requests)
    draws = []
    for _ in range(BOOTSTRAP):
        sample = [rng.choice(requests) for _ in requests]
        draws.append(sum(r.tokens for r in sample) / sum(r.seconds for r in sample))
    return round(estimate, 3), _ci(draws)
