"""Confidence intervals for the figures evidence rules compare (standard library only; pushed with the probes).

Every such figure is a ratio of sums over independent units: accepted tokens / verify cycles over the prompts of
a draft test, completion tokens / verify forwards over the requests of a benchmark. Tokens inside one prompt are
not independent (an easy prompt is easy from start to end), so the unit is the prompt (or request), never the
token: counting tokens as independent would give intervals far too narrow and verdicts that flip with the sample.

Method: the ratio estimator ``R = sum(y) / sum(x)`` with its linearised (delta-method) standard error clustered by
unit, ``se^2 = sum((y_i - R x_i)^2) / (n (n - 1) mean(x)^2)``, and a Student-t quantile with n - 1 degrees of
freedom (Cochran, *Sampling Techniques*, 3rd ed., 6.9). It is deterministic (no resampling seed can change a
verdict), cheap, and the t quantile widens the interval honestly when there are only a handful of prompts, where a
percentile bootstrap is known to be too narrow. Two ratios measured on the SAME units (two wirings scored on the
same prompts) are compared by the same linearisation applied to their log ratio, so the prompt-to-prompt
variation they share cancels out: the paired interval is much narrower than two overlapping marginal ones.

Public API: ``Interval``, ``t_quantile(p, df)``, ``ratio_interval(ys, xs, confidence)``,
``paired_ratio_interval(y1, x1, y2, x2, confidence)``, ``mean_interval(values, confidence)``,
``units_to_reach(n, half_width, wanted_half_width)``.
"""

from __future__ import annotations

import functools
import math
from typing import Dict, List, Optional, Sequence

CONFIDENCE = 0.95


class Interval:
    """An estimate with a two-sided confidence interval over ``n`` units (``lo``/``hi`` None when n < 2)."""

    __slots__ = ("estimate", "lo", "hi", "n", "se", "confidence")

    def __init__(self, estimate: float, lo: Optional[float], hi: Optional[float], n: int, se: Optional[float],
                 confidence: float) -> None:
        self.estimate, self.lo, self.hi, self.n, self.se, self.confidence = estimate, lo, hi, n, se, confidence

    @property
    def decided(self) -> bool:
        return self.lo is not None and self.hi is not None

    def overlaps(self, other: "Interval") -> bool:
        """True when the two intervals share a point (or either is undecided: then nothing can be told apart)."""
        if self.lo is None or self.hi is None or other.lo is None or other.hi is None:  # not decided
            return True
        return self.lo <= other.hi and other.lo <= self.hi

    def within(self, low: Optional[float] = None, high: Optional[float] = None) -> "Interval":
        """This interval cut to its quantity's range (an accept length is >= 1, a rate in [0, 1]): the t interval of
        a quantity near its bound reaches past it, and the true value never lies there."""
        lo = self.lo if self.lo is None or low is None else max(low, self.lo)
        hi = self.hi if self.hi is None or high is None else min(high, self.hi)
        return Interval(self.estimate, lo, hi, self.n, self.se, self.confidence)

    def as_list(self, digits: int = 4) -> Optional[List[float]]:
        if self.lo is None or self.hi is None:  # not decided
            return None
        return [round(self.lo, digits), round(self.hi, digits)]

    def to_dict(self, digits: int = 4) -> Dict[str, object]:
        return {"estimate": round(self.estimate, digits), "ci": self.as_list(digits), "n": self.n,
                "se": None if self.se is None else round(self.se, digits), "confidence": self.confidence}

    def __repr__(self) -> str:
        return "Interval(%.4g, %s, n=%d)" % (self.estimate, self.as_list(), self.n)


# ---------------------------------------------------------------- Student t, from the regularised incomplete beta
def _beta_cf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / (c if abs(c) > tiny else tiny)
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / (c if abs(c) > tiny else tiny)
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_cf(a, b, x) / a
    return 1.0 - front * _beta_cf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with ``df`` degrees of freedom (bisection on the exact CDF)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError("t_quantile needs 0 < p < 1 and df > 0")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


@functools.lru_cache(maxsize=512)
def _t(confidence: float, n: int) -> float:
    # a bisection on the exact CDF costs ~1 ms; a draft test asks for the same few (confidence, n) hundreds of times
    return t_quantile(0.5 + confidence / 2.0, n - 1)


# ---------------------------------------------------------------- intervals
def ratio_interval(ys: Sequence[float], xs: Sequence[float], confidence: float = CONFIDENCE,
                   low: Optional[float] = None, high: Optional[float] = None) -> Optional[Interval]:
    """``sum(ys) / sum(xs)`` over units with its interval; None when ``sum(xs) == 0`` (nothing measured).

    Units with x == 0 (a prompt that produced no cycle) carry no information and are dropped. ``low``/``high``:
    the quantity's range, where the interval is cut (``Interval.within``).
    """
    pairs = [(float(y), float(x)) for y, x in zip(ys, xs) if x]  # noqa: B905 (py3.9 hosts)
    n = len(pairs)
    if n == 0:
        return None
    sx = sum(x for _, x in pairs)
    r = sum(y for y, _ in pairs) / sx
    if n < 2:
        return Interval(r, None, None, n, None, confidence)
    mean_x = sx / n
    se = math.sqrt(sum((y - r * x) ** 2 for y, x in pairs) / (n * (n - 1))) / mean_x
    half = _t(confidence, n) * se
    return Interval(r, r - half, r + half, n, se, confidence).within(low, high)


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE, low: Optional[float] = None,
                  high: Optional[float] = None) -> Optional[Interval]:
    """The mean of ``values`` with its t interval (a ratio with every x = 1), cut to ``[low, high]``."""
    return ratio_interval(values, [1.0] * len(values), confidence, low, high)


def paired_ratio_interval(y1: Sequence[float], x1: Sequence[float], y2: Sequence[float], x2: Sequence[float],
                          confidence: float = CONFIDENCE) -> Optional[Interval]:
    """R1 / R2 for two ratios measured on the same units, with its interval (log scale, then back).

    None when either ratio is zero or undefined.
    """
    rows = [(float(a), float(b), float(c), float(d)) for a, b, c, d in zip(y1, x1, y2, x2)]  # noqa: B905
    n = len(rows)
    sy1, sx1, sy2, sx2 = (sum(r[i] for r in rows) for i in range(4))
    if n == 0 or not (sy1 and sx1 and sy2 and sx2):
        return None
    r1, r2 = sy1 / sx1, sy2 / sx2
    ratio = r1 / r2
    if n < 2:
        return Interval(ratio, None, None, n, None, confidence)
    # influence of unit i on log R: (y_i - R x_i) / mean(y); the difference of the two is the paired influence
    m1, m2 = sy1 / n, sy2 / n
    diffs = [(a - r1 * b) / m1 - (c - r2 * d) / m2 for a, b, c, d in rows]
    se = math.sqrt(sum(v * v for v in diffs) / (n * (n - 1)))
    half = _t(confidence, n) * se
    log_ratio = math.log(ratio)
    return Interval(ratio, math.exp(log_ratio - half), math.exp(log_ratio + half), n, se, confidence)


def units_to_reach(n: int, half_width: float, wanted_half_width: float, confidence: float = CONFIDENCE,
                   cap: int = 100000) -> Optional[int]:
    """How many units would shrink ``half_width`` (seen with ``n``) below ``wanted_half_width``, assuming the
    spread per unit stays as measured (half width ~ t(n-1) / sqrt(n)); None when no number up to ``cap`` would."""
    if wanted_half_width <= 0 or n < 2:
        return None
    if half_width < wanted_half_width:
        return n
    per_unit = half_width * math.sqrt(n) / _t(confidence, n)  # the spread of one unit, t removed
    guess = n
    while guess <= cap:
        guess = max(guess + 1, int(math.ceil((per_unit * _t(confidence, max(guess, 2)) / wanted_half_width) ** 2)))
        if per_unit * _t(confidence, guess) / math.sqrt(guess) < wanted_half_width:
            return guess
    return None
