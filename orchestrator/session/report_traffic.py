"""The report's section on a replayed traffic file (issue 40): acceptance per category and per sampling setting of
every `bench` that replayed the user's requests, as tables and as a chart with 95% intervals. Categories, settings
and figures only: a prompt never reaches the report written into the session. ``prompt_blocks`` is what
``orchestrator report --with-prompts`` adds to a report it only prints: each request with the start of its prompt,
read from the traffic file at that moment (the session keeps its path and line numbers, not its text)."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.events import StepFinished
from orchestrator.session.charts_acceptance import Point
from orchestrator.session.document import Block, Heading, Para, Table
from orchestrator.session.reader import LoadedSession
from orchestrator.session.report_acceptance import _chart, _iv
from remote_probes.evaluation.confidence_match import BIN_EDGES


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


def _offline(session: LoadedSession) -> list[tuple[str, dict[str, Any]]]:
    """Each server of the traffic reconciles (a ``reconcile`` with ``traffic``: orchestrator/traffic/reconciled.py)."""
    return [(str(server.get("name")), server) for e in session.of_type(StepFinished) if e.action == "reconcile"
            for r in e.results if isinstance(r.result, dict) and r.result.get("traffic")
            for server in r.result.get("servers") or [] if isinstance(server, dict)]


def _pair(value: Any, ci: Any) -> str:
    return "—" if value is None else (_iv(value, ci) if ci else f"{value:.2f} (too few)")


def _bin_label(b: int) -> str:
    return f"p {BIN_EDGES[b]:g}-{BIN_EDGES[b + 1]:g}"


def _matched_points(name: str, e: dict[str, Any]) -> list[Point]:
    """The draft's first proposal right, per bin of the target's probability, on the category and on the best one."""
    points = []
    for series, bins in ((f"{e['category']} ({name})", e.get("bins")), (f"{e['best']} ({name})", e.get("best_bins"))):
        for b, (right, tokens) in enumerate(bins or []):
            if tokens:
                points.append(Point(_bin_label(b), series, right / tokens))
    return points


def offline_blocks(session: LoadedSession) -> list[Block]:
    """The traffic replayed offline as each server serves it, group by group beside the measurement, and the draft
    penalised as the target where a setting penalises."""
    servers = _offline(session)
    if not servers:
        return []
    rows, cf_rows, cut_rows, matched_rows, bare_rows = [], [], [], [], []
    matched_points: list[Point] = []
    for name, rc in servers:
        for key in ("category", "sampling"):
            for e in rc.get(f"by_{key}") or []:
                said = {None: "undecided", True: "**disjoint**", False: "overlap"}[e.get("disjoint")]
                if not e.get("measured_requests") and e.get("failed"):
                    said = f"undecided: the server refused it ({e.get('error')})"
                rows.append([name, key, str(e.get(key)), _pair(e.get("predicted"), e.get("predicted_ci")),
                             _pair(e.get("measured"), e.get("measured_ci")), said])
        for e in rc.get("draft_penalised") or []:
            cf_rows.append([name, str(e["sampling"]), str(e["requests"]), _pair(e["served"], e.get("served_ci")),
                            _pair(e["draft_penalised"], e.get("draft_penalised_ci")),
                            "—" if e.get("gain") is None else f"{_pair(e['gain'], e.get('gain_ci'))}x"])
        for e in rc.get("cut_to_length") or []:
            cut_rows.append([name, str(e["category"]), str(e["requests"]), str(e["kept_tokens"]),
                             _pair(e["served"], e.get("served_ci")), _pair(e["cut"], e.get("cut_ci")),
                             "—" if e.get("gain") is None else f"{_pair(e['gain'], e.get('gain_ci'))}x"])
        for key, field, how in (("without_template", "untemplated", "without the template"),
                                ("thinking_off", "thinking_off", "{switch}: false")):
            for e in rc.get(key) or []:
                bare_rows.append([name, str(e["category"]), str(e["requests"]), _pair(e["served"], e.get("served_ci")),
                                  how.format(**e), _pair(e[field], e.get(field + "_ci")),
                                  "—" if e.get("gain") is None else f"{_pair(e['gain'], e.get('gain_ci'))}x"])
        for e in rc.get("confidence_matched") or []:
            matched_rows.append([name, str(e["category"]), str(e["requests"]), _share(e.get("first_step")),
                                 f"{_share(e.get('expected'))} (on {e['best']})",
                                 _pair(e.get("ratio"), e.get("ratio_ci")),
                                 _pair(e.get("target_probability"), e.get("target_probability_ci")),
                                 _pair(e.get("best_target_probability"), e.get("best_target_probability_ci"))])
            matched_points += _matched_points(name, e)
    blocks: list[Block] = [Heading("Your traffic offline, as the server serves it", 3),
                           Para("Each request replayed offline (its chat template, max_tokens and penalties "
                                "on the target's logits, as the engine applies them; a sampled one served again cycle "
                                "by cycle, its top-k and top-p cutting the target's distribution as vLLM's do), "
                                "grouped as the server's "
                                "measurements are; disjoint 95% intervals mean the server serves that group otherwise "
                                "than the offline model of it. " + "; ".join(
                                    f"{name}: {rc.get('decision')}" for name, rc in servers) + "."),
                           Table(["server", "by", "group", "predicted offline [95%]", "measured [95%]", "intervals"],
                                 rows)]
    if cf_rows:
        blocks += [Para("A penalised setting with the draft's logits penalised as the target's (the engine change "
                        "that would mend a penalty's cost; both engines propose unpenalised): its prediction beside "
                        "the served one's, and their paired gain over the same requests."),
                   Table(["server", "sampling", "requests", "served (predicted)", "draft penalised too", "gain"],
                         cf_rows)]
    if cut_rows:
        blocks += [Para("A category served worse whose prompts are longer than the best-served one's: its requests "
                        "replayed offline again with each prompt cut to its last tokens (the best category's mean "
                        "length), beside the whole requests' prediction, and their paired gain: what the category "
                        "owes to the context's length rather than to what it holds."),
                   Table(["server", "category", "requests", "tokens kept", "whole (predicted)", "cut (predicted)",
                          "gain"], cut_rows)]
    if bare_rows:
        blocks += [Para("A category served worse whose requests are chat: each replayed offline again without its chat "
                        "template (its messages' text alone, as a completion's prompt) and, where the template has a "
                        "thinking switch, with thinking off (the template's other parts kept), beside the templated "
                        "prediction, and their paired gain: what the category owes to a template, or to its thinking "
                        "suffix, the draft never learned."),
                   Table(["server", "category", "requests", "templated (predicted)", "replayed", "predicted",
                          "gain"], bare_rows)]
    if matched_rows:
        blocks += [Para("A category served worse, matched with the best-served one by the target's confidence: how "
                        "often the draft's first proposal is right on its tokens, against how often it would be if it "
                        "did as on the best category's tokens of the same target probability, and their ratio over "
                        "its requests. Below 1 on its interval, the draft did not learn the category; near 1 with a "
                        "less sure target, the category's text is harder for any draft."),
                   Table(["server", "category", "requests", "first proposal right", "expected at the same confidence",
                          "ratio [95%]", "target's probability [95%]", "on the best category"], matched_rows)]
        blocks += _chart(session, "traffic-by-confidence", matched_points,
                         "the draft's first proposal right, by the target's probability of the token (tokens pooled)",
                         "share right")
    return blocks


def _share(value: Any) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


def _length(e: dict[str, Any]) -> str:
    """A group's prompts' mean length in tokens (a group served worse with longer prompts may owe it to the length)."""
    if e.get("prompt_tokens") is None:
        return "—"
    span = e.get("prompt_tokens_ci")
    return f"{e['prompt_tokens']:.0f}" + (f" [{span[0]:.0f}, {span[1]:.0f}]" if span else "")


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
                             "—" if e.get("tok_s") is None else f"{e['tok_s']:.1f}", _length(e)])
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
                       Table(["server", key, "measured / requests", "accept length [95%]", "tok/s",
                              "prompt tokens, mean [95%]"], rows)]
            blocks += _chart(session, f"traffic-by-{key}", points, f"accept length by {title}", "accept length",
                             floor=1.0)
    return blocks + offline_blocks(session)


#: how much of a prompt a row shows (its start; the last message of a chat request)
PROMPT_CHARS = 100


def _prompt_text(body: dict[str, Any]) -> str:
    if isinstance(body.get("prompt"), str):
        return str(body["prompt"])
    messages = body.get("messages") or []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    content = last.get("content")
    text = content if isinstance(content, str) else json.dumps(content)
    return f"[{last.get('role', '?')}] {text}"


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PROMPT_CHARS else flat[:PROMPT_CHARS] + "…"


def prompt_blocks(session: LoadedSession) -> list[Block]:
    """Each replayed request, per server: its line, category, setting, accept length and the start of its prompt."""
    from orchestrator.traffic.requests import load_traffic

    blocks: list[Block] = []
    for step, res in _replays(session):
        table = res["traffic"]
        label = str(res.get("server") or step.name)
        path = str(table.get("file"))
        try:
            by_line = {r.line: r for r in load_traffic(path)}
        except Exception as exc:  # noqa: BLE001 - a moved or edited file is said, the report goes on
            blocks += [Heading(f"Your traffic on {label}, request by request", 3),
                       Para(f"{path} cannot be read now ({type(exc).__name__}: {exc}): no prompt to show.")]
            continue
        rows = []
        for row in res.get("per_request") or []:
            request = by_line.get(int(row.get("line") or 0))
            figure = row.get("accept_length")
            rows.append([str(row.get("line")), str(row.get("category")), str(row.get("sampling")),
                         "failed" if row.get("error") else ("—" if figure is None else f"{figure:.2f}"),
                         _excerpt(_prompt_text(request.body)) if request is not None else "(not in the file now)"])
        blocks += [Heading(f"Your traffic on {label}, request by request", 3),
                   Para(f"From {path}, read when this report was printed (the session keeps no prompt)."),
                   Table(["line", "category", "sampling", "accept length", "prompt (start)"], rows)]
    return blocks
