"""Acceptance metrics for greedy chain speculative decoding, from per-anchor correctness (stdlib only).

``hits[t][k]`` is True when the draft's step-k proposal from anchor column t equals the target's greedy token
x_{t+2+k}, None when that token lies beyond the known sequence. Definitions (research/eagle3-draft-spec.md):
acc_k = P(step k right | teacher-forced); alpha_k = P(step k right | steps 0..k-1 right); per-position tau =
mean over anchors of 1 + (longest all-right prefix, <= K); serving tau = tokens per verify cycle when the
decoder really jumps ahead by the accepted length + 1 (SGLang's accept length, bonus token included).

Each prompt gets its own ``Tally``; ``summarize`` adds them up and gives every figure a confidence interval with
the prompt as the unit (interval_stats), since tokens of one prompt are not independent.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from remote_probes.evaluation.interval_stats import CONFIDENCE, mean_interval, ratio_interval

Hits = List[List[Optional[bool]]]


class Tally:
    """Sums over prompts; ``summary()`` gives the figures."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.right = [0] * steps
        self.seen = [0] * steps
        self.cond_right = [0] * steps
        self.cond_seen = [0] * steps
        self.tau_sum = 0
        self.anchors = 0
        self.tokens = 0
        self.cycles = 0
        # served per-position acceptance (vLLM's per-position counters): verify cycles whose draft position k was
        # accepted, i.e. whose accepted prefix is longer than k
        self.pos_right = [0] * steps

    def add(self, hits: Hits, first_anchor: int) -> None:
        """Add one sequence; anchors before ``first_anchor`` (prompt columns) are not decode steps."""
        k_max = self.steps
        for row in hits[first_anchor:]:
            prefix_ok = True
            for k in range(k_max):
                if row[k] is None:
                    break
                self.seen[k] += 1
                self.right[k] += bool(row[k])
                if prefix_ok:
                    self.cond_seen[k] += 1
                    self.cond_right[k] += bool(row[k])
                prefix_ok = prefix_ok and bool(row[k])
            if all(v is not None for v in row[:k_max]):
                self.tau_sum += 1 + accepted(row, k_max)
                self.anchors += 1
        t = first_anchor
        while t < len(hits) and hits[t] and hits[t][0] is not None:
            m = accepted(hits[t], k_max)
            self.tokens += m + 1
            self.cycles += 1
            for k in range(m):
                self.pos_right[k] += 1
            t += m + 1

    def summary(self) -> Dict[str, object]:
        def ratio(a: int, b: int) -> Optional[float]:
            return round(a / b, 4) if b else None

        return {
            "acc": [ratio(r, s) for r, s in zip(self.right, self.seen)],  # noqa: B905 (py3.9 hosts)
            "alpha": [ratio(r, s) for r, s in zip(self.cond_right, self.cond_seen)],  # noqa: B905
            "tau": ratio(self.tau_sum, self.anchors),
            "tau_serving": ratio(self.tokens, self.cycles),
            "per_position": [ratio(r, self.cycles) for r in self.pos_right],
            "anchors": self.anchors,
            "cycles": self.cycles,
        }


def summarize(tallies: Sequence[Tally], confidence: float = CONFIDENCE) -> Dict[str, object]:
    """The pooled figures of per-prompt tallies, each with its interval over prompts (``*_ci``: [lo, hi] or None
    with fewer than two prompts), and ``prompts``: how many prompts carry the figures."""
    if not tallies:
        raise ValueError("summarize needs at least one tally")
    steps = tallies[0].steps
    total = Tally(steps)
    for t in tallies:
        for name in ("right", "seen", "cond_right", "cond_seen", "pos_right"):
            setattr(total, name, [a + b for a, b in zip(getattr(total, name), getattr(t, name))])  # noqa: B905
        total.tau_sum += t.tau_sum
        total.anchors += t.anchors
        total.tokens += t.tokens
        total.cycles += t.cycles
    out = total.summary()

    def ci(ys: List[float], xs: List[float], low: float = 0.0, high: Optional[float] = 1.0) -> Optional[List[float]]:
        iv = ratio_interval(ys, xs, confidence, low, high)
        return iv.as_list() if iv is not None else None

    # an accept length is at least 1 (the verified token), a rate lies in [0, 1]
    out["tau_serving_ci"] = ci([t.tokens for t in tallies], [t.cycles for t in tallies], 1.0, None)
    out["tau_ci"] = ci([t.tau_sum for t in tallies], [t.anchors for t in tallies], 1.0, None)
    out["acc_ci"] = [ci([t.right[k] for t in tallies], [t.seen[k] for t in tallies]) for k in range(steps)]
    out["alpha_ci"] = [ci([t.cond_right[k] for t in tallies], [t.cond_seen[k] for t in tallies])
                       for k in range(steps)]
    # what a benchmark reports: the mean over requests of each request's accept length (not the pooled ratio)
    out.update(_request_mean(tallies, confidence))
    out["per_position_ci"] = [_rate_ci(ci([t.pos_right[k] for t in tallies], [t.cycles for t in tallies]))
                              for k in range(steps)]
    out["prompts"] = sum(1 for t in tallies if t.cycles)
    return out


def _request_mean(tallies: Sequence[Tally], confidence: float) -> Dict[str, object]:
    per = [t.tokens / t.cycles for t in tallies if t.cycles]
    iv = mean_interval(per, confidence, low=1.0) if per else None
    return {"tau_request": round(iv.estimate, 4) if iv is not None else None,
            "tau_request_ci": iv.as_list() if iv is not None else None}


def _rate_ci(bounds: Optional[List[float]]) -> Optional[List[float]]:
    """A rate lies in [0, 1]: the t interval of a rate near a bound reaches past it, and is cut there."""
    return [max(0.0, bounds[0]), min(1.0, bounds[1])] if bounds else None


#: prompt-length buckets (prompt tokens, lower bound inclusive): a fault that grows with context shows as a falling
#: acceptance from bucket to bucket
LENGTH_EDGES = (0, 32, 128, 512, 2048, 8192)


def by_length(tallies: Sequence[Tally], prompt_lens: Sequence[int], confidence: float = CONFIDENCE) -> List[Dict[str, object]]:
    """Serving tau per prompt-length bucket, each with its interval over the bucket's prompts."""
    out: List[Dict[str, object]] = []
    edges: List[Optional[int]] = [*LENGTH_EDGES, None]
    for lo, hi in zip(edges[:-1], edges[1:]):  # noqa: B905
        low = lo or 0
        idx = [i for i, n in enumerate(prompt_lens) if n >= low and (hi is None or n < hi)]
        if not idx:
            continue
        iv = ratio_interval([tallies[i].tokens for i in idx], [tallies[i].cycles for i in idx], confidence, low=1.0)
        out.append({"bucket": [low, hi], "prompts": len(idx), "tau_serving": round(iv.estimate, 4) if iv else None,
                    "tau_serving_ci": iv.as_list() if iv is not None else None,
                    **_request_mean([tallies[i] for i in idx], confidence)})
    return out


def accepted(row: List[Optional[bool]], k_max: int) -> int:
    """Longest all-right prefix of the K proposals (unknown tokens end it)."""
    m = 0
    for v in row[:k_max]:
        if not v:
            break
        m += 1
    return m
