"""Trees in the tuner (issue 39): SGLang's tree configurations (``--speculative-num-steps`` k, ``--speculative-eagle-topk``
t > 1, ``--speculative-num-draft-tokens`` b), predicted beside the chains, on intervals.

The chain cost model (cost_model.py) prices a cycle of k draft tokens at ``t1 + c0 + c * k``: k draft steps and a
verify forward over k + 1 tokens. A tree also runs k draft steps, the later k - 1 of them over its t rows, and
verifies b tokens, so its cycle is priced ``t1 + c0 + c * k + w * (k - 1) + v * (b - k - 1)``: ``w`` what a row
step adds over a chain's step, ``v`` what each verified token beyond a chain's k + 1 adds. They are fitted by least
squares (neither below zero) over the trees benchmarked so far, with the chain model's own bootstrap draws: the tree
probe first (the widest tree of the space; alone it cannot tell w from v: w = 0 then, said in the result), then each
tree the tuner verifies, as the chain tuner refits its per-cycle cost. A tree's acceptance cannot be read off a chain's per-position profile; it comes
from the draft test, which serves each tree offline cycle by cycle on the target's own copy
(remote_probes/evaluation/spec_simulation.py ``simulate_tree``, the reconcile's probe): one accept length per
benchmark prompt, so the interval is over prompts. The tree probe's measured accept length checks that offline
figure (overlapping intervals: it holds on this host).

Public API: ``TreeConfig``, ``tree_configs(ks, topks, budgets)``, ``tree_flags(flags, config)``, ``TreeFit``,
``fit_trees(model, points)``, ``predict_tree(model, fit, config, accepts) -> TreePrediction``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.tuning.cost_model import SEED, CostFit, Request, _ci, _cycle


@dataclass(frozen=True, order=True)
class TreeConfig:
    steps: int
    topk: int
    draft_tokens: int

    @property
    def label(self) -> str:
        return f"k={self.steps} topk={self.topk} tokens={self.draft_tokens}"

    @property
    def extra_verified(self) -> int:
        """Tokens verified beyond a chain of the same steps (k + 1); negative for a budget below it."""
        return self.draft_tokens - self.steps - 1


def tree_configs(ks: Sequence[int], topks: Sequence[int], budgets: Sequence[int]) -> list[TreeConfig]:
    """Every tree SGLang serves of ``ks`` x ``topks`` (> 1) x ``budgets``: a budget of at least 2 and at most one more
    than the candidates the steps draft (above it SGLang's first draft fails: sglang_args ``_tree_rules``)."""
    from remote_probes.eagle3.tree import candidate_count

    return sorted({TreeConfig(k, t, b) for k in ks for t in topks if t > 1 for b in budgets
                   if 2 <= b <= candidate_count(k, t) + 1})


def tree_flags(flags: dict[str, Any], config: TreeConfig) -> dict[str, Any]:
    return {**flags, "speculative-num-steps": config.steps, "speculative-eagle-topk": config.topk,
            "speculative-num-draft-tokens": config.draft_tokens}


@dataclass
class TreeFit:
    w: float                                   # seconds a tree's draft step (topk rows) adds over a chain's
    v: float                                   # seconds each verified token beyond a chain's adds to a cycle
    w_ci: list[float]
    v_ci: list[float]
    points: list[TreeConfig]                   # the trees whose benchmarks fitted w and v
    draws: list[tuple[float, float]] = field(default_factory=list, repr=False)  # (w, v) per chain-model draw

    @property
    def assumption(self) -> str:
        if len(self.points) > 1:
            return ""
        return ("one tree measured: its rows' wider draft steps are not told apart from its extra verified "
                "tokens (w = 0 assumed)")


def _wv(ys: dict[TreeConfig, float]) -> tuple[float, float]:
    """(w, v) from each tree's cycle time beyond the chain model's, ``y = w * (k - 1) + v * extra`` by least squares
    without an intercept, neither below zero (one that would be is refitted without it); one tree: w = 0."""
    rows = [(c.steps - 1, c.extra_verified, y) for c, y in ys.items()]

    def only(col: int) -> float:
        den = sum(r[col] ** 2 for r in rows)
        return max(0.0, sum(r[col] * r[2] for r in rows) / den) if den else 0.0

    if len(rows) == 1:
        return (0.0, only(1)) if rows[0][1] > 0 else (only(0), 0.0)
    a11 = sum(r[0] ** 2 for r in rows)
    a12 = sum(r[0] * r[1] for r in rows)
    a22 = sum(r[1] ** 2 for r in rows)
    b1 = sum(r[0] * r[2] for r in rows)
    b2 = sum(r[1] * r[2] for r in rows)
    det = a11 * a22 - a12 * a12
    if abs(det) < 1e-12:
        return 0.0, only(1)
    w, v = (b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det
    if w < 0:
        return 0.0, only(1)
    if v < 0:
        return only(0), 0.0
    return w, v


def fit_trees(model: CostFit, points: Mapping[TreeConfig, Sequence[Request]]) -> TreeFit:
    """``w`` and ``v`` from the trees benchmarked so far, one pair per chain-model draw (their requests resampled
    beside it). :raises ValueError: no tree, or one without requests or accept lengths."""
    if not points or any(not reqs or any(r.accept_length is None or r.tokens <= 0 or r.seconds <= 0 for r in reqs)
                         for reqs in points.values()):
        raise ValueError("every tree benchmark needs completed requests with their accept length")
    chain = model.t1 + model.c0

    def excess(t1c0: float, c: float, cycles: dict[TreeConfig, float]) -> dict[TreeConfig, float]:
        return {cfg: cycle - t1c0 - c * cfg.steps for cfg, cycle in cycles.items()}

    w, v = _wv(excess(chain, model.c, {cfg: _cycle(reqs) for cfg, reqs in points.items()}))
    rng = random.Random(SEED + 1)
    draws = [_wv(excess(t1 + c0, c, {cfg: _cycle([rng.choice(list(reqs)) for _ in reqs])
                                     for cfg, reqs in points.items()}))
             for t1, c0, c, _ in model.draws]
    return TreeFit(w=w, v=v, w_ci=_ci([d[0] for d in draws]) if draws else [w, w],
                   v_ci=_ci([d[1] for d in draws]) if draws else [v, v], points=sorted(points), draws=draws)


@dataclass(frozen=True)
class TreePrediction:
    config: TreeConfig
    accept_length: float
    accept_length_ci: list[float]
    tok_s: float
    tok_s_ci: list[float]


def _cycle_of(t1: float, c0: float, c: float, w: float, v: float, config: TreeConfig) -> float:
    return t1 + c0 + c * config.steps + w * (config.steps - 1) + v * config.extra_verified


def predict_tree(model: CostFit, fit: TreeFit, config: TreeConfig, accepts: Sequence[float]) -> TreePrediction:
    """Accept length (the draft test's, per prompt) and tok/s per request for one tree, with bootstrap intervals:
    each chain-model draw with its (w, v) draw and a resample of the prompts' accept lengths."""
    if not accepts:
        raise ValueError(f"no offline accept length for {config.label}")
    mean = sum(accepts) / len(accepts)
    rng = random.Random(SEED + 2)
    accept_draws, rate_draws = [], []
    for (t1, c0, c, _), (w, v) in zip(model.draws, fit.draws or [(fit.w, fit.v)] * len(model.draws), strict=False):
        a = sum(rng.choice(accepts) for _ in accepts) / len(accepts)
        accept_draws.append(a)
        cycle = _cycle_of(t1, c0, c, w, v, config)
        rate_draws.append(a / cycle if cycle > 0 else float("inf"))
    cycle = _cycle_of(model.t1, model.c0, model.c, fit.w, fit.v, config)
    return TreePrediction(config=config, accept_length=round(mean, 4), accept_length_ci=_ci(accept_draws),
                          tok_s=round(mean / cycle, 3) if cycle > 0 else float("inf"), tok_s_ci=_ci(rate_draws))
