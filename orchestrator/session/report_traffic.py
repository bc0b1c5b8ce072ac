"""The report's section on a replayed traffic file (issue 40): acceptance per category and per sampling setting of
every `bench` that replayed the user's requests, as tables and as a chart with 95% intervals. Categories, settings
and figures only: a prompt never reaches the report."""

from __future__ import annotations

from typing import Any

from orchestrator.events import StepFinished
from orchestrator.session.charts_acceptance import Point
from orchestrator.session.document import Block, Heading, Para, Table
from orchestrator.session.reader import LoadedSession
from orchestrator.session.report_acceptance import _chart, _iv


def _replays(session: LoadedSession) -> list[tuple[StepFinished, dict[str, Any]]]:
    return [(e, r.result) for e in session.of_type(StepFinished) if e.action == "bench" for r in e.results
            if isinstance(r.result, dict) and isinstance(r.result.get("traffic"), dict)]


def _figure(entry: dict[str, Any]) -> str:
    if entry.get("failed") and not entry.get("measured"):
        return f"failed: {entry.get('error')}"
    if entry.get("accept_length") is None:
        return "no accept length"
    if entry.get("too_few"):
        return f"too few requests ({entry.get('measured')})"
    return _iv(entry["accept_length"], entry.get("accept_length_ci"))


def traffic_section(session: LoadedSession) -> list[Block]:
    replays = _replays(session)
    if not replays:
        return []
    blocks: list[Block] = [Heading("Acceptance on your traffic"),
                           Para("Each request of the traffic file sent once as written (the served model's name, no "
                                "streaming); its accept length from the server (from its counters around the request "
                                "where it gives none per request). Per group: the mean over requests with its 95% t interval, cut at 1; "
                                "fewer than 3 requests are too few to tell apart. No prompt text is kept.")]
    for key, title in (("category", "category"), ("sampling", "sampling setting (as written)")):
        rows, points = [], []
        for step, res in replays:
            table = res["traffic"]
            label = str(res.get("server") or step.name)
            for e in table.get(f"by_{key}") or []:
                rows.append([label, str(e[key]), f"{e.get('measured')} / {e.get('requests')}", _figure(e),
                             "—" if e.get("tok_s") is None else f"{e['tok_s']:.1f}"])
                if e.get("accept_length") is not None and not e.get("too_few"):
                    points.append(Point(str(e[key]), label, e["accept_length"], e.get("accept_length_ci")))
            apart = table.get(f"below_best_{key}")
            if apart:
                best = apart["best"]
                worse = ", ".join(f"**{e[key]}** {_iv(e['accept_length'], e['accept_length_ci'])}"
                                  for e in apart["below"])
                blocks.append(Para(f"Served worse than {best[key]} {_iv(best['accept_length'], best['accept_length_ci'])} "
                                   f"on {label}, apart on 95% intervals: {worse}."))
            if table.get("unmeasured"):
                blocks.append(Para(f"{label}: no acceptance by {key}: {table['unmeasured']}."))
        if len(rows) > 1 or key == "category":
            blocks += [Heading(f"By {title}", 3),
                       Table(["server", key, "measured / requests", "accept length [95%]", "tok/s"], rows)]
            blocks += _chart(session, f"traffic-by-{key}", points, f"accept length by {title}", "accept length",
                             floor=1.0)
    return blocks
