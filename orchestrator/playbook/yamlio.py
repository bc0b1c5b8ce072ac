"""YAML loading that remembers where every value came from, so errors can say file:line:col."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from orchestrator.errors import Location, PlaybookError, PlaybookErrors

Locator = Callable[..., Location]  # (path, key=False) -> Location


# A playbook holds hundreds of values. Aliases can multiply a few lines into billions (nine levels of ten
# aliases: "billion laughs"), and each copy is made when the document becomes plain data: refuse past this.
MAX_VALUES = 500_000
MAX_DEPTH = 200  # nesting; well under Python's recursion limit, far over any real playbook's


class _Unreadable(Exception):
    """Raised inside ``_plain``: the document cannot become plain data (``where`` is the node that said so)."""

    def __init__(self, reason: str, where: Any) -> None:
        super().__init__(reason)
        self.reason, self.where = reason, where


def _plain(node: Any, budget: list[int] | None = None, stack: tuple[int, ...] = ()) -> Any:
    """CommentedMap/Seq -> dict/list (pydantic and Jinja should see plain data).

    :raises _Unreadable: an alias that contains itself, nesting past MAX_DEPTH, or aliases that expand
        past MAX_VALUES values.
    """
    budget = [MAX_VALUES] if budget is None else budget
    budget[0] -= 1
    if isinstance(node, (dict, list)):
        if budget[0] < 0:  # checked at containers, so the error points at one (scalars have no position)
            raise _Unreadable(f"the YAML expands to more than {MAX_VALUES} values (aliases that multiply "
                              "aliases?)", node)
        if id(node) in stack:
            raise _Unreadable("an alias refers to the value that contains it (a cycle)", node)
        if len(stack) >= MAX_DEPTH:
            raise _Unreadable(f"values nested more than {MAX_DEPTH} levels deep", node)
        inner = (*stack, id(node))
        if isinstance(node, dict):
            return {str(k) if not isinstance(k, (str, int, float, bool)) else k: _plain(v, budget, inner)
                    for k, v in node.items()}
        return [_plain(v, budget, inner) for v in node]
    if hasattr(node, "__class__") and node.__class__.__module__.startswith("ruamel"):
        # ScalarString, ScalarFloat, TaggedScalar...: keep their plain Python value.
        for base in (str, bool, int, float):
            if isinstance(node, base):
                return base(node)
        return str(node)
    return node


def _position(node: Any, file: str) -> Location:
    lc = getattr(node, "lc", None)
    if lc is not None and lc.line is not None:
        return Location(file, lc.line + 1, lc.col + 1)
    return Location(file, 1, 1)


def make_locator(root: Any, file: str) -> Locator:
    """A function from a path of keys/indices (pydantic's ``loc``) to the closest known position.

    A path ending in a mapping key points at the value for scalars (``retries: many`` -> ``many``);
    ``key=True`` points at the key itself (for unknown keys).
    """

    def locate(path: tuple[Any, ...], key: bool = False) -> Location:
        node = root
        line, col = 0, 0
        for depth, part in enumerate(path):
            if isinstance(node, CommentedMap):
                if part in node:
                    try:
                        # Point at the value when it is a scalar, at the key otherwise.
                        kl, kc = node.lc.key(part)
                        line, col = kl, kc
                        child = node[part]
                        # A null value has no position of its own (ruamel reports the next token).
                        if child is not None and not isinstance(child, (CommentedMap, CommentedSeq)) \
                                and not (key and depth == len(path) - 1):
                            vl, vc = node.lc.value(part)
                            line, col = vl, vc
                    except (KeyError, TypeError, AttributeError):
                        pass
                    node = node[part]
                    continue
                break
            if isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
                try:
                    line, col = node.lc.item(part)
                except (KeyError, TypeError, AttributeError):
                    pass
                node = node[part]
                continue
            break
        if line == 0 and col == 0 and isinstance(root, (CommentedMap, CommentedSeq)) and root.lc.line is not None:
            line, col = root.lc.line, root.lc.col
        return Location(file, line + 1, col + 1)

    return locate


MAX_FLOW_DEPTH = 256  # ruamel's composer recurses per level: deeper fails, and its time grows with the square
_BRACKETS = re.compile(r"[\[\]{}]")


def _too_deep(text: str, file: str) -> PlaybookError | None:
    """Brackets nested past MAX_FLOW_DEPTH, found before the parser spends seconds (800 levels: 3 s, 1,200:
    15 s) on them. Brackets inside quoted strings count too: a string holding hundreds of unclosed ``[`` is
    not a playbook anyone writes."""
    depth = 0
    for match in _BRACKETS.finditer(text):
        depth += 1 if match.group() in "[{" else -1
        if depth > MAX_FLOW_DEPTH:
            line = text.count("\n", 0, match.start())
            col = match.start() - (text.rfind("\n", 0, match.start()) + 1)
            return PlaybookError(f"brackets nested more than {MAX_FLOW_DEPTH} levels deep",
                                 Location(file, line + 1, col + 1))
    return None


def load_yaml_text(text: str, file: str) -> tuple[Any, Locator]:
    deep = _too_deep(text, file)
    if deep is not None:
        raise deep
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        root = yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        if exc.context_mark is not None and "end of stream" in (exc.problem or ""):
            mark = exc.context_mark  # an unclosed quote/bracket: point where it opened, not at EOF
        problem = exc.problem or exc.context or "invalid YAML"
        if "duplicate key" in str(exc) or "found duplicate key" in (problem or ""):
            problem = problem.strip()
        loc = Location(file, mark.line + 1, mark.column + 1) if mark else Location(file, 1, 1)
        context = f" ({exc.context.strip()})" if exc.context and exc.problem else ""
        raise PlaybookError(f"YAML syntax error: {problem.strip()}{context}", loc) from None
    except YAMLError as exc:
        raise PlaybookError(f"YAML error: {exc}", Location(file, 1, 1)) from None
    except RecursionError:  # the composer recurses once per nesting level
        raise PlaybookError("YAML nested too deeply to read", Location(file, 1, 1)) from None
    try:
        return _plain(root), make_locator(root, file)
    except _Unreadable as exc:
        raise PlaybookError(exc.reason, _position(exc.where, file)) from None


def load_yaml(path: Path) -> tuple[Any, Locator]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlaybookError(f"file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlaybookError(f"cannot read {path}: {exc}") from None
    return load_yaml_text(text, str(path))


def describe_pydantic_error(err: Mapping[str, Any]) -> str:
    kind = err.get("type", "")
    loc = err.get("loc", ())
    field = ".".join(str(p) for p in loc if not isinstance(p, int) and not str(p).startswith("function-"))
    last = str(loc[-1]) if loc else ""
    if kind == "extra_forbidden":
        return f"unknown key {last!r}"
    if kind == "missing":
        return f"missing required key {last!r}"
    msg = err.get("msg", "invalid value")
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if msg.startswith("Assertion failed, "):
        msg = msg[len("Assertion failed, "):]
    got = err.get("input")
    suffix = ""
    if kind not in ("value_error", "assertion_error") and got is not None and not isinstance(got, (dict, list)):
        suffix = f" (got {got!r})"
    return f"{field}: {msg}{suffix}" if field else f"{msg}{suffix}"


def clean_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    # pydantic inserts union member / validator names into loc; they are not in the YAML.
    return tuple(p for p in loc if not (isinstance(p, str) and (p.startswith("function-") or "[" in p)))


def validation_errors(exc: Exception, locate: Locator, file: str, prefix: tuple[Any, ...] = ()) -> PlaybookErrors:
    """Turn a pydantic ValidationError into located PlaybookErrors (one per problem, none lost)."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return PlaybookErrors([PlaybookError(str(exc), Location(file, 1, 1))])
    errors = []
    for err in exc.errors():
        loc = clean_loc(tuple(err.get("loc", ())))
        message = describe_pydantic_error({**err, "loc": loc})
        at_key = err.get("type") == "extra_forbidden" or "[key]" in err.get("loc", ())  # a bad mapping key
        errors.append(PlaybookError(message, locate(prefix + loc, at_key)))
    return PlaybookErrors(errors)
