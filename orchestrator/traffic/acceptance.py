"""Acceptance of a replayed traffic file, per category and per sampling setting, from one benchmark.

The request is the unit (tokens inside one answer are not independent): a group's accept length is the mean of
its requests' accept lengths with the t interval of that mean, cut at 1 (an accept length is at least 1). A group
of fewer than ``MIN_REQUESTS`` requests is said to be too few, with no interval: a t interval on one or two requests
spans the whole scale and tells nothing apart. Groups whose intervals are disjoint differ; the lowest group is
named when its interval lies wholly below every other decided group's (``lowest_apart``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from remote_probes.evaluation.interval_stats import mean_interval

MIN_REQUESTS = 3


def groups(rows: Iterable[Mapping[str, Any]], key: str, confidence: float = 0.95,
           failed: Iterable[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """One entry per value of ``rows[i][key]`` (first-seen order): requests, measured ones, accept length and its
    interval, tokens per second over the group's requests, and ``too_few`` when no interval is given. ``failed``:
    the requests that got no answer (``{key, error}``), counted in their group with the first error said."""
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
        out.append({key: name, "requests": len(members) + len(lost), "measured": len(accepts),
                    "failed": len(lost), "error": str(lost[0].get("error")) if lost else None,
                    "accept_length": round(sum(accepts) / len(accepts), 4) if accepts else None,
                    "accept_length_ci": iv.as_list() if iv is not None else None,
                    "too_few": few, "tok_s": round(tokens / latency, 2) if latency > 0 else None})
    return out


def lowest_apart(entries: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    """The group whose whole interval lies below every other decided group's interval, if one does (two or more
    decided groups needed): the category (or setting) the draft serves worst, told apart on intervals."""
    decided = [e for e in entries if e.get("accept_length_ci")]
    if len(decided) < 2:
        return None
    low = min(decided, key=lambda e: e["accept_length_ci"][1])
    others = [e for e in decided if e is not low]
    if all(low["accept_length_ci"][1] < e["accept_length_ci"][0] for e in others):
        best = max(others, key=lambda e: e["accept_length"])
        return {key: low[key], "accept_length": low["accept_length"], "accept_length_ci": low["accept_length_ci"],
                "against": best[key], "against_accept_length": best["accept_length"],
                "against_ci": best["accept_length_ci"]}
    return None


def traffic_acceptance(rows: Sequence[Mapping[str, Any]], failed: Sequence[Mapping[str, Any]] = (),
                       confidence: float = 0.95) -> dict[str, Any]:
    """``by_category``, ``by_sampling`` and what is told apart, from per-request rows that carry ``category``,
    ``sampling`` and ``accept_length`` (None where the server gave none), and the requests that failed."""
    by_category = groups(rows, "category", confidence, failed)
    by_sampling = groups(rows, "sampling", confidence, failed)
    return {"by_category": by_category, "by_sampling": by_sampling,
            "lowest_category": lowest_apart(by_category, "category"),
            "lowest_sampling": lowest_apart(by_sampling, "sampling")}


def acceptance_line(label: str, table: Mapping[str, Any], key: str = "category") -> str:
    """``bench spec by category: code 3.12 [2.80, 3.44] (12) · prose 2.01 [1.75, 2.27] (10) · de too few (2)``"""
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
            parts.append(f"{e[key]} {e['accept_length']:.2f} [{lo:.2f}, {hi:.2f}] ({e['measured']})")
    low = table.get(f"lowest_{key}")
    tail = (f"; {low[key]} lowest, apart from every other {key} on 95% intervals" if low else "")
    return f"bench {label} by {key}: " + " · ".join(parts) + tail + "\n"
