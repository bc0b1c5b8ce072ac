"""Addresses for source reads: sed-style line ranges and ast symbols (standard library only, Python >= 3.9).

Used by sglang_source.py. Line specs: ``N``, ``N,M``, ``N,+K``, ``N,$``, ``$``, ``/re/``, ``/re/,/re/``, ``/re/,+K``;
sed semantics (the end regex is searched from the line after the start; an end past EOF is clamped).
"""

from __future__ import annotations

import ast
import re
from typing import Any


class ReadError(Exception):
    """One read failed; ``details`` go into the read's ``error`` object."""

    def __init__(self, kind: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.details = details


_ADDR = re.compile(r"\s*(?:(\d+)|(\$)|/((?:[^/\\]|\\.)*)/|\+(\d+))\s*")


def compile_regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ReadError("bad_regex", f"invalid regular expression {pattern!r}: {exc}", pattern=pattern) from None


def parse_lines_spec(spec: str) -> list[tuple[str, Any]]:
    """``"155,+45"`` -> [("num", 155), ("plus", 45)]; kinds: num, last, regex, plus. At most two addresses."""
    out: list[tuple[str, Any]] = []
    pos = 0
    text = str(spec)
    while pos < len(text):
        m = _ADDR.match(text, pos)
        if not m or m.end() == pos:
            raise ReadError("bad_lines", f"cannot parse line address {text!r} at {text[pos:]!r} "
                            "(use N, N,M, N,+K, N,$, $, /regex/,/regex/)", lines=text)
        if m.group(1):
            out.append(("num", int(m.group(1))))
        elif m.group(2):
            out.append(("last", None))
        elif m.group(3) is not None:
            out.append(("regex", compile_regex(m.group(3).replace("\\/", "/"))))
        else:
            out.append(("plus", int(m.group(4))))
        pos = m.end()
        if pos < len(text):
            if text[pos] != "," or len(out) == 2:
                raise ReadError("bad_lines", f"cannot parse line address {text!r}: expected one ',' between two "
                                "addresses", lines=text)
            pos += 1
    if not out or out[0][0] == "plus":
        raise ReadError("bad_lines", f"line address {text!r} must start with a number, $ or /regex/", lines=text)
    return out


def resolve_range(spec: str, lines: list[str]) -> tuple[int, int]:
    """sed semantics: the end regex is searched from the line after the start; an end past EOF is clamped."""
    addrs = parse_lines_spec(spec)
    total = len(lines)

    def find(pattern: re.Pattern[str], after: int) -> int:
        for i in range(after, total):
            if pattern.search(lines[i]):
                return i + 1
        raise ReadError("no_match", f"/{pattern.pattern}/ matches no line after line {after}", pattern=pattern.pattern)

    kind, value = addrs[0]
    start = value if kind == "num" else total if kind == "last" else find(value, 0)
    if start < 1 or start > total:
        raise ReadError("out_of_range", f"line {start} is outside the file (1-{total})", total_lines=total)
    end = start
    if len(addrs) == 2:
        kind, value = addrs[1]
        end = (value if kind == "num" else total if kind == "last" else start + value if kind == "plus"
               else find(value, start))
        if end < start:
            # a reversed address is a mistake in the spec (bad_lines), not a fact about this version (out_of_range)
            raise ReadError("bad_lines", f"end line {end} is before start line {start}", total_lines=total)
    return start, min(end, total)


def symbol_index(tree: ast.AST) -> list[tuple[str, int, int]]:
    """(qualified name, first line incl. decorators, last line) of every class and function, in source order: one
    walk of the tree, which a caller may keep and search again (``find_symbols``, ``all_qualnames``)."""
    index: list[tuple[str, int, int]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = prefix + child.name
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                index.append((qual, first, getattr(child, "end_lineno", child.lineno)))
                walk(child, qual + ".")
            else:
                walk(child, prefix)  # definitions inside if/try blocks keep the enclosing prefix

    walk(tree, "")
    return index


def find_symbols(tree: "ast.AST | list[tuple[str, int, int]]", symbol: str) -> list[tuple[str, int, int]]:
    """(qualified name, first line incl. decorators, last line) of classes/functions named by ``symbol``, from a
    tree or its ``symbol_index``.

    ``A.b`` matches a qualified name equal to it or ending in ``.A.b`` (nested definitions)."""
    index = tree if isinstance(tree, list) else symbol_index(tree)
    return [hit for hit in index if hit[0] == symbol or hit[0].endswith("." + symbol)]


def all_qualnames(tree: "ast.AST | list[tuple[str, int, int]]") -> list[str]:
    return [qual for qual, _, _ in (tree if isinstance(tree, list) else symbol_index(tree))]
