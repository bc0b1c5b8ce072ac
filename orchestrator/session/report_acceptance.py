"""The report's acceptance section: acceptance per wiring (the draft test), predicted vs measured for every
reconciled benchmark (before and after the fix), per draft position and per prompt-length bucket, each as a table
and as a chart with its 95% intervals. A fault that grows with position or with context shows as a falling profile."""

from __future__ import annotations

from typing import Any

from orchestrator.events import StepFinished
from orchestrator.probes.models import states_source_line
from orchestrator.session.charts_acceptance import Point, svg_points
from orchestrator.session.document import Block, Heading, Image, Para, Table
from orchestrator.session.reader import LoadedSession


def _iv(value: Any, ci: Any) -> str:
    if value is None:
        return "—"
    text = f"{float(value):.2f}"
    return text + (f" [{float(ci[0]):.2f}, {float(ci[1]):.2f}]" if isinstance(ci, list) and len(ci) == 2 else "")


def _ok(session: LoadedSession, action: str) -> list[tuple[StepFinished, str, dict[str, Any]]]:
    return [(e, r.host, r.result) for e in session.of_type(StepFinished) if e.action == action for r in e.results
            if r.status == "ok" and isinstance(r.result, dict)]


def _chart(session: LoadedSession, name: str, points: list[Point], title: str, ylabel: str,
           floor: float = 0.0) -> list[Block]:
    """The chart written beside the report (artifacts/), as an image block; none when nothing has a value."""
    if not any(p.value is not None for p in points):
        return []
    directory = session.directory / "artifacts"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"acceptance-{name}.svg"
        path.write_text(svg_points(points, title=title, ylabel=ylabel, floor=floor), encoding="utf-8")
    except OSError as exc:  # a read-only session directory: the tables still say it
        return [Para(f"(chart {name} not written: {exc.strerror or exc})")]
    return [Image(path, title)]


def _label(rc: dict[str, Any], step: StepFinished) -> str:
    return str(rc.get("name") or rc.get("server") or step.name)


def _reconciled(session: LoadedSession) -> list[tuple[StepFinished, str, dict[str, Any]]]:
    """One entry per reconciled server (a reconcile step reconciles every speculative server at once)."""
    out = []
    for step, host, rc in _ok(session, "reconcile"):
        servers = rc.get("servers")
        for one in servers if isinstance(servers, list) else [rc]:
            if isinstance(one, dict):
                out.append((step, host, one))
    return out


def acceptance_section(session: LoadedSession) -> list[Block]:
    tests = _ok(session, "draft_test")
    recs = _reconciled(session)
    if not tests and not recs:
        return []
    blocks: list[Block] = [Heading("Acceptance")]
    for step, host, dt in tests:
        served = dt.get("server_wiring")
        points = []
        for w in sorted(dt.get("wirings") or [], key=lambda w: str(w.get("wiring"))):
            cat = str(w.get("wiring"))
            points.append(Point(cat, "offline, as served", w.get("tau_serving"), w.get("tau_serving_ci"),
                                highlight=w.get("wiring") == served))
            own = w.get("as_trained") or {}
            if own.get("tau_serving") is not None:
                points.append(Point(cat, "offline, as trained", own["tau_serving"], own.get("tau_serving_ci")))
        blocks += _chart(session, f"{step.step_id}-wirings", points,
                         f"accept length per wiring (draft test, step {step.step_id} on {host})",
                         "accept length (tokens per verify cycle)", floor=1.0)
    if recs:
        rows, points = [], []
        for step, _host, rc in recs:
            pred, meas = rc.get("predicted") or {}, rc.get("measured") or {}
            label = _label(rc, step)
            rows.append([label, str(rc.get("wiring")), str(rc.get("steps")), str(rc.get("algorithm")),
                         _iv(pred.get("accept_length"), pred.get("accept_length_ci")),
                         _iv(meas.get("accept_length"), meas.get("accept_length_ci")), str(rc.get("decision"))])
            points.append(Point(label, "predicted offline", pred.get("accept_length"), pred.get("accept_length_ci")))
            points.append(Point(label, "measured by the server", meas.get("accept_length"),
                                meas.get("accept_length_ci")))
        blocks.append(Para("The draft test's prediction for exactly the configuration each server served (its draft, "
                           "wiring, parts and draft tokens; the benchmark's prompts and lengths, greedy) beside "
                           "what the server measured; disjoint 95% intervals are a discrepancy."))
        blocks.append(Table(["server", "wiring", "draft tokens", "algorithm", "predicted [95%]", "measured [95%]",
                             "reconcile"], rows))
        for line in dict.fromkeys(states_source_line(rc.get("states")) for _step, _host, rc in
                                  _ok(session, "reconcile")):
            if line:
                blocks.append(Para("The prediction's " + line + "."))
        blocks += _chart(session, "predicted-vs-measured", points,
                         "accept length: predicted vs measured, before and after the fix", "accept length", floor=1.0)
        blocks += _position_blocks(session, recs)
        blocks += _length_blocks(session, recs)
    return blocks


def _position_blocks(session: LoadedSession, recs: list[tuple[StepFinished, str, dict[str, Any]]]) -> list[Block]:
    rows, points = [], []
    for step, _host, rc in recs:
        label = _label(rc, step)
        for r in rc.get("per_position") or []:
            cat = f"k={r['k']}"
            rows.append([label, cat, _iv(r.get("predicted"), r.get("predicted_ci")),
                         _iv(r.get("measured"), r.get("measured_ci")),
                         {True: "**disjoint**", False: "overlap", None: "—"}[r.get("disjoint")]])
            points.append(Point(cat, f"{label} predicted", r.get("predicted"), r.get("predicted_ci")))
            points.append(Point(cat, f"{label} measured", r.get("measured"), r.get("measured_ci")))
    if not rows:
        return []
    return [Heading("Acceptance per draft position", 3),
            Para("The share of verify cycles that accept draft position k (vLLM's per-position counters; SGLang's "
                 "per-request accept histograms), offline and served, 95% intervals."),
            Table(["server", "position", "predicted [95%]", "measured [95%]", ""], rows),
            *_chart(session, "per-position", points, "acceptance per draft position", "accepted share of cycles")]


#: the fewest requests a prompt-length bucket's measured interval is shown for
MIN_BUCKET = 3


def _length_blocks(session: LoadedSession, recs: list[tuple[StepFinished, str, dict[str, Any]]]) -> list[Block]:
    rows, points = [], []
    for step, _host, rc in recs:
        label = _label(rc, step)
        for b in rc.get("by_length") or []:
            lo, hi = b["bucket"]
            cat = f"{lo}-{hi - 1 if hi is not None else '…'} tok"
            # a bucket of one or two requests has an interval as wide as the scale (t with 1 degree of freedom):
            # said as too few, not drawn as a figure
            few = isinstance(b.get("requests"), int) and b["requests"] < MIN_BUCKET
            measured = (f"too few requests ({b['requests']})" if few else
                        _iv(b.get("measured"), b.get("measured_ci")))
            rows.append([label, cat, f"{b.get('prompts')} / {b.get('requests')}",
                         _iv(b.get("predicted"), b.get("predicted_ci")), measured])
            points.append(Point(cat, f"{label} predicted", b.get("predicted"), b.get("predicted_ci")))
            if not few:
                points.append(Point(cat, f"{label} measured", b.get("measured"), b.get("measured_ci")))
    if not rows:
        return []
    return [Heading("Acceptance by prompt length", 3),
            Table(["server", "prompt tokens", "prompts / requests", "predicted [95%]", "measured [95%]"], rows),
            *_chart(session, "by-length", points, "accept length by prompt length", "accept length", floor=1.0)]
