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

from orchestrator.errors import TemplateError

SINGLE_EXPR = re.compile(r"^\s*\{\{(?P<expr>.*?)\}\}\s*$", re.DOTALL)


def has_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def _to_json(value: Any) -> str:
    import json

    return json.dumps(value, default=str)


def _interval(value: Any, digits: int = 2) -> str:
    """``[lo, hi]`` as "[1.74, 1.90]"; anything else (no interval: fewer than two units) says so."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        return f"[{value[0]:.{digits}f}, {value[1]:.{digits}f}]"
    return "[no interval]"


def _accept_units(row: dict[str, Any]) -> tuple[float, float] | None:
    """(tokens, verify cycles) of one request: SGLang's verify_ct, or vLLM's per-request spec counters (each draft is
    a cycle that yields 1 + its accepted tokens)."""
    if row.get("verify_ct"):
        return float(row["completion_tokens"]), float(row["verify_ct"])
    counts = row.get("spec_counts") or {}
    drafts, accepted = counts.get("drafts"), counts.get("accepted")
    if isinstance(drafts, int) and drafts > 0 and isinstance(accepted, list):
        return float(drafts + sum(accepted)), float(drafts)
    return None


def _speed_units(row: dict[str, Any]) -> tuple[float, float] | None:
    """(tokens, seconds) of one request: its tok/s as a ratio, so that a benchmark's rate is sum / sum."""
    tokens, seconds = row.get("completion_tokens"), row.get("latency")
    if isinstance(tokens, (int, float)) and isinstance(seconds, (int, float)) and tokens > 0 and seconds > 0:
        return float(tokens), float(seconds)
    return None


def _paired(after: Any, before: Any, units_of: Any, confidence: float) -> dict[str, Any] | None:
    """The ratio of two benchmarks' rates (``units_of``: a request's numerator and denominator) paired by request,
    ``{"ratio", "ci", "n"}``; None when the requests do not pair (counts or prompt lengths differ, a request has no
    units) or fewer than two do."""
    from remote_probes.interval_stats import paired_ratio_interval

    mine = after.get("per_request") if isinstance(after, dict) else None
    theirs = before.get("per_request") if isinstance(before, dict) else None
    if not isinstance(mine, list) or not isinstance(theirs, list) or len(mine) != len(theirs) or len(mine) < 2:
        return None
    pairs = list(zip(mine, theirs, strict=True))
    if any(not isinstance(a, dict) or not isinstance(b, dict) or a.get("prompt_tokens") != b.get("prompt_tokens")
           for a, b in pairs):
        return None
    units = [(units_of(a), units_of(b)) for a, b in pairs]
    if any(a is None or b is None for a, b in units):
        return None
    iv = paired_ratio_interval([a[0] for a, _ in units], [a[1] for a, _ in units],
                               [b[0] for _, b in units], [b[1] for _, b in units], confidence)
    return None if iv is None else {"ratio": round(iv.estimate, 4), "ci": iv.as_list(), "n": len(pairs)}


def _paired_gain(after: Any, before: Any, confidence: float = 0.95) -> dict[str, Any] | None:
    """``after`` vs ``before`` (two bench results that sent the same prompts in the same order): the ratio of their
    accept lengths paired by request, where each request's prompt difficulty cancels out (the draft test pairs
    wirings on prompts the same way)."""
    return _paired(after, before, _accept_units, confidence)


def _paired_speedup(after: Any, before: Any, confidence: float = 0.95) -> dict[str, Any] | None:
    """The same pairing for speed: ``after``'s tok/s over ``before``'s, request by request (a benchmark with and one
    without speculation, on the same prompts in the same order: each prompt's length and difficulty cancel)."""
    return _paired(after, before, _speed_units, confidence)


def _accept_recovers(after: Any, before: Any, confidence: float = 0.95) -> bool:
    """A fix's benchmark (``after``) recovered the accept length over the candidate's (``before``, which served):
    the two marginal intervals are disjoint upwards, or the ratio paired by request clears 1."""
    a = after if isinstance(after, dict) else {}
    b = before if isinstance(before, dict) else {}
    mine, theirs = a.get("accept_length_ci"), b.get("accept_length_ci")
    if b.get("status") != "ok" or not mine or not theirs:
        return False
    if mine[0] > theirs[1]:
        return True
    ci = (_paired_gain(a, b, confidence) or {}).get("ci")
    return isinstance(ci, list) and bool(ci) and ci[0] is not None and ci[0] > 1


def _speed_against(after: Any, before: Any, confidence: float = 0.95) -> dict[str, Any]:
    """``after``'s speed against ``before``'s (a fix's benchmark against the baseline's): ``decision`` slower | faster
    (the interval excludes no change) | undecided (it includes it) | None (nothing to weigh: a benchmark has no
    interval); paired by request where the two pair (``how`` paired: ``ratio``, ``ci``, ``n``), else the two
    marginal tok/s intervals (``how`` marginal)."""
    a = after if isinstance(after, dict) else {}
    b = before if isinstance(before, dict) else {}
    out: dict[str, Any] = {"decision": None, "how": None, "tok_s": a.get("tok_s"), "tok_s_ci": a.get("tok_s_ci"),
                           "base_tok_s": b.get("tok_s"), "base_tok_s_ci": b.get("tok_s_ci")}
    paired = _paired_speedup(a, b, confidence)
    ci = (paired or {}).get("ci")
    if isinstance(ci, list) and len(ci) == 2 and None not in ci:
        out.update(paired or {}, how="paired",
                   decision="slower" if ci[1] < 1 else "faster" if ci[0] > 1 else "undecided")
        return out
    mine, theirs = a.get("tok_s_ci"), b.get("tok_s_ci")
    if isinstance(mine, list) and isinstance(theirs, list) and len(mine) == len(theirs) == 2 \
            and None not in mine and None not in theirs:
        out.update(how="marginal", decision="slower" if mine[1] < theirs[0] else "faster" if mine[0] > theirs[1]
                   else "undecided")
    return out


def _make_env(finalize: Any = None) -> SandboxedEnvironment:
    env = SandboxedEnvironment(undefined=jinja2.StrictUndefined, finalize=finalize, keep_trailing_newline=True)
    env.filters["to_json"] = _to_json
    env.filters["interval"] = _interval
    env.filters["paired_gain"] = _paired_gain
    env.filters["paired_speedup"] = _paired_speedup
    env.filters["speed_against"] = _speed_against
    env.filters["accept_recovers"] = _accept_recovers
    env.filters["quote"] = lambda v: shlex.quote(str(v))
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
