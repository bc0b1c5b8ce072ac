"""Sandboxed Jinja2 templating for playbook values and `when:`/`until:` expressions.

- A string that is exactly one ``{{ expr }}`` renders to the expression's native value (int, list,
  dict...), like Ansible; any other string renders to text.
- ``render_shell`` quotes every ``{{ }}`` result with ``shlex.quote``: a variable can never inject a
  command, whatever it contains (``; rm -rf /``, ``$(...)``, backticks, newlines).
- Undefined names are errors, never empty strings.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from typing import Any

import jinja2
from jinja2 import meta, nodes
from jinja2.sandbox import SandboxedEnvironment

from orchestrator.bench_compare import (
    accept_recovers,
    interval_text,
    paired_gain,
    paired_speedup,
    speed_against,
)
from orchestrator.errors import TemplateError

SINGLE_EXPR = re.compile(r"^\s*\{\{(?P<expr>.*?)\}\}\s*$", re.DOTALL)


def has_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def _to_json(value: Any) -> str:
    import json

    return json.dumps(value, default=str)


def _combine(base: Any, *others: Any) -> dict[str, Any]:
    """``{{ srv.states_from | combine({'check': true}) }}``: a mapping with keys of the others over its own (Ansible's
    filter of the same name, shallow). An empty or missing base (null) is an empty mapping."""
    out: dict[str, Any] = {}
    for part in (base, *others):
        if part in (None, ""):
            continue
        if not isinstance(part, dict):
            raise TypeError(f"combine takes mappings, got {type(part).__name__}")
        out.update(part)
    return out


def _make_env(finalize: Any = None) -> SandboxedEnvironment:
    env = SandboxedEnvironment(undefined=jinja2.StrictUndefined, finalize=finalize, keep_trailing_newline=True)
    env.filters["to_json"] = _to_json
    env.filters["interval"] = interval_text
    env.filters["paired_gain"] = paired_gain
    env.filters["paired_speedup"] = paired_speedup
    env.filters["speed_against"] = speed_against
    env.filters["accept_recovers"] = accept_recovers
    env.filters["quote"] = lambda v: shlex.quote(str(v))
    env.filters["combine"] = _combine
    env.globals.update(
        min=min, max=max, abs=abs, round=round, len=len, sum=sum, sorted=sorted, zip=zip, any=any, all=all,
        int=int, float=float, str=str, bool=bool, enumerate=enumerate, range=range,
    )
    return env


_ENV = _make_env()
_SHELL_ENV = _make_env(finalize=lambda v: shlex.quote(v if isinstance(v, str) else _shell_text(v)))
BUILTIN_NAMES = frozenset(_ENV.globals) | {"true", "false", "none", "True", "False", "None"}


def _shell_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return _to_json(value)
    return str(value)


def _friendly(exc: Exception) -> str:
    if isinstance(exc, jinja2.UndefinedError):
        msg = str(exc)
        match = re.match(r"'(\w+)' is undefined", msg)
        if match:
            return f"undefined variable {match.group(1)!r}"
        return msg.replace("jinja2.", "")
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return f"bad template syntax: {exc.message}"
    if isinstance(exc, jinja2.exceptions.SecurityError):
        return f"not allowed in a template: {exc}"
    return f"{type(exc).__name__}: {exc}"


def check_syntax(value: str, *, expression: bool = False) -> str | None:
    """Return a message if ``value`` does not parse (as a template, or as a bare expression)."""
    try:
        if expression:
            _ENV.compile_expression(value)
        else:
            _ENV.from_string(value)  # compiles too: an unknown filter or test is caught here, not as a traceback later
    except jinja2.TemplateSyntaxError as exc:
        return _friendly(exc)
    return None


def referenced_names(value: str, *, expression: bool = False) -> set[str]:
    """Top-level variable names a template/expression reads (for load-time undefined checks)."""
    source = "{{ (" + value + ") }}" if expression else value
    ast = _ENV.parse(source)
    names = set(meta.find_undeclared_variables(ast))
    # Names bound by filters/tests (e.g. `x is defined`) still count: `defined` guards are allowed.
    guarded = {n.node.name for n in ast.find_all(nodes.Test) if isinstance(n.node, nodes.Name) and n.name in ("defined", "undefined")}
    # `x | default(...)` is the documented way to make a variable optional.
    guarded |= {n.node.name for n in ast.find_all(nodes.Filter) if isinstance(n.node, nodes.Name) and n.name in ("default", "d")}
    return names - guarded - BUILTIN_NAMES


def called_facts(value: str, *, expression: bool = False) -> set[str]:
    """The names ``fact('NAME')`` calls with a literal name (checked against the registry when a playbook loads)."""
    try:
        ast = _ENV.parse("{{ " + value + " }}" if expression else value)
    except jinja2.TemplateSyntaxError:
        return set()
    return {call.args[0].value for call in ast.find_all(nodes.Call)
            if isinstance(call.node, nodes.Name) and call.node.name == "fact" and call.args
            and isinstance(call.args[0], nodes.Const) and isinstance(call.args[0].value, str)}


def render(value: Any, variables: dict[str, Any]) -> Any:
    """Render a value recursively (strings, lists, dicts); raises TemplateError."""
    if isinstance(value, str):
        if not has_template(value):
            return value
        try:
            match = SINGLE_EXPR.match(value)
            if match and "{{" not in match.group("expr") and "}}" not in match.group("expr"):
                result = _ENV.compile_expression(match.group("expr"), undefined_to_none=False)(**variables)
                _raise_if_undefined(result)
                return result
            return _ENV.from_string(value).render(**variables)
        except jinja2.TemplateError as exc:
            raise TemplateError(_friendly(exc)) from None
        except TemplateError:
            raise
        except Exception as exc:
            raise TemplateError(_friendly(exc)) from None
    if isinstance(value, list):
        return [render(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: render(v, variables) for k, v in value.items()}
    return value


def render_shell(command: str, variables: dict[str, Any]) -> str:
    """Render a shell command; every ``{{ }}`` output is shell-quoted."""
    if not has_template(command):
        return command
    try:
        return _SHELL_ENV.from_string(command).render(**variables)
    except jinja2.TemplateError as exc:
        raise TemplateError(_friendly(exc)) from None
    except Exception as exc:
        raise TemplateError(_friendly(exc)) from None


def evaluate(expression: str, variables: dict[str, Any]) -> Any:
    """Evaluate a bare expression (`when:`, `until:`, evidence rules). ``{{ }}`` around it is tolerated."""
    match = SINGLE_EXPR.match(expression)
    source = match.group("expr") if match else expression
    try:
        value = _ENV.compile_expression(source, undefined_to_none=False)(**variables)
    except jinja2.TemplateError as exc:
        raise TemplateError(_friendly(exc)) from None
    except Exception as exc:
        raise TemplateError(_friendly(exc)) from None
    _raise_if_undefined(value)
    return value


def _raise_if_undefined(value: Any) -> None:
    if isinstance(value, jinja2.Undefined):
        message = value._undefined_message  # noqa: SLF001 - jinja's own wording ("'x' is undefined")
        match = re.match(r"'(\w+)' is undefined", message)
        raise TemplateError(f"undefined variable {match.group(1)!r}" if match else message)


def iter_strings(value: Any, path: tuple[Any, ...] = ()) -> Iterable[tuple[tuple[Any, ...], str]]:
    """Every string inside a nested structure, with its path (for locating template errors)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from iter_strings(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from iter_strings(v, (*path, i))
