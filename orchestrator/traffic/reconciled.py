"""A traffic replay reconciled with its offline prediction, per category and per sampling setting (issue 40).

The reconcile's probe (remote_probes/evaluation/draft_reconcile.py with ``requests``) replays each greedy request
of the file offline as the server serves it and gives its accept length; here those are grouped exactly as the
server's measurements are (acceptance.py) and each group's two 95% intervals are set side by side: disjoint is a
discrepancy (the server serves that group otherwise than the offline model of it), overlapping is reconciled. A
request the probe does not model is not predicted (it says why: a sampled one on SGLang, a min_p one on vLLM) and a
group with none predicted, or none answered by the server (``failed``, ``error``: the server's refusal), stays
undecided.

For a category below the best-served one whose prompts are longer (acceptance.py ``longer_than_best``), the probe
replays its greedy requests again with their prompts cut to the best category's mean length (``keep_last``);
``cut_to_length`` gives, per such category, the cut requests' accept length beside the whole ones' with their paired
gain: what the category owes to its length rather than its content.

For a category below the best-served one, its chat requests are replayed again without their chat template (the
messages' text alone): ``without_template`` gives, per such category, that replay beside the templated one with their
paired gain: what the category owes to a template the draft never learned.

For each category below the best-served one, ``confidence_matched`` sets the draft's first proposal on its tokens
beside what the draft reaches on the best category's tokens of the same target confidence (the probe's
``first_step``: remote_probes/evaluation/confidence_match.py): a draft that never learned the category is right less
often than that at matched confidence; a category whose text the target itself is less sure of trails at the same
matched rate (the standardised ratio, observed over expected, with its 95% interval over the category's requests).

For a penalised setting the probe also scores the draft with its logits penalised as the target's (the engine
change that would mend a penalty's cost: both engines propose unpenalised); ``draft_penalised`` gives, per such
setting, that counterfactual beside the served prediction with their paired gain over the same requests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.traffic.acceptance import groups
from orchestrator.traffic.requests import TrafficRequest
from remote_probes.evaluation.confidence_match import BIN_EDGES
from remote_probes.evaluation.interval_stats import mean_interval, paired_ratio_interval, ratio_interval


def _disjoint(a: Sequence[float] | None, b: Sequence[float] | None) -> bool | None:
    if not a or not b:
        return None
    return a[1] < b[0] or b[1] < a[0]


def _fmt(value: float | None, ci: Sequence[float] | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else f"{value:.2f} (too few)"


def side_by_side(predicted: list[dict[str, Any]], measured: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """One row per measured group: its prediction, its measurement and whether their intervals are disjoint."""
    by_name = {e[key]: e for e in predicted}
    rows = []
    for m in measured:
        p = by_name.get(m[key]) or {}
        rows.append({key: m[key], "predicted": p.get("accept_length"), "predicted_ci": p.get("accept_length_ci"),
                     "predicted_requests": p.get("measured", 0), "measured": m.get("accept_length"),
                     "measured_ci": m.get("accept_length_ci"), "measured_requests": m.get("measured", 0),
                     "failed": m.get("failed", 0), "error": m.get("error"),
                     "disjoint": _disjoint(p.get("accept_length_ci"), m.get("accept_length_ci"))})
    return rows


def _paired(pairs: Sequence[tuple[float, float]], name: str, confidence: float) -> dict[str, Any]:
    """(served, counterfactual) accept lengths of the same requests: both means with their intervals (cut at 1) and
    the paired gain, the ratio of the means, with its interval; the counterfactual's figures under ``name``."""
    served, other = [a for a, _ in pairs], [b for _, b in pairs]
    s_iv, o_iv = mean_interval(served, confidence, low=1.0), mean_interval(other, confidence, low=1.0)
    ones = [1.0] * len(pairs)
    gain = paired_ratio_interval(other, ones, served, ones, confidence)
    return {"requests": len(pairs), "served": round(sum(served) / len(served), 4),
            "served_ci": s_iv.as_list() if s_iv is not None else None,
            name: round(sum(other) / len(other), 4), f"{name}_ci": o_iv.as_list() if o_iv is not None else None,
            "gain": round(gain.estimate, 4) if gain is not None else None,
            "gain_ci": gain.as_list() if gain is not None else None}


def _pairs_by(per_request: Sequence[Mapping[str, Any]], requests: Sequence[TrafficRequest], group: str,
              field: str) -> dict[str, list[tuple[float, float]]]:
    """(served, ``field``) accept lengths of the requests replayed both ways, by their ``group`` (a category, a
    sampling setting)."""
    by: dict[str, list[tuple[float, float]]] = {}
    for row in per_request:
        if row.get(field) is None or row.get("accept_length") is None:
            continue
        by.setdefault(getattr(requests[int(row["index"])], group), []).append(
            (float(row["accept_length"]), float(row[field])))
    return by


def draft_penalised(per_request: Sequence[Mapping[str, Any]], requests: Sequence[TrafficRequest],
                    confidence: float = 0.95) -> list[dict[str, Any]]:
    """Per penalised setting: the served prediction, the counterfactual with the draft penalised as the target,
    and their paired gain (the mean accept length's ratio over the same requests) with its interval."""
    by = _pairs_by(per_request, requests, "sampling", "draft_penalised")
    return [{"sampling": setting, **_paired(pairs, "draft_penalised", confidence)} for setting, pairs in by.items()]


def cut_to_length(per_request: Sequence[Mapping[str, Any]], requests: Sequence[TrafficRequest],
                  confidence: float = 0.95) -> list[dict[str, Any]]:
    """Per category with requests replayed cut (``cut_accept_length``): the whole requests' offline accept length
    (``served``), the cut ones' (``cut``), the tokens kept, and their paired gain (the ratio of the means over the
    same requests)."""
    kept: dict[str, int] = {}
    for row in per_request:
        if row.get("cut_accept_length") is not None and row.get("accept_length") is not None:
            category = requests[int(row["index"])].category
            kept[category] = max(kept.get(category, 0), int(row.get("cut_prompt_tokens") or 0))
    return [{"category": category, "kept_tokens": kept[category], **_paired(pairs, "cut", confidence)}
            for category, pairs in _pairs_by(per_request, requests, "category", "cut_accept_length").items()]


def without_template(per_request: Sequence[Mapping[str, Any]], requests: Sequence[TrafficRequest],
                     confidence: float = 0.95) -> list[dict[str, Any]]:
    """Per category with chat requests replayed without their chat template (``untemplated_accept_length``): the
    templated requests' offline accept length (``served``), the untemplated ones' (``untemplated``) and their paired
    gain (the ratio of the means over the same requests)."""
    return [{"category": category, **_paired(pairs, "untemplated", confidence)}
            for category, pairs in _pairs_by(per_request, requests, "category", "untemplated_accept_length").items()]


def thinking_off(per_request: Sequence[Mapping[str, Any]], requests: Sequence[TrafficRequest],
                 confidence: float = 0.95) -> list[dict[str, Any]]:
    """Per category with chat requests replayed with their template's thinking switched off
    (``thinking_off_accept_length``; ``switch``: the chat_template_kwargs name that turned it off): the thinking
    requests' offline accept length (``served``), the switched ones' (``thinking_off``) and their paired gain."""
    switch: dict[str, str] = {}
    for row in per_request:
        if row.get("thinking_switch"):
            switch.setdefault(requests[int(row["index"])].category, str(row["thinking_switch"]))
    return [{"category": category, "switch": switch.get(category, "enable_thinking"),
             **_paired(pairs, "thinking_off", confidence)}
            for category, pairs in _pairs_by(per_request, requests, "category", "thinking_off_accept_length").items()]


def _pooled(rows: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    bins = [[0, 0] for _ in BIN_EDGES[1:]]
    for row in rows:
        for cell, (right, tokens) in zip(bins, row["first_step"]["bins"], strict=True):
            cell[0] += int(right)
            cell[1] += int(tokens)
    return bins


def _rate(bins: Sequence[Sequence[int]]) -> float | None:
    tokens = sum(t for _, t in bins)
    return round(sum(r for r, _ in bins) / tokens, 4) if tokens else None


def confidence_matched(per_request: Sequence[Mapping[str, Any]], requests: Sequence[TrafficRequest],
                       apart: Mapping[str, Any] | None, confidence: float = 0.95) -> list[dict[str, Any]]:
    """Per category below the best-served one (``apart``: acceptance.py ``below_best``): the draft's first proposal
    right on its tokens (``first_step``) against the rate it would reach doing as well as on the best category's
    tokens of the same target confidence (``expected``: each token weighted by the best category's rate in its bin;
    a token in a bin the best category has none of is left out, ``unmatched_tokens``), their ratio with its 95%
    interval over the category's requests (the best category's bin rates are taken as known: they pool its tokens),
    and the target's mean probability of its tokens per request, beside the best category's; ``bins`` and
    ``best_bins``: the pooled ``[right, tokens]`` per bin of confidence_match.BIN_EDGES (the report's chart)."""
    if not apart:
        return []
    by: dict[str, list[Mapping[str, Any]]] = {}
    for row in per_request:
        if isinstance(row.get("first_step"), dict) and row["first_step"].get("target_probability") is not None:
            by.setdefault(requests[int(row["index"])].category, []).append(row)
    best = str(apart["best"]["category"])
    if not by.get(best):
        return []
    best_bins = _pooled(by[best])
    rates = [right / tokens if tokens else None for right, tokens in best_bins]
    best_p = mean_interval([r["first_step"]["target_probability"] for r in by[best]], confidence, 0.0, 1.0)
    out = []
    for e in apart["below"]:
        mine = by.get(str(e["category"])) or []
        observed, expected, unmatched = [], [], 0
        for row in mine:
            right = wanted = 0.0
            for (r, t), rate in zip(row["first_step"]["bins"], rates, strict=True):
                if rate is None:
                    unmatched += t
                    continue
                right, wanted = right + r, wanted + t * rate
            if wanted > 0:
                observed.append(right)
                expected.append(wanted)
        if not observed:
            continue
        ratio = ratio_interval(observed, expected, confidence, low=0.0)
        p = mean_interval([r["first_step"]["target_probability"] for r in mine], confidence, 0.0, 1.0)
        bins = _pooled(mine)
        tokens = sum(t for _, t in bins) - unmatched
        out.append({"category": e["category"], "best": best, "requests": len(observed),
                    "first_step": _rate(bins), "best_first_step": _rate(best_bins),
                    "expected": round(sum(expected) / tokens, 4) if tokens else None,
                    "ratio": round(ratio.estimate, 4) if ratio is not None else None,
                    "ratio_ci": ratio.as_list() if ratio is not None and ratio.decided else None,
                    "target_probability": round(p.estimate, 4) if p is not None else None,
                    "target_probability_ci": p.as_list() if p is not None and p.decided else None,
                    "best_target_probability": round(best_p.estimate, 4) if best_p is not None else None,
                    "best_target_probability_ci": best_p.as_list() if best_p is not None and best_p.decided
                    else None, "unmatched_tokens": unmatched, "bins": bins, "best_bins": best_bins})
    return out


def reconcile_traffic(per_request: Sequence[Mapping[str, Any]], skipped: Sequence[Mapping[str, Any]],
                      requests: Sequence[TrafficRequest], bench: Mapping[str, Any],
                      confidence: float = 0.95) -> dict[str, Any]:
    """The offline prediction of one server's traffic replay beside its measurement, group by group."""
    rows = [{**requests[int(r["index"])].public(), "accept_length": r.get("accept_length")} for r in per_request]
    table = bench.get("traffic") or {}
    by_category = side_by_side(groups(rows, "category", confidence), table.get("by_category") or [], "category")
    by_sampling = side_by_side(groups(rows, "sampling", confidence), table.get("by_sampling") or [], "sampling")
    decided = [r for r in by_category + by_sampling if r["disjoint"] is not None]
    off = [r for r in decided if r["disjoint"]]
    decision = "discrepancy" if off else ("reconciled" if decided else "undecided")
    cf = draft_penalised(per_request, requests, confidence)
    cut = cut_to_length(per_request, requests, confidence)
    matched = confidence_matched(per_request, requests, table.get("below_best_category"), confidence)
    bare = without_template(per_request, requests, confidence)
    unthinking = thinking_off(per_request, requests, confidence)
    parts = [f"{r.get('category', r.get('sampling'))}: predicted {_fmt(r['predicted'], r['predicted_ci'])}, "
             f"measured {_fmt(r['measured'], r['measured_ci'])}" for r in by_category + by_sampling]
    if decision == "discrepancy":
        verdict = ("your traffic offline against the server, disjoint for "
                   + ", ".join(str(r.get("category") or r.get("sampling")) for r in off)
                   + ": the server serves these requests otherwise than the offline model of it")
    elif decision == "reconciled":
        verdict = "your traffic offline against the server: every decided group's intervals overlap"
    else:
        verdict = "your traffic offline against the server: no group has an interval on both sides"
    verdict += " (" + "; ".join(parts) + ")"
    if skipped:
        verdict += f"; {len(skipped)} request(s) not replayed offline ({skipped[0].get('reason')})"
    return {"decision": decision, "verdict": verdict, "by_category": by_category, "by_sampling": by_sampling,
            "draft_penalised": cf, "cut_to_length": cut, "confidence_matched": matched, "without_template": bare,
            "thinking_off": unthinking,
            "skipped": len(skipped), "predicted_requests": len(rows)}


def traffic_lines(name: str, rc: Mapping[str, Any]) -> list[str]:
    """The console's view (the TUI and MCP show the step's output too)."""
    lines = [f"reconcile {name} traffic: {rc['decision']}: {rc['verdict']}"]
    paired = (("draft_penalised", "sampling", "draft penalised as the target", "draft_penalised", "served"),
              ("cut_to_length", "category", "prompts cut to their last {kept_tokens} tokens", "cut", "whole"),
              ("without_template", "category", "without the chat template", "untemplated", "templated"),
              ("thinking_off", "category", "with {switch}: false", "thinking_off", "thinking"))
    for key, group, what, name, against in paired:  # a counterfactual beside the served prediction, paired
        for e in rc.get(key) or []:
            lines.append(f"  {e[group]}: {what.format(**e)} {_fmt(e[name], e[name + '_ci'])} against {against} "
                         f"{_fmt(e['served'], e['served_ci'])}, gain {_fmt(e['gain'], e['gain_ci'])}x over "
                         f"{e['requests']} request(s)")
    for e in rc.get("confidence_matched") or []:
        lines.append(f"  {e['category']}: the draft's first proposal right {_pct(e['first_step'])} of its tokens, "
                     f"{_pct(e['expected'])} if it did as on {e['best']} at the target's same confidence "
                     f"(ratio {_fmt(e['ratio'], e['ratio_ci'])}); the target's probability of its tokens "
                     f"{_fmt(e['target_probability'], e['target_probability_ci'])} against "
                     f"{_fmt(e['best_target_probability'], e['best_target_probability_ci'])} on {e['best']}")
    return lines


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"
