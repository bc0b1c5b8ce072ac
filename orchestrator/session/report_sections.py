"""Report sections about the investigation itself: the verdict, the hypothesis logbook, servers,
benchmarks and sweeps, source excerpts, the environment. All built from events only."""

from __future__ import annotations

from typing import Any

from orchestrator.events import (
    ArtifactSaved,
    HostOutcome,
    HypothesisState,
    HypothesisUpdated,
    ServerEvent,
    StepFinished,
)
from orchestrator.hypotheses.board import HypothesisBoard
from orchestrator.probes.models import ceiling_line, states_source_line
from orchestrator.session.answer import account_of
from orchestrator.session.document import Block, Code, Heading, Image, Para, Table
from orchestrator.session.reader import LoadedSession
from orchestrator.verdicts.flagship.account import SymptomAccount
from orchestrator.verdicts.flagship.draft_evidence import ACCOUNTED_FOR

STATE_MARK: dict[HypothesisState, str] = {"confirmed": "✔ confirmed", "refuted": "✘ refuted", "supported": "↑ supported",
              "inconclusive": "? inconclusive", "open": "· open"}


def _finished(session: LoadedSession) -> dict[str, StepFinished]:
    return {e.step_id: e for e in session.of_type(StepFinished)}


def _results(session: LoadedSession, action: str) -> list[tuple[StepFinished, HostOutcome]]:
    """(step_finished, host outcome) for every host result of steps of one kind."""
    out: list[tuple[StepFinished, HostOutcome]] = []
    for e in session.of_type(StepFinished):
        if e.action == action:
            out.extend((e, r) for r in e.results if r.status != "skipped")
    return out


def verdict_section(session: LoadedSession) -> list[Block]:
    board = HypothesisBoard.from_events(session.events)
    if not board.entries:
        return []
    steps = _finished(session)
    blocks: list[Block] = [Heading("Verdict")]
    answer = account_of(session.events)
    if answer is not None:
        # the answer first, in one line: the symptom in numbers, the cause, the fix and whether it was verified
        blocks.append(Para(f"**{answer.headline}**"))
    confirmed = board.confirmed()
    # the derived fix has its own paragraph below (what to change, or why nothing can be served): said once
    fix_steps = {step.step_id for step, r in _results(session, "probe")
                 if isinstance(r.result, dict) and "fix_status" in r.result}
    if confirmed:
        # a confirmed specific case of a confirmed broader hypothesis (rope_mismatch of served_part) is one root
        # cause: told once, the specific one named first, the broader one's evidence with it
        ids = {entry.hypothesis.id for entry in confirmed}
        cases = {e.hypothesis.case_of: e for e in confirmed if e.hypothesis.case_of in ids}
        told_with = {e.hypothesis.id for e in cases.values()}
        for entry in confirmed:
            if entry.hypothesis.id in told_with:
                continue
            case = cases.get(entry.hypothesis.id)
            if case is None:
                blocks.append(Para(f"**Root cause: {entry.hypothesis.title}** [`{entry.hypothesis.id}`]"))
                history = entry.history
            else:
                blocks.append(Para(f"**Root cause: {case.hypothesis.title}** [`{case.hypothesis.id}`] — a case of: "
                                   f"{entry.hypothesis.title} [`{entry.hypothesis.id}`]"))
                history = sorted([*case.history, *entry.history], key=lambda h: h.seq)
            # One story, each observation once, in order: the experiments that supported it, the fix that confirmed
            # it (a root cause needs a verified fix), what came after; the derived fix has its own paragraph below.
            # Told together, a case and its broader hypothesis confirmed by the same measurement show it once.
            seen: set[str] = set()
            decided: set[str | None] = set()
            for event in (h for h in history if h.state in ("supported", "confirmed")):
                text = event.evidence or event.rule or ""
                decisive = event.state == "confirmed" and event.previous != "confirmed"
                if (event.step_id in fix_steps and not decisive) or text in seen or (decisive and event.step_id in decided):
                    continue
                seen.add(text)
                if decisive:
                    decided.add(event.step_id)
                where = "manual verdict" if event.source == "manual" else "rule"
                if event.step_id in steps:
                    where = f"step {event.step_id} · {steps[event.step_id].name}"
                if event.state == "supported":
                    label = "Evidence"
                else:  # the first confirmation decides; what came after it adds
                    label = "Further evidence" if event.previous == "confirmed" else "Decisive evidence"
                blocks.append(Para(f"{label} ({where}): {text}"))
    draft = board.entries.get("draft_quality")
    if not confirmed and draft is not None and draft.state == "supported":
        # nothing else stands and the server agrees with the offline test: the verdict is about the draft itself
        last = draft.history[-1] if draft.history else None
        blocks.append(Para(f"**The draft: {draft.hypothesis.title}** [`draft_quality`]"
                           + (f": {last.evidence}" if last and last.evidence else "")))
    elif not confirmed and answer is None:
        blocks.append(Para("**No hypothesis confirmed.**"))
    blocks.extend(_unverified_paragraphs(board, steps, fix_steps, answer))
    blocks.extend(_fix_paragraphs(session, board, answer))
    still_open = board.open_entries()
    if still_open:
        names = ", ".join(f"`{e.hypothesis.id}` ({e.state})" for e in still_open)
        blocks.append(Para(f"Still open: {names}."))
    refuted = [e for e in board.entries.values() if e.state == "refuted"]
    if refuted:
        blocks.append(Para("Ruled out: " + ", ".join(f"`{e.hypothesis.id}`" for e in refuted) + "."))
    conflicted = [e for e in board.entries.values() if e.conflicted]
    if conflicted:
        blocks.append(Para("Conflicting evidence on: " + ", ".join(f"`{e.hypothesis.id}`" for e in conflicted)
                           + " — see the logbook below."))
    return blocks


def _unverified_paragraphs(board: HypothesisBoard, steps: dict[str, StepFinished], fix_steps: set[str],
                           answer: SymptomAccount | None = None) -> list[Block]:
    """What the evidence supports but no fix verified, each with its latest observation (a fix that did not recover
    says "fix not verified" there), and a discrepancy between the offline model and the server that nothing has
    accounted for yet: the investigation is not explained while one stands. A finding whose served fix recovered
    nothing is said to explain nothing (the account's weighing), never "supported" as if it stood."""
    blocks: list[Block] = []
    explains = {e.hypothesis: e for e in answer.explanations} if answer is not None else {}
    for entry in board.entries.values():
        # the derived fix's own words are its paragraph below: said once
        said = [h for h in entry.history if h.step_id not in fix_steps]
        if entry.state != "supported" or entry.hypothesis.id == "draft_quality" or not said:
            continue
        last = said[-1]
        where = f" (step {last.step_id} · {steps[last.step_id].name})" if last.step_id in steps else ""
        if entry.hypothesis.id == "serving_difference" and (last.evidence or "").startswith(ACCOUNTED_FOR):
            head = "Accounted for by the fix: the server served something the offline model of it does not"
        elif entry.hypothesis.id == "serving_difference":
            head = "Not explained yet: the server serves something the offline model of it does not"
        elif entry.hypothesis.id in explains and explains[entry.hypothesis.id].explains == "nothing":
            head = f"Found, explains nothing measured: {entry.hypothesis.title}"
            where = f"{where}: {explains[entry.hypothesis.id].text}; the finding"
        else:
            head = f"Supported, not confirmed: {entry.hypothesis.title}"
        blocks.append(Para(f"**{head}** [`{entry.hypothesis.id}`]{where}: {last.evidence or last.rule}"))
    return blocks


#: what leaves a session unexplained though the derived fix found nothing to change: the server serves otherwise than
#: the offline model of it (serving_difference supported), or it could not serve at all (server_start confirmed)
UNEXPLAINED = {"serving_difference": ("supported",), "server_start": ("confirmed",)}


def _unexplained(board: HypothesisBoard) -> list[str]:
    return [hid for hid, states in UNEXPLAINED.items()
            if hid in board.entries and board.entries[hid].state in states
            and not (board.entries[hid].history and (board.entries[hid].history[-1].evidence or "")
                     .startswith(ACCOUNTED_FOR))]


def _fix_paragraphs(session: LoadedSession, board: HypothesisBoard, answer: SymptomAccount | None = None
                    ) -> list[Block]:
    """The fix derived from the evidence (probe draft_fix): what to change, or why nothing can be served. "No fix
    needed" never stands beside a symptom or what is still unexplained: a fix derivation that found nothing to change
    while speculation is slower than it should be (the account's ladder), the server did not start, or it served
    otherwise than the offline model predicts, says that it found nothing yet."""
    blocks: list[Block] = []
    unexplained = _unexplained(board)
    if answer is not None and answer.status != "nothing_wrong":
        unexplained = [*unexplained, "symptom"]
    for step, r in _results(session, "probe"):
        res = r.result
        if not isinstance(res, dict) or "fix_status" not in res:
            continue
        status = str(res["fix_status"])
        head = {"fix": "Fix", "partial": "Partial fix", "blocked": "No servable fix",
                "nothing_to_fix": "No fix needed"}.get(status, "Fix")
        summary = str(res.get("summary", ""))
        if status == "nothing_to_fix" and unexplained:
            head = "No fix derived yet"
            why = {"server_start": "the server could not serve the candidate configuration (its own error is "
                                   "quoted above: what it names is the change to try)",
                   "serving_difference": "the server does not serve what the offline model of it predicts",
                   "symptom": f"the symptom stands ({answer.symptom if answer is not None else ''})"}
            summary = (f"the evidence names nothing this fix derivation can change, but {' and '.join(why[h] for h in unexplained)}: "
                       f"not explained yet ({summary})" if summary else
                       f"the evidence names nothing to change, but {' and '.join(why[h] for h in unexplained)}")
        blocks.append(Para(f"**{head}** (step {step.step_id} on {r.host}): {summary}"))
        if res.get("draft"):
            blocks.append(Para(f"Corrected draft written beside the original: `{res['draft']}`"))
    return blocks


def hypotheses_section(session: LoadedSession) -> list[Block]:
    board = HypothesisBoard.from_events(session.events)
    if not board.entries:
        return []
    rows = []
    for entry in board.entries.values():
        h = entry.hypothesis
        check = "manual check" if h.manual else (h.test or "")
        rows.append([h.id, h.title, STATE_MARK.get(entry.state, entry.state), str(entry.evidence_count),
                     ("⚠ " if entry.conflicted else "") + check])
    blocks: list[Block] = [Heading("Hypotheses"), Table(["id", "hypothesis", "state", "evidence", "how it is decided"], rows)]
    updates = session.of_type(HypothesisUpdated)
    if updates:
        t0 = session.started.ts if session.started else 0.0
        steps = _finished(session)
        log_rows = []
        for u in updates:
            step = steps.get(u.step_id) if u.step_id is not None else None
            source = f"{u.step_id} · {step.name}" if step else (f"manual ({u.author})" if u.source == "manual" else "")
            change = f"{u.previous} → {u.state}" + (f" ⚠ contradicts {u.conflicts_with}" if u.conflicts_with else "")
            log_rows.append([f"+{u.ts - t0:.1f}s", u.hypothesis_id, change, source, u.evidence or u.rule or ""])
        blocks += [Heading("Elimination log", 3),
                   Table(["at", "hypothesis", "change", "experiment", "observation"], log_rows)]
    return blocks


def servers_section(session: LoadedSession) -> list[Block]:
    servers = session.of_type(ServerEvent)
    benches = _results(session, "bench")
    if not servers and not benches:
        return []
    blocks: list[Block] = [Heading("Servers")]
    ready = [e for e in servers if e.type in ("server_ready", "server_failed")]
    if ready:
        rows = []
        for e in ready:
            flags = " ".join(f"{k}={v}" for k, v in e.flags.items() if v is not None) or "(none)"
            overrides = "; ".join(f"{o.get('flag')}: {o.get('requested')} → {o.get('effective')} ({o.get('source')})"
                                  for o in e.overrides) or "—"
            state = "ready" if e.type == "server_ready" else f"failed: {e.detail or ''}"
            where = f"{e.host}:{e.port}" + (f" ({len(e.ranks)} nodes: {', '.join(e.ranks)})" if e.ranks else "")
            rows.append([e.server_id, e.engine, where, flags, overrides, state])
        blocks.append(Table(["server", "engine", "where", "requested flags", "overrides (requested → effective)", "state"], rows))
    blocks += start_blocks(_results(session, "server"))
    if benches:
        rows = []
        for step, r in benches:
            res = r.result
            rows.append([step.name, str(res.get("server", "")), _num(res.get("tok_s")), _ci(res.get("tok_s_ci")),
                         _num(res.get("accept_length")), _ci(res.get("accept_length_ci")),
                         _num(res.get("accept_length_sd")), _num(res.get("server_accept_length")),
                         _num(res.get("latency_p50")), _num(res.get("latency_p99")),
                         str(res.get("completed", res.get("n", "")))])
        blocks += [Heading("Benchmarks", 3),
                   Para("Intervals are 95% over requests (t interval; the request is the unit); sd is per request."),
                   Table(["step", "server", "tok/s", "tok/s 95% CI", "accept length", "accept 95% CI", "accept sd",
                          "server avg accept", "p50 s", "p99 s", "n"], rows)]
        blocks += per_position_blocks(benches)
    return blocks


def start_blocks(starts: list[Any]) -> list[Block]:
    """Which program each start ran (the launcher detected on the host, and why) and what the engine decided at
    start-up (vLLM's aux layers, embed_tokens / lm_head sharing: servers/vllm_startup.py)."""
    rows = []
    for step, r in starts:
        res = r.result or {}
        launcher, decisions = res.get("launcher") or {}, res.get("decisions") or {}
        if (not launcher and not decisions) or res.get("status") == "stopped":  # a stop repeats its start's
            continue
        rows.append([step.name, str(res.get("name", "")),
                     f"{launcher.get('name')}: {launcher.get('reason')}" if launcher else "—",
                     str(decisions.get("summary") or "—")])
    if not rows:
        return []
    return [Heading("Launchers and start-up decisions", 3),
            Table(["step", "server", "launcher (why)", "start-up decisions (from the server's log)"], rows)]


def per_position_blocks(benches: list[Any]) -> list[Block]:
    """vLLM's per-position acceptance (``spec_decode``: accepted at draft position k / drafts, from /metrics), with
    the 95% interval over requests where each request carried its own counts."""
    rows = []
    for step, r in benches:
        stats = (r.result or {}).get("spec_decode") or {}
        rates = stats.get("per_position_request") or stats.get("per_position") or []
        if not rates:
            continue
        cis = stats.get("per_position_ci") or [None] * len(rates)
        cells = [f"{_num(rate)} [{_ci(ci)}]" if stats.get("per_position_ci") else _num(rate)
                 for rate, ci in zip(rates, cis, strict=False)]
        rows.append([step.name, str(r.result.get("server", "")), str(stats.get("per_position_n") or "—"),
                     "; ".join(f"k={k}: {cell}" for k, cell in enumerate(cells))])
    if not rows:
        return []
    return [Heading("Per-position acceptance", 3),
            Para("vLLM's /metrics counters: accepted tokens at draft position k per draft; 95% interval over "
                 "requests (each request's own change of the counters, concurrency 1)."),
            Table(["step", "server", "requests", "acceptance rate by draft position [95% CI]"], rows)]


def _ci(value: Any, digits: int = 2) -> str:
    """An interval [lo, hi] as text; a missing one says why it is missing."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        return f"{value[0]:.{digits}f}–{value[1]:.{digits}f}"
    return "— (n < 2)"


def _num(value: Any, digits: int = 2) -> str:
    if isinstance(value, (int, float)):
        return f"{value:.{digits}f}"
    return "—" if value is None else str(value)


def sweeps_section(session: LoadedSession) -> list[Block]:
    sweeps = _results(session, "sweep")
    if not sweeps:
        return []
    blocks: list[Block] = [Heading("Sweeps")]
    for step, r in sweeps:
        res = r.result
        rows = []
        for row in res.get("rows", res.get("results", [])):
            rows.append([str(row.get("label", row.get("name", ""))), _num(row.get("tok_s")), _num(row.get("accept_length")),
                         str(row.get("status", "")), str(row.get("note", row.get("skipped_reason", "")) or "")])
        blocks.append(Heading(step.name, 3))
        if rows:
            blocks.append(Table(["config", "tok/s", "accept length", "status", "note"], rows))
        if res.get("best"):
            best = res["best"]
            speedup = best.get("speedup")
            verdict = ""
            if isinstance(speedup, (int, float)):
                verdict = f" — {speedup:.2f}× the baseline" + (" (no config beats it)" if speedup <= 1.0 else "")
            blocks.append(Para(f"Best speculative config: **{best.get('label', best.get('name', best))}** at "
                               f"{_num(best.get('tok_s'))} tok/s{verdict}."))
    for art in session.of_type(ArtifactSaved):
        if art.path.endswith((".svg", ".png")):
            blocks.append(Image(session.directory / art.path, art.description or art.path))
    return blocks


def sources_section(session: LoadedSession) -> list[Block]:
    reads = _results(session, "read_source")
    if not reads:
        return []
    blocks: list[Block] = [Heading("Source excerpts")]
    for step, r in reads:
        res = r.result
        for read in res.get("reads", []):
            for span in (read.get("matches") or [read])[:4]:
                lines = span.get("lines") or []
                if not lines:
                    continue
                title = f"{res.get('package')} {res.get('version')} · {span.get('file')}:{span.get('start')}-{span.get('end')}"
                label = read.get("symbol") or read.get("pattern") or read.get("lines_spec") or ""
                blocks.append(Para(f"**{title}** — `{label}` ({r.host}, step {step.step_id})"))
                shown = lines[:80]
                blocks.append(Code("\n".join(t for _, t in shown), "python", first_line=shown[0][0],
                                   marked=set(span.get("match_lines") or [])))
            if read.get("error"):
                blocks.append(Para(f"✗ {read.get('file') or read.get('symbol')}: {read['error'].get('message')}"))
            elif read.get("not_found"):  # what this version lacks is part of the record, not a gap in it
                blocks.append(Para(f"✗ {read.get('id') or read.get('file') or read.get('symbol')}: "
                                   f"{read['not_found'].get('message')}"))
    return blocks if len(blocks) > 1 else []


def environment_section(session: LoadedSession) -> list[Block]:
    envs = [(s, r) for s, r in _results(session, "probe") if s.name and "gpus" in r.result]
    if not envs:
        return []
    blocks: list[Block] = [Heading("Environment")]
    for _step, r in envs:
        res = r.result
        gpus = ", ".join(f"{g.get('name')} ({g.get('memory_total_mib')} MiB)" for g in res.get("gpus", [])) or "none"
        pkgs = ", ".join(f"{k} {v}" for k, v in (res.get("packages") or {}).items() if v) or "—"
        torch = res.get("torch") or {}
        rows = [["host", r.host], ["python", str((res.get("python") or {}).get("version", ""))],
                ["os", str((res.get("os") or {}).get("platform", ""))], ["gpus", gpus],
                ["torch", f"{torch.get('version')} (cuda {torch.get('cuda_available')})" if torch.get("importable") else "not importable"],
                ["packages", pkgs]]
        blocks.append(Table(["", ""], rows))
    return blocks


def draft_test_section(session: LoadedSession) -> list[Block]:
    tests = _results(session, "draft_test")
    if not tests:
        return []
    blocks: list[Block] = [Heading("Standalone draft test")]
    for step, r in tests:
        res = r.result
        rows = [[str(w.get("tier", "")), str(w.get("name")), str(w.get("wiring")), _num(w.get("tau_serving")),
                 _ci(w.get("tau_serving_ci")), _vs(w.get("vs_server")), _num(w.get("tau")),
                 " ".join(f"{a:.2f}" for a in (w.get("acc") or [])[:5] if a is not None),
                 " ".join(_ci(c) for c in (w.get("acc_ci") or [])[:2]), _num(w.get("seconds"), 1)]
                for w in res.get("wirings", [])]
        # where the engine serves other parts than the draft was trained with (the target's head, no d2t...), the
        # decision is made on what is served, and "as trained" shows what the draft itself would score
        swapped = bool((res.get("parts") or {}).get("swapped"))
        if swapped:
            for row, w in zip(rows, res.get("wirings", []), strict=True):
                own = w.get("as_trained") or {}
                row.insert(5, f"{_num(own.get('tau_serving'))} {_ci(own.get('tau_serving_ci'))}")
        decision = res.get("decision")
        head = f"**{decision}** — " if decision else ""
        blocks.append(Para(f"Step {step.step_id} on {r.host}: {head}{res.get('verdict', '')}"))
        source = states_source_line(res.get("states"))
        if source:
            blocks.append(Para(source[0].upper() + source[1:] + "."))
        bound = ceiling_line(res.get("ceiling"), (res.get("server") or {}).get("tau_serving"))
        if bound:
            blocks.append(Para(bound[0].upper() + bound[1:] + "."))
        if res.get("prompts_to_decide"):
            blocks.append(Para(f"The sample ({res.get('prompts')} prompts) cannot decide; about "
                               f"{res['prompts_to_decide']} prompts would, if the spread per prompt holds."))
        if rows:
            blocks.append(Para(f"{res.get('prompts', '?')} prompts, K={res.get('steps', '?')}; 95% intervals over "
                               "prompts; wirings in the same tier have overlapping intervals (tied, not ranked); "
                               "\"vs served\" is the paired gain over the wiring the engine feeds."))
            columns = ["tier", "candidate", "wiring (HF hidden_states)", "tau (serving)", "95% CI",
                       "vs served (95% CI)", "tau", "acc_0..4", "acc_0, acc_1 95% CI", "s"]
            if swapped:
                columns.insert(5, "as trained: tau (serving), 95% CI")
                blocks.append(Para("Served parts differ from the draft's own: " + "; ".join(
                    f"{p.get('part')}: served {p.get('served')}, trained {p.get('trained')} ({p.get('why')})"
                    for p in res["parts"]["swapped"] if isinstance(p, dict))))
            blocks.append(Table(columns, rows))
    return blocks


def _vs(value: Any) -> str:
    if not isinstance(value, dict) or not isinstance(value.get("ratio"), (int, float)):
        return "—"
    return f"{value['ratio']:.2f}× ({_ci(value.get('ratio_ci'))})"
