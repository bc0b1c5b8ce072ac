"""Why a server failed to start, read from its own log: the error lines, and the likely cause.

A failed SGLang start leaves the server's own error a few lines above a run of uvicorn access lines
(``[ts] INFO:     127.0.0.1:54321 - "GET /health HTTP/1.1" 503 Service Unavailable``, the readiness poll), so
the last lines of the log say nothing. This module is pure (text in, ``StartFailure`` out): it drops access-log
and progress-bar noise, pulls out what the server itself said went wrong (argparse's ``error:`` line, each
Python traceback's last frame and exception, ``...Error``/``...Exception`` lines, SGLang's own failure lines
such as "Received sigquit from a child process"), and classifies the common causes so a playbook rule can
branch on ``srv.failure.cause``:

``unknown_flag``  argparse ``error: unrecognized arguments`` / ``ambiguous option`` (exit 2)
``ambiguous_flag``, ``bad_combination``  only from the pre-flight check (servers/preflight.py), before a start:
                  an abbreviation argparse cannot resolve, flags SGLang's start-up rules crash on
``invalid_flag``  another argparse error (a bad value, a missing required flag), or an unknown speculative
                  algorithm
``port_in_use``   ``address already in use`` (uvicorn, Errno 98) or SGLang's "Port is already in use"
``out_of_memory`` CUDA OOM (``torch.OutOfMemoryError``), SGLang's "Not enough memory", a scheduler killed by -9
``draft_load``    the draft model did not load (a traceback through ``srt/speculative/``, an error naming the
                  draft or its path)
``no_accelerator`` the speculative path needs a GPU kernel this host has not: SGLang's EAGLE on a CPU backend
                  (0.5.15.post1: Triton finds no GPU driver, "0 active drivers" from triton/runtime/driver.py, raised
                  in the scheduler at KV-pool init; 0.5.23: "EAGLE is not supported in decode attention backend
                  torch_native"; research/sglang-cpu.md, measured on this project's CPUs)
``timeout``       not ready within the limit, and nothing above explains why
``error``         the server reported an error that none of the above matches
``exited``        it exited and its log says nothing recognisable

Log shapes follow SGLang 0.5.x (research/sglang-interface.md): ``[%Y-%m-%d %H:%M:%S{ TPn}] message``, no level
name; uvicorn's lines carry ``INFO:``/``ERROR:``; a child's traceback is one log record that begins
"Scheduler hit an exception: Traceback (most recent call last):".

vLLM's log is three processes writing to one file (vllm/logger.py ``_FORMAT``): ``(APIServer pid=N) INFO 12-01
09:30:00 [file.py:123] message``, ``(EngineCore_DP0 pid=N) ...``, ``(Worker pid=N) ...``; a multi-line record (a
logged traceback) repeats the prefix on every line (NewLineFormatter), and an uncaught exception is written raw.
Such a log is read process by process (``split_processes``): tracebacks are parsed within one process's lines, only
its ERROR/CRITICAL records (and raw lines) count as error lines (an INFO/WARNING record such as the ulimit warning
naming ``OSError`` never does), and each error line keeps its process's prefix. The root cause is the first error
in log order, whichever process raised it; an exception that only points elsewhere ("Engine core initialization
failed. See root cause above.") is never taken for the cause while another exception exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

#: how many error lines a failure keeps (and a console shows)
MAX_ERROR_LINES = 8
#: a longer line is cut (SGLang's one-line ``server_args=ServerArgs(...)`` dump runs to 10k characters)
MAX_LINE = 240

CAUSE_LABELS = {
    "unknown_flag": "unknown flag",
    "invalid_flag": "invalid flag value",
    "ambiguous_flag": "ambiguous flag",
    "bad_combination": "flags that crash at start-up",
    "port_in_use": "port in use",
    "out_of_memory": "out of memory",
    "draft_load": "draft load error",
    "no_accelerator": "a CPU backend without EAGLE",
    "timeout": "timeout",
    "error": "server error",
    "exited": "exited",
}

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?(?: [^\]]*)?\]\s?")
_ACCESS = re.compile(
    r'^(?:INFO|WARNING|ERROR|DEBUG):\s+\S+:\d+ - "(?:GET|POST|PUT|DELETE|HEAD|OPTIONS|PATCH) \S+ HTTP/[\d.]+" \d{3}')
_PROGRESS = re.compile(r"\d+%(?: Completed)?\s*\|.*\d+/\d+")  # tqdm: "Loading safetensors checkpoint shards:  50% Completed | 1/2 ..."
_TRACEBACK = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s+File "([^"]+)", line \d+, in \S+')
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)\b(?::|$)")
_PYDANTIC_DETAIL = re.compile(r"^(?:Value error|Assertion failed), (?P<message>.+)$")  # pydantic's line per error
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
_ERROR_CASED = re.compile(r"\b(?:[A-Z]\w*)?(?:Error|Exception)\b|^ERROR:|\berror: ")
_ERROR_PHRASE = re.compile(r"\bErrno \d+|out of memory|already in use|Received sigquit|scheduler died|"
                           r"Initialization failed|hit an exception|start-up failed", re.IGNORECASE)

_UNKNOWN_FLAG = re.compile(r"error: (unrecognized arguments: .*|ambiguous option: .*)")
_ARGPARSE_ERROR = re.compile(r"^\S.*: error: (.*)$")
# (not SGLang's INFO "Port 30001 is already in use, trying port 30002": it picks its internal ports that way)
_PORT = re.compile(r"(?i:address already in use)|Errno 98\b|Port is already in use\.|is used by a process already")
_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|Not enough memory\. Please try to "
                  r"increase --mem-fraction-static|out of memory|scheduler died during initialization \(exit code: -9\)",
                  re.IGNORECASE)
_BAD_ALGO = re.compile(r"Unknown speculative algorithm name: \S+")
#: SGLang's speculative path on a host with no GPU: Triton's driver lookup (0.5.15.post1) or the CPU attention
#: backend's refusal (0.5.23)
_NO_ACCELERATOR = re.compile(r"0 active drivers \(\[\]\)|EAGLE is not supported in decode attention backend torch_native")
_DRAFT_FRAME = re.compile(r"/speculative/|eagle_worker|draft_worker|_eagle3?\.py|llama_eagle|/spec_decode/")
_DRAFT_WORD = re.compile(r"\bdraft\b|speculative_draft_model", re.IGNORECASE)
#: vLLM: ``(EngineCore_DP0 pid=123) ERROR 12-01 09:30:00 [core.py:123] message`` (the level part is absent on raw
#: stderr lines a process prints, e.g. an uncaught traceback)
_PROCESS = re.compile(r"^\((?P<proc>[A-Za-z_][\w.-]* pid=\d+)\) ?(?P<rest>.*)$")
_VLLM_RECORD = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
                          r"\[[^\]]*\] ?(?P<message>.*)$")
#: exceptions that only point at another one (vLLM's API server after its engine core died)
_POINTER = re.compile(r"See root cause above|stack trace (?:\(above\) |above )?for (?:the )?root cause|initialization failed due to an "
                      r"exception in a background process", re.IGNORECASE)


@dataclass
class Traceback:
    """One Python traceback in the log: what introduced it, its last frame, its exception line(s)."""

    start: int = 0  # the index of its "Traceback" line
    intro: str = ""
    frames: list[str] = field(default_factory=list)  # the File lines, in order
    last_frame: list[str] = field(default_factory=list)  # the last File line and its source line
    exception: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        head = [f"{self.intro} {_TRACEBACK}".strip()] if self.intro else []
        return head + self.last_frame + self.exception


@dataclass
class StartFailure:
    """What went wrong, for the step's result (``srv.failure``), the console and the report."""

    cause: str
    summary: str
    reason: str  # exited | timeout
    exit_code: int | None = None
    error_lines: list[str] = field(default_factory=list)
    last_lines: list[str] = field(default_factory=list)  # the log's last lines without access-log noise

    @property
    def label(self) -> str:
        return CAUSE_LABELS.get(self.cause, self.cause)

    def as_dict(self) -> dict[str, Any]:
        return {"cause": self.cause, "label": self.label, "summary": self.summary, "reason": self.reason,
                "exit_code": self.exit_code, "error_lines": list(self.error_lines), "last_lines": list(self.last_lines)}


def clean(line: str) -> str:
    return _ANSI.sub("", line).rstrip()


def strip_prefix(line: str) -> str:
    """The message without SGLang's ``[2026-11-30 10:00:00 TP0] `` prefix."""
    return _PREFIX.sub("", line, count=1)


def is_noise(line: str) -> bool:
    """A line that never explains a failure: blank, a uvicorn access line, a progress bar."""
    message = strip_prefix(clean(line)).strip()
    return not message or bool(_ACCESS.match(message)) or bool(_PROGRESS.search(message))


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE else line[:MAX_LINE - 1] + "…"


def parse_tracebacks(lines: list[str]) -> tuple[list[Traceback], set[int]]:
    """Every traceback in ``lines`` (cleaned), and the indices of the lines they span."""
    found: list[Traceback] = []
    spans: set[int] = set()
    i = 0
    while i < len(lines):
        line = lines[i]
        if _TRACEBACK not in line:
            i += 1
            continue
        intro = line.split(_TRACEBACK, 1)[0].rstrip()
        tb = Traceback(start=i, intro=intro if strip_prefix(intro).strip() else "")
        spans.add(i)
        i += 1
        while i < len(lines):
            text = lines[i]
            if _FRAME.match(text):
                tb.frames.append(text.strip())
                tb.last_frame = [text.strip()]
            elif text.startswith((" ", "\t")):
                # the frame's source line (and caret markers): keep the first one under the last frame
                if len(tb.last_frame) == 1 and text.strip() and set(text.strip()) - set("^~ "):
                    tb.last_frame.append("    " + text.strip())
            else:
                break
            spans.add(i)
            i += 1
        # the exception: the first unindented line, and its continuation up to a blank or a new log record
        while i < len(lines):
            text = lines[i]
            if not text.strip() or _PREFIX.match(text) or _TRACEBACK in text or text.startswith(_CHAIN):
                break
            if tb.exception and len(tb.exception) >= 3:
                spans.add(i)
                i += 1
                continue
            tb.exception.append(text.strip())
            spans.add(i)
            i += 1
        found.append(tb)
    return found, spans


def _error_items(lines: list[str]) -> tuple[list[list[str]], list[Traceback]]:
    """The server's own error lines, as items in log order: one per traceback, one per standalone error line."""
    items, _firsts = _error_items_at(lines)
    return items, parse_tracebacks(lines)[0]


def _error_items_at(lines: list[str], skip: set[int] | None = None) -> tuple[list[list[str]], list[int]]:
    """``_error_items``'s items and the index of each item's first line; ``skip``: lines that are never a
    standalone error line."""
    tracebacks, spans = parse_tracebacks(lines)
    starts = {tb.start: tb for tb in tracebacks}
    items: list[list[str]] = []
    firsts: list[int] = []
    seen: set[str] = set()
    for index, line in enumerate(lines):
        if index in starts:
            tb_lines = [_cut(x) for x in starts[index].lines()]
            key = "\n".join(strip_prefix(x) for x in tb_lines)
            if key not in seen:
                seen.add(key)
                items.append(tb_lines)
                firsts.append(index)
            continue
        if index in spans or is_noise(line) or (skip and index in skip):
            continue
        message = strip_prefix(line)
        if message.startswith("usage:") or message.startswith(" "):
            continue
        if (_ERROR_CASED.search(message) or _ERROR_PHRASE.search(message)) and not _looks_like_dump(message):
            if message not in seen:
                seen.add(message)
                items.append([_cut(line)])
                firsts.append(index)
    return items, firsts


def _looks_like_dump(message: str) -> bool:
    """SGLang's ``server_args=ServerArgs(...)`` line names every option; it is not an error."""
    return message.startswith(("server_args=", "ServerArgs("))


def _pick(items: list[list[str]], limit: int) -> list[str]:
    """At most ``limit`` lines: the first item (often the root cause), then the latest ones that fit."""
    if not items:
        return []
    first, rest = items[0][:limit], items[1:]
    tail: list[list[str]] = []
    room = limit - len(first)
    for item in reversed(rest):
        if len(item) > room:
            break
        tail.insert(0, item)
        room -= len(item)
    return first + [line for item in tail for line in item]


@dataclass
class ProcessLine:
    """One line of a multi-process log: the process that wrote it ("" when unprefixed), its level (None for a raw
    line), and the message without the prefixes."""

    index: int
    proc: str
    level: str | None
    message: str


def split_processes(lines: list[str]) -> list[ProcessLine] | None:
    """vLLM's prefixed lines, or None when the log has none (an SGLang or lab log)."""
    out: list[ProcessLine] = []
    prefixed = False
    for index, line in enumerate(lines):
        match = _PROCESS.match(line)
        if not match:
            out.append(ProcessLine(index, "", None, line))
            continue
        prefixed = True
        rest = match.group("rest")
        record = _VLLM_RECORD.match(rest)
        out.append(ProcessLine(index, match.group("proc"), record.group("level") if record else None,
                               record.group("message") if record else rest))
    return out if prefixed else None


def _process_items(parts: list[ProcessLine]) -> tuple[list[list[str]], list[Traceback]]:
    """``_error_items`` process by process, merged in log order, each item labelled with its process."""
    streams: dict[str, list[ProcessLine]] = {}
    for part in parts:
        streams.setdefault(part.proc, []).append(part)
    ordered: list[tuple[int, list[str]]] = []
    tracebacks: list[tuple[int, Traceback]] = []
    for proc, stream in streams.items():
        messages = [p.message for p in stream]
        # a record logged below ERROR is never an error line (it can still be inside a logged traceback)
        quiet = {i for i, p in enumerate(stream) if p.level in ("DEBUG", "INFO", "WARNING")}
        found, _spans = parse_tracebacks(messages)
        tracebacks += [(stream[tb.start].index, tb) for tb in found]
        items, first_lines = _error_items_at(messages, skip=quiet)
        label = f"({proc}) " if proc else ""
        for at, item in zip(first_lines, items, strict=True):
            ordered.append((stream[at].index, [label + item[0], *item[1:]]))
    ordered.sort(key=lambda pair: pair[0])
    tracebacks.sort(key=lambda pair: pair[0])
    seen: set[str] = set()
    merged: list[list[str]] = []
    for _index, item in ordered:
        key = "\n".join(item)
        if key not in seen:
            seen.add(key)
            merged.append(item)
    return merged, [tb for _i, tb in tracebacks]


def _read_log(log_text: str) -> tuple[list[str], list[Any], list[Any], list[str]]:
    """(cleaned lines, error items, tracebacks, what the cause is read from) of a server log: per process where the
    engine prefixes its lines (vLLM), else as one stream. The cause is read from ERROR/CRITICAL records and raw
    lines (a WARNING naming OSError is not one)."""
    lines = [clean(line) for line in log_text.splitlines()]
    parts = split_processes(lines)
    if parts is None:
        items, tracebacks = _error_items(lines)
        return lines, items, tracebacks, lines
    items, tracebacks = _process_items(parts)
    return lines, items, tracebacks, [p.message for p in parts if p.level not in ("DEBUG", "INFO", "WARNING")]


def analyse_start_failure(log_text: str, *, reason: str, exit_code: int | None = None,
                          timeout: float | None = None, draft_path: str | None = None) -> StartFailure:
    """Read a failed start's log. ``reason``: exited | timeout (the readiness wait's answer)."""
    lines, items, tracebacks, said = _read_log(log_text)
    error_lines = _pick(items, MAX_ERROR_LINES)
    last_lines = [_cut(line) for line in lines if not is_noise(line)][-MAX_ERROR_LINES:]
    messages = [strip_prefix(line) for line in said if not is_noise(line)]
    text = "\n".join(messages)
    cause, summary = _classify(text, messages, tracebacks, reason=reason, exit_code=exit_code, timeout=timeout,
                               draft_path=draft_path)
    return StartFailure(cause=cause, summary=summary, reason=reason, exit_code=exit_code, error_lines=error_lines,
                        last_lines=last_lines)


def _exception_line(tb: Traceback) -> str:
    """A traceback's exception as one line. pydantic's ValidationError (vLLM validates its config classes with it)
    says only "1 validation error for SpeculativeConfig"; what the validator raised is the line under it
    (``Value error, Model architectures [...] are not supported for now.``), so it joins the summary."""
    head = tb.exception[0]
    if "ValidationError" in head:
        detail = next((m for m in map(_PYDANTIC_DETAIL.match, tb.exception[1:]) if m), None)
        if detail:
            return f"{head}: {detail['message']}"
    return head


def _last_exception(tracebacks: list[Traceback], messages: list[str]) -> str | None:
    """The latest exception that is itself a cause (not one that points at another, "See root cause above")."""
    candidates = [_exception_line(tb) for tb in tracebacks if tb.exception]
    candidates += [m for m in messages if _EXCEPTION.match(m)] if not candidates else []
    causes = [c for c in candidates if not _POINTER.search(c)]
    pool = causes or candidates
    return pool[-1] if pool else None


def _classify(text: str, messages: list[str], tracebacks: list[Traceback], *, reason: str, exit_code: int | None,
              timeout: float | None, draft_path: str | None) -> tuple[str, str]:
    flag = _UNKNOWN_FLAG.search(text)
    if flag:
        return "unknown_flag", f"the server does not accept a flag ({flag.group(1)})"
    argparse_error = next((m for m in map(_ARGPARSE_ERROR.match, messages) if m), None)
    if argparse_error and (exit_code == 2 or any(m.startswith("usage:") for m in messages)):
        return "invalid_flag", f"the server's argument parser refused the command line ({argparse_error.group(1)})"
    port = _PORT.search(text)
    if port:
        line = next((m for m in reversed(messages) if _PORT.search(m)), port.group(0))
        return "port_in_use", f"a port the server needs is already in use ({_cut(line.strip())})"
    oom = next((m for m in reversed(messages) if _OOM.search(m)), None)
    if oom:
        return "out_of_memory", f"out of memory while starting ({_cut(oom.strip())})"
    algo = _BAD_ALGO.search(text)
    if algo:
        return "invalid_flag", f"the server refused the speculative algorithm ({algo.group(0)})"
    exception = _last_exception(tracebacks, messages)
    no_gpu = next((m for m in messages if _NO_ACCELERATOR.search(m)), None)
    if no_gpu:
        return "no_accelerator", (f"{_cut((exception if exception and _NO_ACCELERATOR.search(exception) else no_gpu).strip())}"
                                  " (the speculative path needs a GPU: SGLang's EAGLE runs Triton/CUDA kernels, and "
                                  "on a CPU only from 0.5.16 on AMX Xeons with sgl-kernel built from source)")
    draft_frames = any(_DRAFT_FRAME.search(f) for tb in tracebacks for f in tb.frames)
    error_messages = [m for m in messages if _ERROR_CASED.search(m) and not _looks_like_dump(m)]
    names_draft = any(_DRAFT_WORD.search(m) or (draft_path and draft_path in m) for m in error_messages)
    if draft_frames or names_draft:
        in_draft = [tb.exception[0] for tb in tracebacks
                    if tb.exception and any(_DRAFT_FRAME.search(f) for f in tb.frames)]
        what = (in_draft[-1] if in_draft else exception) or next(
            (m for m in reversed(error_messages) if _DRAFT_WORD.search(m)), None)
        return "draft_load", "the draft model could not be loaded" + (f" ({_cut(what)})" if what else "")
    if reason == "timeout":
        limit = f"{timeout:g}s" if timeout is not None else "the limit"
        tail = f"; last error: {_cut(exception)}" if exception else ""
        return "timeout", f"not ready within {limit}{tail}"
    if exception or error_messages:
        return "error", _cut(exception or error_messages[-1])
    code = f" with code {exit_code}" if exit_code is not None else ""
    return "exited", f"exited{code}; the log names no error"


@dataclass
class RuntimeFailure:
    """A serving server's own error (the reason behind an HTTP 500): the latest traceback's last frame and exception
    in its log (process-labelled for vLLM), or the latest error line."""

    summary: str
    error_lines: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {"summary": self.summary, "error_lines": list(self.error_lines)}


def analyse_runtime_error(log_text: str) -> RuntimeFailure | None:
    """The error a running server logged (read from the part of its log written while it served); None: none."""
    _lines, items, tracebacks, said = _read_log(log_text)
    if not items:
        return None
    exception = _last_exception(tracebacks, [strip_prefix(m) for m in said if not is_noise(m)])
    # the item that holds the cause: the latest traceback whose exception is not a pointer, else the latest item
    chosen = next((item for item in reversed(items) if exception and any(exception in line for line in item)),
                  items[-1])
    return RuntimeFailure(summary=_cut(exception or strip_prefix(chosen[-1])), error_lines=chosen[:MAX_ERROR_LINES])
