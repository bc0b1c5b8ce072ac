# orchestrator-agent: in-process
"""Probe: read source of an installed Python package (sglang, vllm, ...) WITHOUT importing it.

Standard library only, Python >= 3.9. Run as ``python3 sglang_source.py ARGS.json`` next to ``_probe.py``, or
inside the agent's own process (the marker line above this docstring; remote_probes/_agent.py): pure and
read-only, it changes nothing in the process (sys.path included), and what it learns about a tree (where the
package is, its version, the files' text, their symbol indexes, the file list) is kept across calls, each entry
checked against the mtimes (and sizes) it came from before it is reused, so a reinstalled package or an edited
file is read afresh.

Args: ``{"package": "sglang", "sys_path": [dirs prepended to sys.path], "reads": [READ, ...]}`` where a READ is
``{"file"?: path relative to the package root (a leading "<package>/" is accepted) or absolute,
   "under"?: a directory relative to the package root that limits a symbol/pattern search (instead of "file"),
   exactly one of  "lines": "155,200" | "155,+45" | "/re/,/re/" | "/re/,+5" | "$" | "10,$" | "42"
                 | "symbol": "EAGLEWorker.__init__"   (ast; whole package, or "under", when "file" is absent)
                 | "pattern": "regex", "context": 3   (grep; whole package, or "under", when "file" is absent),
   "any_of"?: [ALTERNATIVE, ...]  ordered alternatives (file/under/lines/symbol/pattern/context/max_matches), each
              merged over the read's own keys; the first that finds something is the read's result,
   "max_matches"?: 20, "max_lines"?: 2000, "expect"?: {"contains"|"regex"|"not_contains": str}}``.

Result: ``{"package", "version", "dist", "root", "python", "reads": [...]}``; each read is
``{"index", "found", "file", "abs_path", "start", "end", "total_lines", "lines": [[n, text], ...], "symbol"?,
"matches"?, "truncated"?, "alternative"?, "tried"?, "expect"?: {"passed", "checks"},
"not_found"?: {"kind", "message", ...}, "error"?: {"kind", "message", ...}}``.
A read that finds nothing in this version (missing file or directory, no such symbol, no matching line, a line
past the end) is ``found: false`` with ``not_found`` ("not found in sglang 0.5.23: ..."): a fact about the version,
not a failure. ``error`` is kept for mistakes in the read itself (bad regex, bad address, unknown keys) and I/O.
One read's error never fails the others; an unknown package fails the whole probe (kind ``package_not_found``) and
says where it looked.
"""

from __future__ import annotations

import difflib
import importlib.machinery
import importlib.metadata as metadata
import importlib.util
import os
import re
import sys
import threading
from collections import OrderedDict
from typing import Any

from remote_probes.agent.protocol import ProbeFailure, progress, run_probe
from remote_probes.engine.source_address import (
    ReadError,
    all_qualnames,
    compile_regex,
    find_symbols,
    resolve_range,
    symbol_index,
)
from remote_probes.engine.thread_safe_ast import parse as parse_python

DEFAULT_MAX_LINES = 2000
DEFAULT_MAX_MATCHES = 20
DEFAULT_CONTEXT = 3
_SKIP_DIRS = {"__pycache__", ".git", "node_modules"}
# Bounds of what an agent keeps between calls (a one-shot run ends before it matters).
_TEXT_CACHE_BYTES = 64 * 1024 * 1024
_SYMBOL_CACHE_FILES = 4096  # an index is small: a few KiB a file


# ---------------------------------------------------------------- locating the package


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


# (package, sys_path) -> (the directory mtimes it was found under, what was found): a pip install or uninstall
# changes a directory on the search path or the package's own, and the entry is found afresh.
_LOCATED: dict[tuple[str, tuple[str, ...]], tuple[tuple[int | None, ...], dict[str, Any]]] = {}


def locate_package(package: str, extra: list[str] | None = None) -> dict[str, Any]:
    """Find the package's directory with find_spec of the top-level name (which does not run its __init__), looking
    in ``extra`` directories first, then where the interpreter itself would (sys.path mutated: never)."""
    extra = list(extra or [])
    key = (package, tuple(extra))
    watched = [*extra, *sys.path]
    cached = _LOCATED.get(key)
    if cached is not None:
        stamp = tuple(_mtime(d) for d in [*watched, cached[1]["root"]])
        if stamp == cached[0]:
            return dict(cached[1])
    located = _locate_package(package, extra)
    _LOCATED[key] = (tuple(_mtime(d) for d in [*watched, located["root"]]), located)
    return dict(located)


def _locate_package(package: str, extra: list[str]) -> dict[str, Any]:
    parts = package.split(".")
    top = parts[0]
    try:
        spec = importlib.machinery.PathFinder.find_spec(top, extra) if extra else None
        if spec is None:
            spec = importlib.util.find_spec(top)
    except (ImportError, ValueError) as exc:
        spec = None
        progress("find_spec failed", package=top, error=str(exc))
    if spec is None:
        raise ProbeFailure("package_not_found",
                           f"package {top!r} is not installed for {sys.executable} (searched sys.path)",
                           python=sys.executable, sys_path=[*extra, *sys.path])
    if spec.submodule_search_locations:
        root = list(spec.submodule_search_locations)[0]
    elif spec.origin:
        root = spec.origin  # a single-module package: reads address that one file
    else:
        raise ProbeFailure("package_not_found", f"package {top!r} has no location on disk", python=sys.executable)
    root = os.path.realpath(root)
    site_dir = os.path.dirname(root)
    for sub in parts[1:]:  # "sglang.srt" -> <root>/srt, resolved on disk so nothing is imported
        root = os.path.join(root, sub)
    if not os.path.exists(root):
        raise ProbeFailure("package_not_found", f"{package!r} resolves to {root}, which does not exist", root=root)
    dist_name, version = _distribution_of(top, site_dir, [*extra, *sys.path])
    return {"package": package, "version": version, "dist": dist_name, "root": root}


def _distribution_of(top: str, site_dir: str, search: list[str]) -> tuple[str | None, str | None]:
    """The distribution that installed ``top``: first the one in the same directory (pip --target), then any."""
    candidates = [metadata.distributions(path=[site_dir]), metadata.distributions(path=search)]
    wanted = top.lower().replace("_", "-")
    for dists in candidates:
        for dist in dists:
            name, version = _name_and_version(dist)
            if (name or "").lower().replace("_", "-") == wanted or top in _top_level_names(dist):
                return name, version
    return None, None


def _name_and_version(dist: metadata.Distribution) -> tuple[str | None, str | None]:
    """Name and Version from the metadata's header block only. ``dist.metadata`` runs the email parser over the whole
    file, long description included: on sglang that was most of a source read's time once the agent took Python's
    start-up away."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the headers end at the first blank line; the description follows
        key, sep, value = line.partition(":")
        if sep and key in ("Name", "Version") and key not in found:
            found[key] = value.strip()
    return found.get("Name"), found.get("Version")


def _top_level_names(dist: metadata.Distribution) -> set[str]:
    text = dist.read_text("top_level.txt")
    if text:
        return {line.strip() for line in text.splitlines() if line.strip()}
    names = set()
    for file in dist.files or []:  # RECORD entries like "sglang/__init__.py"
        first = str(file).split("/")[0]
        if not first.endswith((".dist-info", ".data")) and ".." not in first:
            names.add(first[:-3] if first.endswith(".py") else first)
    return names


# ---------------------------------------------------------------- files


class _SharedFiles:
    """Text and symbol indexes (source_address.symbol_index, the one walk of a file's AST) of files, kept across the calls an agent serves, each keyed by the file's (mtime, size) when
    read: an edited file is read again. Bounded (least recently used goes first); one lock, calls may be concurrent."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._text: OrderedDict[str, tuple[tuple[int, int], str, list[str]]] = OrderedDict()
        self._symbol_index: OrderedDict[str, tuple[tuple[int, int], list[tuple[str, int, int]]]] = OrderedDict()
        self._bytes = 0

    def text(self, path: str, stamp: tuple[int, int]) -> tuple[str, list[str]] | None:
        with self._lock:
            entry = self._text.get(path)
            if entry is None or entry[0] != stamp:
                return None
            self._text.move_to_end(path)
            return entry[1], entry[2]

    def keep_text(self, path: str, stamp: tuple[int, int], text: str, lines: list[str]) -> None:
        with self._lock:
            old = self._text.pop(path, None)
            if old is not None:
                self._bytes -= len(old[1])
            self._text[path] = (stamp, text, lines)
            self._bytes += len(text)
            while self._bytes > _TEXT_CACHE_BYTES and len(self._text) > 1:
                self._bytes -= len(self._text.popitem(last=False)[1][1])

    def symbols(self, path: str, stamp: tuple[int, int]) -> list[tuple[str, int, int]] | None:
        with self._lock:
            entry = self._symbol_index.get(path)
            if entry is None or entry[0] != stamp:
                return None
            self._symbol_index.move_to_end(path)
            return entry[1]

    def keep_symbols(self, path: str, stamp: tuple[int, int], index: list[tuple[str, int, int]]) -> None:
        with self._lock:
            self._symbol_index[path] = (stamp, index)
            self._symbol_index.move_to_end(path)
            while len(self._symbol_index) > _SYMBOL_CACHE_FILES:
                self._symbol_index.popitem(last=False)


_SHARED_FILES = _SharedFiles()


class FileCache:
    """Each file is read and split once per run, however many reads address it (the batch stays cheap); across
    runs in one agent, a file whose (mtime, size) has not changed is not read again."""

    def __init__(self, shared: _SharedFiles | None = None) -> None:
        self._shared = shared or _SHARED_FILES
        self._stamps: dict[str, tuple[int, int]] = {}
        self._text: dict[str, str] = {}
        self._lines: dict[str, list[str]] = {}
        self._symbols: dict[str, list[tuple[str, int, int]]] = {}

    def _stamp(self, path: str) -> tuple[int, int]:
        if path not in self._stamps:
            info = os.stat(path)
            self._stamps[path] = (info.st_mtime_ns, info.st_size)
        return self._stamps[path]

    def _load(self, path: str) -> None:
        stamp = self._stamp(path)
        kept = self._shared.text(path, stamp)
        if kept is None:
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
            kept = (text, text.splitlines())
            self._shared.keep_text(path, stamp, *kept)
        self._text[path], self._lines[path] = kept

    def text(self, path: str) -> str:
        if path not in self._text:
            self._load(path)
        return self._text[path]

    def lines(self, path: str) -> list[str]:
        if path not in self._lines:
            self._load(path)
        return self._lines[path]

    def symbols(self, path: str) -> list[tuple[str, int, int]]:
        """Every class and function of the file with its lines. :raises SyntaxError: the file does not parse."""
        if path not in self._symbols:
            stamp = self._stamp(path)
            index = self._shared.symbols(path, stamp)
            if index is None:
                index = symbol_index(parse_python(self.text(path), filename=path))
                self._shared.keep_symbols(path, stamp, index)
            self._symbols[path] = index
        return self._symbols[path]


def resolve_file(root: str, package: str, file: str) -> tuple[str, str]:
    """(relative name for display, absolute path). Raises ReadError(file_not_found) with likely successors."""
    base = root if os.path.isdir(root) else os.path.dirname(root)
    if os.path.isabs(file):
        abs_path = file
        rel = os.path.relpath(file, base) if file.startswith(base + os.sep) else file
    else:
        rel = file.replace("\\", "/").lstrip("/")
        for prefix in (package.replace(".", "/") + "/", package.split(".")[0] + "/"):
            if rel.startswith(prefix):
                rel = rel[len(prefix):]
                break
        abs_path = os.path.join(base, rel)
    if os.path.isfile(abs_path):
        return rel, abs_path
    raise ReadError("file_not_found", f"{rel} does not exist under {base}", **_successors(base, abs_path))


def _successors(base: str, abs_path: str) -> dict[str, Any]:
    """Files that likely replaced a missing one: similar names in its directory, same name elsewhere."""
    directory, name = os.path.split(abs_path)
    while not os.path.isdir(directory) and len(directory) > len(base):
        directory = os.path.dirname(directory)  # the directory itself moved: look in the nearest parent
    stem = os.path.splitext(name)[0]
    siblings = sorted(n for n in os.listdir(directory) if n.endswith(".py")) if os.path.isdir(directory) else []
    similar = [n for n in siblings if os.path.splitext(n)[0].startswith(stem) or stem.startswith(os.path.splitext(n)[0] + "_")]
    for n in difflib.get_close_matches(name, siblings, n=6, cutoff=0.6):
        if n not in similar:
            similar.append(n)
    elsewhere = []
    if os.path.isdir(base):
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
            if name in filenames:
                elsewhere.append(os.path.relpath(os.path.join(dirpath, name), base))
    rel_dir = os.path.relpath(directory, base).replace(os.sep, "/") if os.path.isdir(directory) else "."
    prefix = "" if rel_dir == "." else rel_dir + "/"
    return {"directory": rel_dir, "successors": [prefix + n for n in similar[:10]],
            "same_name_elsewhere": [e.replace(os.sep, "/") for e in elsewhere[:10]]}


# root -> (every directory walked with its mtime, the files found): reused while no directory changed.
_FILE_LISTS: dict[str, tuple[list[tuple[str, int | None]], list[str]]] = {}


def package_files(root: str) -> list[str]:
    """Every .py file of the package, sorted, so whole-package searches are deterministic."""
    if os.path.isfile(root):
        return [root]
    cached = _FILE_LISTS.get(root)
    if cached is not None and all(_mtime(d) == m for d, m in cached[0]):
        return list(cached[1])
    found: list[str] = []
    walked: list[tuple[str, int | None]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        walked.append((dirpath, _mtime(dirpath)))
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        found.extend(os.path.join(dirpath, n) for n in sorted(filenames) if n.endswith(".py"))
    _FILE_LISTS[root] = (walked, found)
    return list(found)


# ---------------------------------------------------------------- one read


_ALTERNATIVE_KEYS = {"file", "under", "lines", "symbol", "pattern", "context", "max_matches"}
_READ_KEYS = _ALTERNATIVE_KEYS | {"max_lines", "expect", "id", "any_of"}
_EXPECT_KEYS = ("contains", "regex", "not_contains")
# What a version may simply not have: recorded as not_found (evidence about that version), never as an error.
_NOT_FOUND_KINDS = {"file_not_found", "dir_not_found", "symbol_not_found", "no_match", "out_of_range"}


def _span(cache: FileCache, rel: str, abs_path: str, start: int, end: int, budget: list[int]) -> dict[str, Any]:
    lines = cache.lines(abs_path)
    take = max(0, min(end - start + 1, budget[0]))
    budget[0] -= take
    return {"file": rel, "abs_path": abs_path, "start": start, "end": end, "total_lines": len(lines),
            "lines": [[n, lines[n - 1]] for n in range(start, start + take)]}


def _int_arg(read: dict[str, Any], key: str, default: int) -> int:
    value = read.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ReadError("bad_read", f"{key!r} must be a non-negative integer, got {value!r}")
    return value


def _under(ctx: dict[str, Any], read: dict[str, Any]) -> str | None:
    """The read's ``under`` directory, relative to the package root without a trailing slash (None: no limit)."""
    if not read.get("under"):
        return None
    rel = str(read["under"]).replace("\\", "/").strip("/")
    package = ctx["package"]
    for prefix in (package.replace(".", "/") + "/", package.split(".")[0] + "/"):
        if rel.startswith(prefix):
            rel = rel[len(prefix):]
            break
    if os.path.isabs(str(read["under"])) or ".." in rel.split("/"):
        raise ReadError("bad_read", f"'under' must be a directory inside the package, got {read['under']!r}")
    return rel


def _where(ctx: dict[str, Any], read: dict[str, Any]) -> str:
    """Where a search looked, for messages: the file, the directory or the whole package."""
    if read.get("file"):
        return str(read["file"])
    under = _under(ctx, read)
    return f"{under}/" if under else "the package"


def _resolve(ctx: dict[str, Any], file: str) -> tuple[str, str]:
    """resolve_file, once per call for each name however many reads address it (a batch reads one file often)."""
    resolved: dict[str, tuple[str, str]] = ctx.setdefault("resolved", {})
    if file not in resolved:
        resolved[file] = resolve_file(ctx["root"], ctx["package"], file)
    return resolved[file]


def _targets(ctx: dict[str, Any], read: dict[str, Any]) -> list[tuple[str, str]]:
    if read.get("file"):
        return [_resolve(ctx, str(read["file"]))]
    base = ctx["root"] if os.path.isdir(ctx["root"]) else os.path.dirname(ctx["root"])
    every = [(os.path.relpath(p, base).replace(os.sep, "/"), p) for p in ctx["files"]()]
    under = _under(ctx, read)
    if under is None:
        return every
    if not os.path.isdir(os.path.join(base, under)):
        # directories move between versions too (0.5.23 added srt/arg_groups): a fact, reported as not found
        raise ReadError("dir_not_found", f"{under}/ does not exist under {base}")
    return [(rel, p) for rel, p in every if rel.startswith(under + "/")]


def _read_symbol(ctx: dict[str, Any], read: dict[str, Any], budget: list[int]) -> list[dict[str, Any]]:
    symbol = str(read["symbol"])
    if not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", symbol):
        raise ReadError("bad_read", f"symbol {symbol!r} is not a dotted Python name")
    cache: FileCache = ctx["cache"]
    # Every component must be defined in the file; checking them all keeps "X.__init__" from parsing every file.
    parts = symbol.split(".")
    needles = [re.compile(r"\b(?:def|class)\s+" + re.escape(part) + r"\b") for part in parts]
    limit = _int_arg(read, "max_matches", DEFAULT_MAX_MATCHES)
    matches: list[dict[str, Any]] = []
    unparsable = []
    for rel, abs_path in _targets(ctx, read):
        text = cache.text(abs_path)
        if not all(part in text for part in parts) or not all(needle.search(text) for needle in needles):
            continue  # cheap textual filter before paying for ast.parse
        try:
            hits = find_symbols(cache.symbols(abs_path), symbol)
        except SyntaxError as exc:
            unparsable.append(f"{rel}: {exc}")
            continue
        for qual, start, end in hits:
            if len(matches) < limit:
                matches.append(dict(_span(cache, rel, abs_path, start, end, budget), symbol=qual))
            else:
                ctx["truncated"] = True
    if not matches:
        details: dict[str, Any] = {"symbol": symbol, "unparsable": unparsable[:5]}
        if read.get("file"):
            rel, abs_path = _targets(ctx, read)[0]
            names = all_qualnames(cache.symbols(abs_path)) if not unparsable else []
            details["similar"] = difflib.get_close_matches(symbol, names, n=6, cutoff=0.5)
        raise ReadError("symbol_not_found", f"no class or function {symbol!r} in {_where(ctx, read)}", **details)
    return matches


def _read_pattern(ctx: dict[str, Any], read: dict[str, Any], budget: list[int]) -> list[dict[str, Any]]:
    pattern = compile_regex(str(read["pattern"]))
    context = _int_arg(read, "context", DEFAULT_CONTEXT)
    limit = _int_arg(read, "max_matches", DEFAULT_MAX_MATCHES)
    cache: FileCache = ctx["cache"]
    hunks: list[dict[str, Any]] = []
    count = 0
    for rel, abs_path in _targets(ctx, read):
        if not pattern.search(cache.text(abs_path)):
            continue
        lines = cache.lines(abs_path)
        hits: list[int] = []
        for n, line in enumerate(lines, 1):
            if pattern.search(line):
                if count >= limit:
                    ctx["truncated"] = True
                    break
                hits.append(n)
                count += 1
        group: list[int] = []
        for hit in [*hits, None]:  # merge hits whose context windows touch, as grep does
            if group and (hit is None or hit - context > group[-1] + context + 1):
                start, end = max(1, group[0] - context), min(len(lines), group[-1] + context)
                hunks.append(dict(_span(cache, rel, abs_path, start, end, budget), match_lines=group))
                group = []
            if hit is not None:
                group.append(hit)
        if count >= limit and ctx.get("truncated"):
            break
    if not hunks:
        raise ReadError("no_match", f"no line matches /{pattern.pattern}/ in {_where(ctx, read)}", pattern=pattern.pattern)
    return hunks


def _check_expect(expect: Any, text: str) -> dict[str, Any]:
    if not isinstance(expect, dict) or not expect or set(expect) - set(_EXPECT_KEYS):
        return {"passed": False, "checks": [], "error": f"expect must be an object with keys from {list(_EXPECT_KEYS)}"}
    checks = []
    for kind in _EXPECT_KEYS:
        if kind not in expect:
            continue
        value = str(expect[kind])
        check: dict[str, Any] = {"kind": kind, "value": value}
        if kind == "contains":
            check["passed"] = value in text
        elif kind == "not_contains":
            check["passed"] = value not in text
        else:
            try:
                check["passed"] = re.search(value, text, re.MULTILINE) is not None
            except re.error as exc:
                check.update(passed=False, error=f"invalid regular expression: {exc}")
        checks.append(check)
    return {"passed": all(c["passed"] for c in checks), "checks": checks}


def _alternatives(read: dict[str, Any]) -> list[dict[str, Any]]:
    """The addresses to try in order: the read itself, or each ``any_of`` entry merged over the read's own keys.

    The same merge as orchestrator/probes/models.py ``merge_alternative`` (which validates playbooks at load time);
    this script is stdlib-only and runs on the host, so it cannot import it."""
    if "any_of" not in read:
        return [read]
    alternatives = read["any_of"]
    if not isinstance(alternatives, list) or not alternatives:
        raise ReadError("bad_read", "'any_of' must be a non-empty list of alternative addresses")
    shared = {k: v for k, v in read.items() if k in _ALTERNATIVE_KEYS}
    merged = []
    for n, alt in enumerate(alternatives):
        if not isinstance(alt, dict) or set(alt) - _ALTERNATIVE_KEYS:
            raise ReadError("bad_read", f"any_of[{n}] must be an object with keys from {sorted(_ALTERNATIVE_KEYS)}")
        both = dict(shared, **alt)
        # an alternative's file replaces the shared directory and vice versa; so does its mode the shared one
        if "file" in alt and "under" not in alt:
            both.pop("under", None)
        if "under" in alt and "file" not in alt:
            both.pop("file", None)
        if any(m in alt for m in ("lines", "symbol", "pattern")):
            for mode in ("lines", "symbol", "pattern"):
                if mode not in alt:
                    both.pop(mode, None)
        merged.append(both)
    return merged


def _read_one(ctx: dict[str, Any], read: dict[str, Any], budget: list[int]) -> tuple[dict[str, Any], list[str]]:
    """Resolve one address: (the result fields, the texts an expect check sees). Raises ReadError."""
    modes = [k for k in ("lines", "symbol", "pattern") if k in read]
    if len(modes) != 1:
        raise ReadError("bad_read", "a read needs exactly one of 'lines', 'symbol' or 'pattern'")
    if read.get("file") and read.get("under"):
        raise ReadError("bad_read", "give 'file' or 'under', not both")
    fields: dict[str, Any] = {k: read[k] for k in ("file", "under", "symbol", "pattern") if k in read}
    if modes[0] == "lines":
        if not read.get("file"):
            raise ReadError("bad_read", "a 'lines' read needs a 'file'")
        fields["lines_spec"] = read["lines"]
        rel, abs_path = _resolve(ctx, str(read["file"]))
        start, end = resolve_range(str(read["lines"]), ctx["cache"].lines(abs_path))
        fields.update(_span(ctx["cache"], rel, abs_path, start, end, budget))
        return fields, [t for _, t in fields["lines"]]
    matches = (_read_symbol if modes[0] == "symbol" else _read_pattern)(ctx, read, budget)
    fields["matches"] = matches
    fields.update({k: matches[0][k] for k in ("file", "abs_path", "start", "end", "total_lines", "lines")})
    return fields, [t for m in matches for _, t in m["lines"]]


def do_read(ctx: dict[str, Any], index: int, read: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"index": index, "found": False}
    try:
        if not isinstance(read, dict):
            raise ReadError("bad_read", f"read #{index} must be an object, got {type(read).__name__}")
        out.update({k: read[k] for k in ("id", "file", "under", "symbol", "pattern") if k in read})
        if "lines" in read:
            out["lines_spec"] = read["lines"]
        unknown = sorted(set(read) - _READ_KEYS)
        if unknown:
            raise ReadError("bad_read", f"unknown keys {unknown}; allowed: {sorted(_READ_KEYS)}")
        alternatives = _alternatives(read)
        budget = [_int_arg(read, "max_lines", DEFAULT_MAX_LINES)]
        misses: list[dict[str, Any]] = []
        texts: list[str] = []
        for n, alt in enumerate(alternatives):
            ctx["truncated"] = False
            try:
                fields, texts = _read_one(ctx, alt, budget)
            except ReadError as exc:
                if exc.kind not in _NOT_FOUND_KINDS:
                    raise  # a broken alternative is a mistake to fix, not a version difference to skip
                misses.append(dict(exc.details, kind=exc.kind, message=exc.message, alternative=n))
                continue
            for key in ("file", "under", "symbol", "pattern", "lines_spec"):
                out.pop(key, None)  # the winning alternative's address, not the shared keys it overrode
            out.update(fields, found=True)
            if "any_of" in read:
                out.update(alternative=n, tried=misses)
            break
        else:
            out["not_found"] = _not_found(ctx, misses, "any_of" in read)
            if "any_of" in read:
                out["tried"] = misses
        out["truncated"] = bool(out["found"] and (ctx["truncated"] or budget[0] <= 0 and texts))
        if "expect" in read:
            if out["found"]:
                out["expect"] = _check_expect(read["expect"], "\n".join(texts))
            else:
                out["expect"] = {"passed": False, "checks": [], "error": "nothing to check: " + out["not_found"]["message"]}
    except ReadError as exc:
        out["error"] = dict(exc.details, kind=exc.kind, message=exc.message)
    except (OSError, UnicodeError, RecursionError) as exc:
        out["error"] = {"kind": "io_error", "message": f"{type(exc).__name__}: {exc}"}
    if "error" in out and isinstance(read, dict) and "expect" in read:
        out["expect"] = {"passed": False, "checks": [], "error": "read failed: " + out["error"]["message"]}
    return out


def _not_found(ctx: dict[str, Any], misses: list[dict[str, Any]], alternatives: bool) -> dict[str, Any]:
    """One record for a read that found nothing, its message naming the version so it stands alone as evidence."""
    label = f"{ctx['package']} {ctx.get('version') or '(version unknown)'}"
    if not alternatives:
        miss = {k: v for k, v in misses[0].items() if k != "alternative"}
        return dict(miss, message=f"not found in {label}: {miss['message']}")
    said = "; ".join(f"({m['alternative'] + 1}) {m['message']}" for m in misses)
    return {"kind": "not_found", "message": f"not found in {label}: {said}"}


def main(args: dict[str, Any]) -> dict[str, Any]:
    package = args.get("package", "sglang")
    if not isinstance(package, str) or not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", package):
        raise ProbeFailure("bad_args", f"'package' must be an importable dotted name, got {package!r}")
    extra = args.get("sys_path") or []
    reads = args.get("reads") or []
    if not isinstance(extra, list) or not all(isinstance(p, str) for p in extra):
        raise ProbeFailure("bad_args", "'sys_path' must be a list of directory strings")
    if not isinstance(reads, list):
        raise ProbeFailure("bad_args", "'reads' must be a list of read objects")
    located = locate_package(package, [os.path.abspath(os.path.expanduser(p)) for p in extra])
    files: list[str] = []

    def all_files() -> list[str]:
        if not files:
            progress("indexing package files", root=located["root"])
            files.extend(package_files(located["root"]))
        return files

    ctx = {"root": located["root"], "package": package, "version": located["version"], "cache": FileCache(),
           "files": all_files}
    results = [do_read(ctx, i, read) for i, read in enumerate(reads)]
    return dict(located, python=sys.executable, reads=results)


if __name__ == "__main__":
    run_probe(main)
