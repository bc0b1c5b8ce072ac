"""Acceptance of a replayed traffic file, per category and per sampling setting, from one benchmark.

The request is the unit (tokens inside one answer are not independent): a group's accept length is the mean of
its requests' accept lengths with the t interval of that mean, cut at 1 (an accept length is at least 1). A group
of fewer than ``MIN_REQUESTS`` requests is said to be too few, with no interval: a t interval on one or two requests
spans the whole scale and tells nothing apart. A group whose interval lies wholly below the best-served group's is
named as served worse (``below_best``). Each group also gives its prompts' mean length in tokens with its interval
(``prompt_tokens``): a group served worse whose prompts are longer than the best group's may owe it to the length
(acceptance falls with the context's length; the verdict says so rather than blame the category).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from remote_probes.evaluation.interval_stats import mean_interval

MIN_REQUESTS = 3


def groups(rows: Iterable[Mapping[str, Any]], key: str, confidence: float = 0.95,
           failed: Iterable[Mapping[str, Any]] = (), across: str | None = None) -> list[dict[str, Any]]:
    """One entry per value of ``rows[i][key]`` (first-seen order): requests, measured ones, accept length and its
    interval, tokens per second over the group's requests, and ``too_few`` when no interval is given. ``failed``:
    the requests that got no answer (``{key, error}``), counted in their group with the first error said.
    ``across``: the other key's values among the group's measured requests (``mixes``), so that a comparison of two
    groups can tell when they differ in more than their own key."""
    by: dict[str, list[Mapping[str, Any]]] = {}
    misses: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by.setdefault(str(row.get(key)), []).append(row)
    for miss in failed:
        by.setdefault(str(miss.get(key)), [])
        misses.setdefault(str(miss.get(key)), []).append(miss)
    out = []
    for name, members in by.items():
        accepts = [float(r["accept_length"]) for r in members if r.get("accept_length") is not None]
        latency = sum(float(r.get("latency") or 0.0) for r in members)
        tokens = sum(int(r.get("completion_tokens") or 0) for r in members)
        few = len(accepts) < MIN_REQUESTS
        iv = None if few else mean_interval(accepts, confidence, low=1.0)
        lost = misses.get(name, [])
        mixes = sorted({str(r.get(across)) for r in members if r.get("accept_length") is not None}) if across else []
        lengths = [float(r["prompt_tokens"]) for r in members
                   if r.get("accept_length") is not None and isinstance(r.get("prompt_tokens"), int | float)
                   and r["prompt_tokens"] > 0]
        span = mean_interval(lengths, confidence, low=1.0) if len(lengths) >= MIN_REQUESTS else None
        out.append({key: name, "requests": len(members) + len(lost), "measured": len(accepts), "mixes": mixes,
                    "failed": len(lost), "error": str(lost[0].get("error")) if lost else None,
                    "accept_length": round(sum(accepts) / len(accepts), 4) if accepts else None,
                    "accept_length_ci": iv.as_list() if iv is not None else None,
                    "too_few": few, "tok_s": round(tokens / latency, 2) if latency > 0 else None,
                    "prompt_tokens": round(sum(lengths) / len(lengths), 1) if lengths else None,
                    "prompt_tokens_ci": span.as_list(1) if span is not None else None})
    return out


def below_best(entries: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    """The groups served worse than the best-served one: each decided group whose whole interval lies below the
    best group's interval (two or more decided groups needed). ``{"best": {...}, "below": [{...}, ...]}``, or None
    when nothing is told apart. Each group is compared with the best alone (k - 1 comparisons at 95%, not every
    pair), so a handful of groups keeps its meaning."""
    decided = [e for e in entries if e.get("accept_length_ci")]
    if len(decided) < 2:
        return None
    best = max(decided, key=lambda e: e["accept_length"])
    below = [e for e in decided if e is not best and e["accept_length_ci"][1] < best["accept_length_ci"][0]]
    if not below:
        return None

    def brief(e: dict[str, Any]) -> dict[str, Any]:
        return {key: e[key], "accept_length": e["accept_length"], "accept_length_ci": e["accept_length_ci"],
                "mixes": e.get("mixes") or [], "prompt_tokens": e.get("prompt_tokens"),
                "prompt_tokens_ci": e.get("prompt_tokens_ci")}

    return {"best": brief(best), "below": [brief(e) for e in sorted(below, key=lambda e: e["accept_length"])]}


def longer_than_best(apart: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The groups below the best whose prompts are longer than the best group's: the interval of their mean prompt
    length wholly above the best's. Each with ``keep_last``, the best group's mean length in tokens: what the
    reconcile cuts their prompts to, offline, to tell what they owe to the length from what they owe to the rest."""
    if not apart:
        return []
    best = apart["best"]
    top = best.get("prompt_tokens_ci")
    if not top or best.get("prompt_tokens") is None:
        return []
    return [{**e, "keep_last": max(1, round(float(best["prompt_tokens"])))} for e in apart["below"]
            if e.get("prompt_tokens_ci") and e["prompt_tokens_ci"][0] > top[1]]


def traffic_acceptance(rows: Sequence[Mapping[str, Any]], failed: Sequence[Mapping[str, Any]] = (),
                       confidence: float = 0.95) -> dict[str, Any]:
    """``by_category``, ``by_sampling`` and what is told apart, from per-request rows that carry ``category``,
    ``sampling`` and ``accept_length`` (None where the server gave none), and the requests that failed."""
    by_category = groups(rows, "category", confidence, failed, across="sampling")
    by_sampling = groups(rows, "sampling", confidence, failed, across="category")
    return {"by_category": by_category, "by_sampling": by_sampling,
            "below_best_category": below_best(by_category, "category"),
            "below_best_sampling": below_best(by_sampling, "sampling")}


def acceptance_line(label: str, table: Mapping[str, Any], key: str = "category") -> str:
    """``bench spec by category: code 3.12 [2.80, 3.44] (12, 48 prompt tok) · prose 2.01 [1.75, 2.27] (10, 95 prompt
    tok) · de too few (2)``: each group's requests measured and their prompts' mean length"""
    parts = []
    for e in table.get(f"by_{key}") or []:
        if e.get("failed") and not e["measured"]:
            parts.append(f"{e[key]} {e['failed']} request(s) failed ({e['error']})")
        elif e["accept_length"] is None:
            parts.append(f"{e[key]} no accept length ({e['requests']})")
        elif e["too_few"]:
            parts.append(f"{e[key]} {e['accept_length']:.2f}, too few requests ({e['measured']})")
        else:
            lo, hi = e["accept_length_ci"]
            length = f", {e['prompt_tokens']:.0f} prompt tok" if e.get("prompt_tokens") is not None else ""
            parts.append(f"{e[key]} {e['accept_length']:.2f} [{lo:.2f}, {hi:.2f}] ({e['measured']}{length})")
    apart = table.get(f"below_best_{key}")
    tail = (f"; below {apart['best'][key]} on 95% intervals: " + ", ".join(e[key] for e in apart["below"])
            if apart else "")
    return f"bench {label} by {key}: " + " · ".join(parts) + tail + "\n"
