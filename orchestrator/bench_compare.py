"""Comparisons of measured figures on their 95% intervals: the formatting of an interval, and two benchmarks weighed
against each other, paired by request where they pair (the same prompts in the same order: each prompt's difficulty and
length cancel) and on the marginal intervals otherwise. The verdict rules (orchestrator/verdicts/) decide with these,
and templates reach them as filters (``interval``, ``paired_gain``, ``paired_speedup``, ``accept_recovers``,
``speed_against``), so a playbook's own YAML rule weighs exactly as the flagship's code does."""

from __future__ import annotations

from typing import Any


def interval_text(value: Any, digits: int = 2) -> str:
    """``[lo, hi]`` as "[1.74, 1.90]"; anything else (no interval: fewer than two units) says so."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        return f"[{value[0]:.{digits}f}, {value[1]:.{digits}f}]"
    return "[no interval]"


def _accept_units(row: dict[str, Any]) -> tuple[float, float] | None:
    """(tokens, verify cycles) of one request: SGLang's verify_ct, or vLLM's per-request spec counters (each draft is
    a cycle that yields 1 + its accepted tokens)."""
    if row.get("verify_ct"):
        return float(row["completion_tokens"]), float(row["verify_ct"])
    counts = row.get("spec_counts") or {}
    drafts, accepted = counts.get("drafts"), counts.get("accepted")
    if isinstance(drafts, int) and drafts > 0 and isinstance(accepted, list):
        return float(drafts + sum(accepted)), float(drafts)
    return None


def _speed_units(row: dict[str, Any]) -> tuple[float, float] | None:
    """(tokens, seconds) of one request: its tok/s as a ratio, so that a benchmark's rate is sum / sum."""
    tokens, seconds = row.get("completion_tokens"), row.get("latency")
    if isinstance(tokens, (int, float)) and isinstance(seconds, (int, float)) and tokens > 0 and seconds > 0:
        return float(tokens), float(seconds)
    return None


def _paired(after: Any, before: Any, units_of: Any, confidence: float) -> dict[str, Any] | None:
    """The ratio of two benchmarks' rates (``units_of``: a request's numerator and denominator) paired by request,
    ``{"ratio", "ci", "n"}``; None when the requests do not pair (counts or prompt lengths differ, a request has no
    units) or fewer than two do."""
    from remote_probes.evaluation.interval_stats import paired_ratio_interval

    mine = after.get("per_request") if isinstance(after, dict) else None
    theirs = before.get("per_request") if isinstance(before, dict) else None
    if not isinstance(mine, list) or not isinstance(theirs, list) or len(mine) != len(theirs) or len(mine) < 2:
        return None
    pairs = list(zip(mine, theirs, strict=True))
    if any(not isinstance(a, dict) or not isinstance(b, dict) or a.get("prompt_tokens") != b.get("prompt_tokens")
           for a, b in pairs):
        return None
    units = [(units_of(a), units_of(b)) for a, b in pairs]
    if any(a is None or b is None for a, b in units):
        return None
    iv = paired_ratio_interval([a[0] for a, _ in units], [a[1] for a, _ in units],
                               [b[0] for _, b in units], [b[1] for _, b in units], confidence)
    return None if iv is None else {"ratio": round(iv.estimate, 4), "ci": iv.as_list(), "n": len(pairs)}


def paired_gain(after: Any, before: Any, confidence: float = 0.95) -> dict[str, Any] | None:
    """``after`` vs ``before`` (two bench results that sent the same prompts in the same order): the ratio of their
    accept lengths paired by request, where each request's prompt difficulty cancels out (the draft test pairs
    wirings on prompts the same way)."""
    return _paired(after, before, _accept_units, confidence)


def paired_speedup(after: Any, before: Any, confidence: float = 0.95) -> dict[str, Any] | None:
    """The same pairing for speed: ``after``'s tok/s over ``before``'s, request by request (a benchmark with and one
    without speculation, on the same prompts in the same order: each prompt's length and difficulty cancel)."""
    return _paired(after, before, _speed_units, confidence)


def accept_recovers(after: Any, before: Any, confidence: float = 0.95) -> bool:
    """A fix's benchmark (``after``) recovered the accept length over the candidate's (``before``, which served):
    the two marginal intervals are disjoint upwards, or the ratio paired by request clears 1."""
    a = after if isinstance(after, dict) else {}
    b = before if isinstance(before, dict) else {}
    mine, theirs = a.get("accept_length_ci"), b.get("accept_length_ci")
    if b.get("status") != "ok" or not mine or not theirs:
        return False
    if mine[0] > theirs[1]:
        return True
    ci = (paired_gain(a, b, confidence) or {}).get("ci")
    return isinstance(ci, list) and bool(ci) and ci[0] is not None and ci[0] > 1


def speed_against(after: Any, before: Any, confidence: float = 0.95) -> dict[str, Any]:
    """``after``'s speed against ``before``'s (a fix's benchmark against the baseline's): ``decision`` slower | faster
    (the interval excludes no change) | undecided (it includes it) | None (nothing to weigh: a benchmark has no
    interval); paired by request where the two pair (``how`` paired: ``ratio``, ``ci``, ``n``), else the two
    marginal tok/s intervals (``how`` marginal)."""
    a = after if isinstance(after, dict) else {}
    b = before if isinstance(before, dict) else {}
    out: dict[str, Any] = {"decision": None, "how": None, "tok_s": a.get("tok_s"), "tok_s_ci": a.get("tok_s_ci"),
                           "base_tok_s": b.get("tok_s"), "base_tok_s_ci": b.get("tok_s_ci")}
    paired = paired_speedup(a, b, confidence)
    ci = (paired or {}).get("ci")
    if isinstance(ci, list) and len(ci) == 2 and None not in ci:
        out.update(paired or {}, how="paired",
                   decision="slower" if ci[1] < 1 else "faster" if ci[0] > 1 else "undecided")
        return out
    mine, theirs = a.get("tok_s_ci"), b.get("tok_s_ci")
    if isinstance(mine, list) and isinstance(theirs, list) and len(mine) == len(theirs) == 2 \
            and None not in mine and None not in theirs:
        out.update(how="marginal", decision="slower" if mine[1] < theirs[0] else "faster" if mine[0] > theirs[1]
                   else "undecided")
    return out
