"""The report's tuning section (step kind `tune`): the cost model, predicted beside measured per chain length with
intervals, the recommendation, and the chart of the predicted curve with the measured points."""

from __future__ import annotations

from typing import Any

from orchestrator.events import ArtifactSaved, StepFinished
from orchestrator.session.document import Block, Heading, Image, Para, Table
from orchestrator.session.reader import LoadedSession


def _interval(value: Any, ci: Any) -> str:
    if value is None:
        return "—"
    text = f"{float(value):.1f}"
    return text + (f" [{float(ci[0]):.1f}, {float(ci[1]):.1f}]" if isinstance(ci, list) and len(ci) == 2 else "")


def _counted(counted: Any) -> str:
    """What the starts were: the brute-force grid would need one per chain length plus the baseline."""
    if not isinstance(counted, dict):
        return ""
    verify = counted.get("verify") or []
    parts = (["the baseline"] if counted.get("baseline") else ["the baseline given (not restarted)"]) + ["the probe"]
    parts.append(f"a restart for each top prediction not yet measured (k={', '.join(map(str, verify))})" if verify
                 else "no verify restart (the best prediction is the probe, measured already)")
    return f" ({'; '.join(parts)}; top predicted: k={', '.join(map(str, counted.get('top_predicted') or []))})"


def _detail(res: dict[str, Any], counted: Any, restarts: Any) -> list[Block]:
    """One concurrency's cost model, predicted beside measured per configuration, and its recommendation."""
    blocks: list[Block] = []
    cost, profile = res.get("cost") or {}, res.get("profile") or {}
    base = res.get("baseline") or {}
    blocks.append(Para(
        f"Cost model (the request as the unit): a plain decode step {cost.get('t1_s', 0) * 1000:.1f} ms, each "
        f"draft token adds {cost.get('c_s', 0) * 1000:.1f} ms to a cycle (fitted from the baseline, "
        f"{base.get('source', '')}, and one probe at k={cost.get('k_probe')}); acceptance per position "
        f"{', '.join(f'{x:.2f}' for x in profile.get('rates') or [])} ({profile.get('source', '')}). "
        + (f"{restarts} server starts{_counted(counted)}." if restarts is not None else "")))
    rows = []
    for row in res.get("rows") or []:
        measured = _interval(row.get("measured_tok_s"), row.get("measured_tok_s_ci"))
        agrees = {True: "yes", False: "**no**", None: "—"}[row.get("agrees")]
        label = ((row.get("label") or f"k={row['k']}") + (" (probe)" if row.get("probe") else "")
                 + (" ★" if row.get("recommended") else ""))
        rows.append([label, _interval(row.get("predicted_accept_length"), row.get("predicted_accept_length_ci")
                                      if row.get("topk") else None),
                     _interval(row.get("predicted_tok_s"), row.get("predicted_tok_s_ci"))
                     + (" (extrapolated)" if row.get("extrapolated") else ""), measured, agrees])
    trees = res.get("tree_cost") or {}
    if trees:
        blocks.append(Para(
            f"Trees (SGLang's topk > 1): a draft step over the rows adds {trees.get('w_s', 0) * 1000:.2f} ms over a "
            f"chain's, each verified token beyond a chain's {trees.get('v_s', 0) * 1000:.2f} ms (fitted on "
            f"{', '.join(trees.get('fitted_on') or [])}{'; ' + trees['assumption'] if trees.get('assumption') else ''}"
            "); each tree's accept length is the draft test's, the tree served offline cycle by cycle."))
    blocks.append(Table(["configuration", "predicted accept length", "predicted tok/s [95%]", "measured tok/s [95%]",
                         "agree"], rows))
    blocks.append(Para(f"No speculation: {_interval(base.get('tok_s'), base.get('tok_s_ci'))} tok/s. "
                       + ((res.get("lines") or [""])[-1])))
    return blocks


def _by_concurrency(res: dict[str, Any]) -> list[Block]:
    """The answer per concurrency: the fastest measured configuration, its speedup, whether it pays, its flags."""
    rows = []
    for entry in res.get("by_concurrency") or []:
        rec, base = entry.get("recommended") or {}, entry.get("baseline") or {}
        rows.append([str(entry.get("concurrency")), _interval(base.get("tok_s"), base.get("tok_s_ci")),
                     str(rec.get("label") or f"k={rec.get('k')}") if rec else "—",
                     _interval(rec.get("tok_s"), rec.get("tok_s_ci")) if rec else "—",
                     f"{rec.get('speedup')}x" if rec else "—", str(rec.get("beats_baseline", "—")),
                     f"`{rec.get('paste')}`" if rec.get("paste") else "—"])
    crossing = res.get("crossover") or {}
    deploy = res.get("mix") or {}
    one = deploy.get("recommended") or {}
    return [Para("Per concurrency (each server start benchmarked at every concurrency of the profile; tok/s per "
                 "request, the baseline measured at the same concurrency; pays: the best configuration's interval "
                 "against the baseline's):"),
            Table(["concurrency", "no speculation tok/s", "fastest measured", "its tok/s [95%]", "speedup", "pays",
                   "flags"], rows),
            Para(f"**{str(crossing.get('line', '')).capitalize()}.**" if crossing.get("line") else ""),
            Para(f"{str(deploy['line'])[0].upper()}{str(deploy['line'])[1:]} (a server runs one configuration at "
                 f"every load; each interval is the weighted sum of the intervals' ends, wider than the exact one); "
                 f"flags: `{one.get('paste')}`." if deploy.get("line") else "")]


def tuning_section(session: LoadedSession) -> list[Block]:
    tuned = [(e, r) for e in session.of_type(StepFinished) if e.action == "tune" for r in e.results
             if r.status == "ok" and isinstance(r.result, dict)]
    if not tuned:
        return []
    blocks: list[Block] = [Heading("Tuning")]
    for step, r in tuned:
        res: dict[str, Any] = r.result
        blocks.append(Heading(f"{step.name} ({r.host})", 3))
        entries = res.get("by_concurrency") or []
        if len(entries) > 1:
            blocks += _by_concurrency(res)
            if res.get("concurrency_chart"):
                blocks.append(Image(session.directory / res["concurrency_chart"],
                                    "tuner: speedup per concurrency and the crossover"))
            blocks.append(Para(f"{res.get('restarts')} server starts{_counted(res.get('restarts_counted'))}."))
            for entry in entries:
                blocks.append(Heading(f"At concurrency {entry['concurrency']}", 4))
                blocks += _detail(entry, None, None)
                if entry.get("chart"):
                    blocks.append(Image(session.directory / entry["chart"],
                                        f"tuner at concurrency {entry['concurrency']}"))
            continue
        blocks += _detail(res, res.get("restarts_counted"), res.get("restarts"))
        for art in session.of_type(ArtifactSaved):
            if art.step_id == step.step_id and art.kind == "tune_chart":
                blocks.append(Image(session.directory / art.path, art.description or art.path))
    return blocks
