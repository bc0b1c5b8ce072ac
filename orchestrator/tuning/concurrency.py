"""The tuner's answer per concurrency (issue 39): at each concurrency of the user's profile, the fastest measured
configuration against the no-speculation baseline measured at that same concurrency, and where speculation stops
paying (the crossover).

"Pays" is decided on intervals, as the single-concurrency recommendation is (tune.py ``_recommend``): the best
configuration's per-request tok/s interval above the baseline's is "yes", below it "no", overlapping
"inconclusive". The crossover is bracketed by the profile's own points, the highest concurrency where it pays and
the next one where it does not; between them the speedup (best over baseline) is interpolated in log concurrency to
where it crosses 1 (an estimate, said as one: nothing between the two points was measured). An inconclusive point
between them leaves the crossover at it or around it, said as such, never a number the sample cannot support.

Public API: ``ConcurrencyAnswer``, ``answer(points) -> dict``, ``for_mix(entries, weights) -> dict | None``
(the one configuration to deploy for a traffic mix over the profile).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ConcurrencyAnswer:
    """One concurrency's outcome: the best measured configuration's name, its speedup over the baseline measured
    at the same concurrency, and whether it pays there on intervals ('yes' / 'no' / 'inconclusive')."""

    concurrency: int
    best: str
    speedup: float
    pays: str


def _crossing(low: ConcurrencyAnswer, high: ConcurrencyAnswer) -> float | None:
    """The concurrency where the speedup, linear in log concurrency between two measured points, is 1."""
    if low.speedup <= 1 or high.speedup >= 1 or high.concurrency <= low.concurrency:
        return None
    a, b = math.log(low.concurrency), math.log(high.concurrency)
    fraction = (low.speedup - 1) / (low.speedup - high.speedup)
    return round(math.exp(a + fraction * (b - a)), 2)


def answer(points: Sequence[ConcurrencyAnswer]) -> dict[str, object]:
    """Where speculation pays over the profile, and the crossover: ``{"pays": [...], "does_not": [...],
    "inconclusive": [...], "crossover": {"between": [a, b], "estimate": c*} | None, "line": str}``."""
    ordered = sorted(points, key=lambda p: p.concurrency)
    pays = [p.concurrency for p in ordered if p.pays == "yes"]
    loses = [p.concurrency for p in ordered if p.pays == "no"]
    unclear = [p.concurrency for p in ordered if p.pays == "inconclusive"]
    every = ", ".join(str(p.concurrency) for p in ordered)
    out: dict[str, object] = {"pays": pays, "does_not": loses, "inconclusive": unclear, "crossover": None}
    if not ordered:
        out["line"] = "tune: no concurrency measured"
        return out
    if len(pays) == len(ordered):
        out["line"] = (f"speculation pays at every concurrency of the profile ({every}): no crossover up to "
                       f"{ordered[-1].concurrency}")
        return out
    if len(loses) == len(ordered):
        out["line"] = f"speculation does not pay at any concurrency of the profile ({every})"
        return out
    first_loss = next((p for p in ordered if p.pays == "no" and pays and p.concurrency > min(pays)), None)
    if first_loss is not None:
        last_pay = max((p for p in ordered if p.pays == "yes" and p.concurrency < first_loss.concurrency),
                       key=lambda p: p.concurrency)
        between = [p.concurrency for p in ordered if last_pay.concurrency < p.concurrency < first_loss.concurrency]
        estimate = None if between else _crossing(last_pay, first_loss)
        out["crossover"] = {"between": [last_pay.concurrency, first_loss.concurrency], "estimate": estimate,
                            "inconclusive_between": between}
        out["line"] = (f"speculation pays up to concurrency {last_pay.concurrency} ({last_pay.speedup:.2f}x) and not "
                       f"at {first_loss.concurrency} ({first_loss.speedup:.2f}x): the crossover lies between them"
                       + (f", about {estimate:g} where the speedup interpolated in log concurrency crosses 1 (not "
                          "measured there)" if estimate is not None else
                          f", at or around {', '.join(map(str, between))} (inconclusive there)" if between else ""))
        return out
    said = [f"pays at {', '.join(map(str, pays))}" if pays else "",
            f"does not at {', '.join(map(str, loses))}" if loses else "",
            f"inconclusive at {', '.join(map(str, unclear))}" if unclear else ""]
    out["line"] = (f"speculation {'; '.join(s for s in said if s)} (profile {every}): no crossover decided on "
                   "these intervals")
    return out


def _name(row: dict[str, Any]) -> str:
    return str(row.get("label") or f"k={row.get('k')}")


def for_mix(entries: Sequence[dict[str, Any]], weights: dict[int, float] | None) -> dict[str, Any] | None:
    """The ONE configuration to deploy for traffic spread over the profile's concurrencies (a server runs one
    configuration at every load): each configuration measured at every concurrency scored by its per-request tok/s
    weighted by the share of traffic at each (``weights``; equal shares when None), against the baseline's the same
    way. The interval of a weighted sum is taken as the weighted sum of the intervals' ends: wider than the exact
    one, so "beats the baseline" is claimed only where even that conservative interval clears it. None without two
    concurrencies or a configuration measured at all of them."""
    if len(entries) < 2:
        return None
    concurrencies = [int(e["concurrency"]) for e in entries]
    raw = {c: float((weights or {}).get(c, 0.0 if weights else 1.0)) for c in concurrencies}
    total = sum(raw.values())
    if total <= 0:
        return None
    share = {c: w / total for c, w in raw.items()}
    measured: dict[str, dict[int, dict[str, Any]]] = {}
    for entry in entries:
        for row in entry.get("rows") or []:
            if row.get("measured_tok_s") is not None and row.get("measured_tok_s_ci"):
                measured.setdefault(_name(row), {})[int(entry["concurrency"])] = row
    every = {name: rows for name, rows in measured.items() if set(rows) == set(concurrencies)}
    if not every:
        return None

    def mixed(values: dict[int, tuple[float, float, float]]) -> tuple[float, list[float]]:
        return (sum(share[c] * v[0] for c, v in values.items()),
                [round(sum(share[c] * v[1] for c, v in values.items()), 3),
                 round(sum(share[c] * v[2] for c, v in values.items()), 3)])

    def point(rate: Any, ci: Any) -> tuple[float, float, float]:
        return float(rate), float(ci[0]), float(ci[1])

    base_rate, base_ci = mixed({int(e["concurrency"]): point(e["baseline"]["tok_s"], e["baseline"]["tok_s_ci"])
                                for e in entries})
    scored: list[tuple[str, float, list[float], dict[str, Any]]] = []
    for name, rows in every.items():
        rate, ci = mixed({c: point(r["measured_tok_s"], r["measured_tok_s_ci"]) for c, r in rows.items()})
        scored.append((name, rate, ci, rows[concurrencies[0]]))
    scored.sort(key=lambda s: -s[1])
    name, rate, ci, row = scored[0]
    speedup = round(rate / base_rate, 3) if base_rate else None
    beats = "yes" if ci[0] > base_ci[1] else "no" if ci[1] < base_ci[0] else "inconclusive"
    tied = [other for other, _r, oci, _row in scored[1:] if oci[0] <= ci[1] and ci[0] <= oci[1]]
    shares = ", ".join(f"{c}: {share[c]:.0%}" for c in concurrencies)
    return {"weights": {str(c): round(share[c], 4) for c in concurrencies}, "given": weights is not None,
            "baseline": {"tok_s": round(base_rate, 3), "tok_s_ci": base_ci},
            "recommended": {"label": name, "k": row.get("k"), "flags": row.get("flags"), "tok_s": round(rate, 3),
                            "tok_s_ci": ci, "speedup": speedup, "beats_baseline": beats, "tied_with": tied,
                            **({"topk": row["topk"], "draft_tokens": row["draft_tokens"]} if row.get("topk") else {})},
            "scored": [{"label": n, "tok_s": round(r, 3), "tok_s_ci": c_} for n, r, c_, _ in scored],
            "line": (f"one configuration for {'your mix' if weights else 'equal shares'} of concurrency ({shares}): "
                     f"{name}, {rate:.1f} [{ci[0]:.1f}, {ci[1]:.1f}] tok/s per request weighted, {speedup}x the "
                     f"baseline's {base_rate:.1f} [{base_ci[0]:.1f}, {base_ci[1]:.1f}] (beats it: {beats})"
                     + (f"; tied on intervals with {', '.join(tied)}" if tied else ""))}
