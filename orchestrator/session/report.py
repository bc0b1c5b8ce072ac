"""The postmortem report: built from the event log alone, so any saved session can be reported.

Sections are functions from the loaded session to blocks; other areas add sections by appending to
``SECTIONS`` (hypotheses, servers, sweeps, source excerpts, environment).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from orchestrator.events import NoteAdded, Output, StepFinished, StepStarted
from orchestrator.session.document import Block, Code, Heading, Para, Table, to_html, to_markdown
from orchestrator.session.reader import LoadedSession, read_session

#: a report is written as ``<name>.part`` beside it, then renamed: such a file is never part of the record
PARTIAL_SUFFIX = ".part"

Section = Callable[[LoadedSession], list[Block]]
EXCERPT_LINES = 15


def _outputs(session: LoadedSession) -> dict[str, str]:
    texts: dict[str, list[str]] = {}
    for e in session.events:
        if isinstance(e, Output) and e.stream in ("stdout", "stderr"):
            texts.setdefault(e.step_id, []).append(e.text)
    return {k: "".join(v) for k, v in texts.items()}


def _command_of(args: dict[str, Any]) -> str:
    if "command" in args:
        return str(args["command"])
    if "argv" in args:
        return " ".join(map(str, args["argv"]))
    return ", ".join(f"{k}={v}" for k, v in args.items() if not isinstance(v, (dict, list)))[:200]


def header_section(session: LoadedSession) -> list[Block]:
    start, fin = session.started, session.finished
    title = start.playbook if start else session.name
    blocks: list[Block] = [Heading(f"Postmortem: {title}", 1)]
    facts = []
    if start:
        when = datetime.fromtimestamp(start.ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        facts.append(f"Started {when} on {', '.join(start.hosts) or '-'}; session `{start.session_id}`.")
        if start.description:
            facts.append(start.description.strip())
    if fin:
        counts = ", ".join(f"{v} {k}" for k, v in sorted(fin.counts.items()))
        facts.append(f"Finished **{fin.status}** after {fin.duration:.1f}s ({counts}).")
    else:
        facts.append("The session did not finish (killed or still running): this report covers what was logged.")
    blocks.extend(Para(f) for f in facts)
    problems = session.problems
    if problems:
        label = "Incomplete record" if session.incomplete else "Problems"
        blocks.append(Para(f"**{label}**: {len(problems)} thing(s) went wrong beside the steps; "
                           "what follows may miss what they cost."))
        blocks.append(Table(["problem"], [[p] for p in problems]))
    return blocks


def timeline_section(session: LoadedSession) -> list[Block]:
    started = {e.step_id: e for e in session.of_type(StepStarted)}
    outputs = _outputs(session)
    t0 = session.started.ts if session.started else 0.0
    rows: list[list[str]] = []
    details: list[Block] = []
    for e in session.of_type(StepFinished):
        hosts = ", ".join(f"{r.host}:{r.status}" for r in e.results) or "-"
        rows.append([f"+{e.ts - t0:.1f}s", e.step_id, e.name, e.action, e.status + (" (ignored)" if e.ignored else ""),
                     hosts, f"{e.duration:.2f}s"])
        begin = started.get(e.step_id)
        details.append(Heading(f"{e.step_id} · {e.name} — {e.status}", 3))
        if begin is not None and begin.args:
            details.append(Para(f"`{e.action}`: `{_command_of(begin.args)}`"))
        if begin is not None and begin.location:
            details.append(Para(f"Defined at `{begin.location}`."))
        if begin is not None and begin.author:
            details.append(Para(f"Ad-hoc, asked for by **{begin.author}**."))
        if e.error:
            details.append(Para(f"Error: {e.error}"))
        text = outputs.get(e.step_id, "")
        if text.strip():
            lines = text.rstrip("\n").splitlines()
            excerpt = lines[-EXCERPT_LINES:]
            more = f"… {len(lines) - len(excerpt)} earlier lines in outputs/\n" if len(lines) > len(excerpt) else ""
            details.append(Code(more + "\n".join(excerpt)))
    if not rows:
        return [Heading("Timeline"), Para("No step finished.")]
    return [Heading("Timeline"), Table(["at", "id", "step", "kind", "status", "hosts", "took"], rows),
            Heading("Steps"), *details]


def notes_section(session: LoadedSession) -> list[Block]:
    notes = session.of_type(NoteAdded)
    if not notes:
        return []
    t0 = session.started.ts if session.started else 0.0
    return [Heading("Notes"), Table(["at", "note", "about"],
                                    [[f"+{n.ts - t0:.1f}s", n.text, n.hypothesis_id or n.step_id or ""] for n in notes])]


def _investigation_sections() -> list[Section]:
    from orchestrator.session import report_sections as rs
    from orchestrator.session.board_check import contradictions_section
    from orchestrator.session.report_acceptance import acceptance_section
    from orchestrator.session.report_traffic import traffic_section
    from orchestrator.session.report_tuning import tuning_section

    return [rs.verdict_section, contradictions_section, acceptance_section, traffic_section, rs.hypotheses_section, rs.servers_section,
            rs.sweeps_section, tuning_section, rs.draft_test_section, rs.sources_section, rs.environment_section]


SECTIONS: list[Section] = [header_section, *_investigation_sections(), timeline_section, notes_section]


def build_blocks(session: LoadedSession, failures: list[str] | None = None) -> list[Block]:
    """The report's blocks; a section that raises is replaced by a line saying so, and named in
    ``failures`` (when given) so the caller can say it too."""
    blocks: list[Block] = []
    for section in SECTIONS:
        try:
            blocks.extend(section(session))
        except Exception as exc:  # one broken section must not hide the others
            failure = f"section {getattr(section, '__name__', section)} failed: {type(exc).__name__}: {exc}"
            blocks.append(Para(f"({failure})"))
            if failures is not None:
                failures.append(failure)
    return blocks


def render_report(directory: str | Path, *, fmt: str = "md", failures: list[str] | None = None,
                  session: LoadedSession | None = None, with_prompts: bool = False) -> str:
    """The report of the session in ``directory`` (``session``: that session read already, so the md and html
    reports of a run read its log once). ``with_prompts``: a replayed traffic file's requests, one by one with the
    start of each prompt, read from the file now (report_traffic.prompt_blocks); never written into the session."""
    directory = Path(directory)
    session = session if session is not None else read_session(directory)
    blocks = build_blocks(session, failures)
    if with_prompts:
        from orchestrator.session.report_traffic import prompt_blocks

        blocks += prompt_blocks(session)
    if fmt == "html":
        return to_html(blocks, directory, f"Postmortem {session.name}")
    return to_markdown(blocks, directory)


def write_report(directory: str | Path, *, fmt: str = "md", failures: list[str] | None = None,
                 session: LoadedSession | None = None) -> Path:
    directory = Path(directory)
    path = directory / f"report.{fmt}"
    text = render_report(directory, fmt=fmt, failures=failures, session=session)
    # Beside it, then renamed: a full disk must not leave a truncated report that looks like a whole one.
    partial = path.with_name(path.name + PARTIAL_SUFFIX)
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return path
