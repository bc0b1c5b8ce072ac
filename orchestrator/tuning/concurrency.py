"""The tuner's answer per concurrency (issue 39): at each concurrency of the user's profile, the fastest measured
configuration against the no-speculation baseline measured at that same concurrency, and where speculation stops
paying (the crossover).

"Pays" is decided on intervals, as the single-concurrency recommendation is (tune.py ``_recommend``): the best
configuration's per-request tok/s interval above the baseline's is "yes", below it "no", overlapping
"inconclusive". The crossover is bracketed by the profile's own points, the highest concurrency where it pays and
the next one where it does not; between them the speedup (best over baseline) is interpolated in log concurrency to
where it crosses 1 (an estimate, said as one: nothing between the two points was measured). An inconclusive point
between them leaves the crossover at it or around it, said as such, never a number the sample cannot support.

Public API: ``ConcurrencyAnswer``, ``answer(points) -> dict``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


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
