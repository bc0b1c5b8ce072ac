"""The tuner's concurrency profile (issue 39): where speculation pays per concurrency and the crossover
(orchestrator/tuning/concurrency.py), decided from intervals and never past what they say; the verify schedule over
several concurrencies' rankings (tune.py ``_pending``); the profile's own rules (TuneArgs); the speedup chart."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from orchestrator.actions.tune import TuneArgs, _pending
from orchestrator.tuning.chart import svg_concurrency
from orchestrator.tuning.concurrency import ConcurrencyAnswer, answer, for_mix

FLAGS = {"speculative-algorithm": "EAGLE3", "speculative-draft-model-path": "/d"}


def test_pays_everywhere_is_no_crossover() -> None:
    out = answer([ConcurrencyAnswer(4, "k=3", 1.3, "yes"), ConcurrencyAnswer(1, "k=5", 1.6, "yes")])
    assert out["pays"] == [1, 4] and out["crossover"] is None
    assert "no crossover up to 4" in str(out["line"])


def test_a_crossover_is_bracketed_and_interpolated_in_log_concurrency() -> None:
    out = answer([ConcurrencyAnswer(1, "k=5", 1.5, "yes"), ConcurrencyAnswer(4, "k=3", 1.2, "yes"),
                  ConcurrencyAnswer(16, "k=1", 0.8, "no")])
    crossing = out["crossover"]
    assert isinstance(crossing, dict) and crossing["between"] == [4, 16]
    # the speedup 1.2 -> 0.8 over log 4 -> log 16 crosses 1 half way: at 8
    assert math.isclose(crossing["estimate"], 8.0, rel_tol=1e-6)
    assert "between them" in str(out["line"]) and "not measured there" in str(out["line"])


def test_an_inconclusive_point_between_leaves_no_number() -> None:
    out = answer([ConcurrencyAnswer(1, "k=5", 1.5, "yes"), ConcurrencyAnswer(4, "k=3", 1.02, "inconclusive"),
                  ConcurrencyAnswer(16, "k=1", 0.7, "no")])
    crossing = out["crossover"]
    assert isinstance(crossing, dict) and crossing["between"] == [1, 16] and crossing["estimate"] is None
    assert crossing["inconclusive_between"] == [4] and "at or around 4" in str(out["line"])


def test_nothing_decided_is_said_so() -> None:
    out = answer([ConcurrencyAnswer(1, "k=2", 1.05, "inconclusive"), ConcurrencyAnswer(4, "k=2", 0.97, "inconclusive")])
    assert out["crossover"] is None and "no crossover decided" in str(out["line"])
    never = answer([ConcurrencyAnswer(1, "k=1", 0.6, "no"), ConcurrencyAnswer(2, "k=1", 0.5, "no")])
    assert never["crossover"] is None and "does not pay at any" in str(never["line"])


def test_verify_picks_rank_by_rank_over_concurrencies() -> None:
    # one concurrency: its top `verify` not measured, best first (the single-concurrency tuner's rule)
    assert _pending([[4, 3, 5]], 2, {4: {}}) == [3]
    # two: the best of each first, then the second ranks, each once
    assert _pending([[4, 3, 5], [2, 4, 1]], 2, {4: {}}) == [2, 3]
    assert _pending([[4, 3], [4, 3]], 2, {4: {}, 3: {}}) == []


def test_the_profile_is_ascending_and_bounded() -> None:
    args = TuneArgs(flags=FLAGS, concurrency=[16, 1, 4, 4])
    assert args.profile() == [1, 4, 16]
    assert TuneArgs(flags=FLAGS, bench={"concurrency": 8}).profile() == [8]
    with pytest.raises(ValidationError, match="at most 8 values"):
        TuneArgs(flags=FLAGS, concurrency=list(range(1, 10)))
    with pytest.raises(ValidationError, match="holds one concurrency"):
        TuneArgs(flags=FLAGS, concurrency=[1, 4], baseline={"tok_s": 1.0})


def test_the_speedup_chart_marks_the_crossover() -> None:
    entries = [{"concurrency": c, "baseline": {"tok_s": 100.0, "tok_s_ci": [95.0, 105.0]},
                "recommended": {"k": 3, "speedup": s, "tok_s": 100 * s, "tok_s_ci": [95 * s, 105 * s],
                                "beats_baseline": pays}}
               for c, s, pays in ((1, 1.5, "yes"), (4, 1.2, "yes"), (16, 0.8, "no"))]
    svg = svg_concurrency(entries, answer([ConcurrencyAnswer(e["concurrency"], "k=3", e["recommended"]["speedup"],
                                                             e["recommended"]["beats_baseline"]) for e in entries]),
                          title="t")
    assert svg.count("<circle") == 3 and "crossover ~8" in svg and "#c62828" in svg and "#2e7d32" in svg


def _entry(c: int, base: tuple[float, float, float], rows: dict[str, tuple[float, float, float]]) -> dict:
    return {"concurrency": c, "baseline": {"tok_s": base[0], "tok_s_ci": [base[1], base[2]]},
            "rows": [{"k": int(name[2:]), "label": None, "flags": {"speculative-num-steps": int(name[2:])},
                      "measured_tok_s": v[0], "measured_tok_s_ci": [v[1], v[2]]} for name, v in rows.items()]}


def test_one_configuration_for_a_mix_weighs_each_concurrency_by_its_share() -> None:
    entries = [_entry(1, (100, 95, 105), {"k=6": (200, 190, 210), "k=2": (150, 145, 155)}),
               _entry(16, (50, 48, 52), {"k=6": (40, 38, 42), "k=2": (60, 58, 62)})]
    light = for_mix(entries, {1: 0.9, 16: 0.1})
    heavy = for_mix(entries, {1: 0.1, 16: 0.9})
    assert light is not None and heavy is not None
    # mostly single requests: the long chain; mostly under load: the short one that still pays there
    assert light["recommended"]["label"] == "k=6" and heavy["recommended"]["label"] == "k=2"
    assert math.isclose(heavy["recommended"]["tok_s"], 0.1 * 150 + 0.9 * 60)
    assert heavy["recommended"]["tok_s_ci"] == [round(0.1 * 145 + 0.9 * 58, 3), round(0.1 * 155 + 0.9 * 62, 3)]
    assert heavy["recommended"]["beats_baseline"] == "yes" and heavy["recommended"]["flags"] == {
        "speculative-num-steps": 2}
    equal = for_mix(entries, None)
    assert equal is not None and equal["weights"] == {"1": 0.5, "16": 0.5} and "equal shares" in equal["line"]
    # a configuration not measured at every concurrency is not a candidate for the mix
    partial = [entries[0], _entry(16, (50, 48, 52), {"k=2": (60, 58, 62)})]
    only = for_mix(partial, None)
    assert only is not None and [s["label"] for s in only["scored"]] == ["k=2"]
    assert for_mix(entries[:1], None) is None


def test_a_mix_names_the_profile() -> None:
    assert TuneArgs(flags=FLAGS, concurrency_mix={16: 0.3, 1: 0.7}).profile() == [1, 16]
    with pytest.raises(ValidationError, match="are not the profile's"):
        TuneArgs(flags=FLAGS, concurrency=[1, 4], concurrency_mix={1: 0.5, 16: 0.5})
    with pytest.raises(ValidationError, match="not all 0"):
        TuneArgs(flags=FLAGS, concurrency_mix={1: 0.0, 4: 0.0})
