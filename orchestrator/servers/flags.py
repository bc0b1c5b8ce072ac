"""Flags: names and values as users write them, argv as servers read them, and what the server really used.

``requested_vs_effective`` compares every requested flag with the server's resolved value (``/server_info``)
after normalising names (dashes/underscores, aliases) and types ("3" == 3, "true" == True); ``parse_adjustments``
reads SGLang's "X is adjusted to Y" / "X is reset to Y" log lines, so an override the server only logged
(the seed's ``--speculative-num-steps 1`` capping 16 draft tokens at 2) is reported too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.errors import UserInputError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
FlagValue = Any


def flag_key(name: str) -> str:
    """The canonical form of a flag name: no leading dashes, underscores, lower case."""
    return name.lstrip("-").replace("-", "_").lower()


def check_flag_name(name: str, *, where: str = "flags") -> str:
    bare = name[2:] if name.startswith("--") else name
    if not _NAME.match(bare):
        raise UserInputError(f"{where}: {name!r} is not a flag name (letters, digits, '-', '_' only)")
    return bare


def flags_to_argv(flags: Mapping[str, FlagValue], *, list_style: str = "nargs", where: str = "flags") -> list[str]:
    """``{speculative-num-steps: 3, trust-remote-code: true, x: null, cuda-graph-bs: [1, 2]}`` ->
    ``--speculative-num-steps 3 --trust-remote-code --cuda-graph-bs 1 2``.

    true -> bare flag; false/null -> omitted; lists -> one flag followed by the values (argparse nargs,
    ``list_style="nargs"``) or the flag repeated per value (``"repeat"``); mappings -> one JSON argument.
    Every item is a separate argv word, so no value can reach a shell unquoted.
    """
    argv: list[str] = []
    for name, value in flags.items():
        bare = check_flag_name(str(name), where=where)
        flag = f"--{bare}"
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            if not value:
                continue
            items = [_scalar(v, where=f"{where}.{bare}") for v in value]
            if list_style == "repeat":
                for item in items:
                    argv += [flag, item]
            else:
                argv += [flag, *items]
        elif isinstance(value, Mapping):
            argv += [flag, json.dumps(value, sort_keys=True)]
        else:
            argv += [flag, _scalar(value, where=f"{where}.{bare}")]
    return argv


def _scalar(value: Any, *, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise UserInputError(f"{where}: unsupported value {value!r} (use a string, number, boolean or list)")


def normalize_value(value: Any) -> Any:
    """A comparable form: numbers as numbers, booleans as booleans, short identifiers case-folded."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [normalize_value(v) for v in value]
    if isinstance(value, str):
        text = value.strip()
        low = text.lower()
        if low in ("true", "false"):
            return low == "true"
        if low in ("none", "null", ""):
            return None
        try:
            return float(text)
        except ValueError:
            pass
        if "," in text and "/" not in text:  # "0,6,11" == [0, 6, 11]
            return [normalize_value(part) for part in text.split(",")]
        # Enum-like values are case-insensitive in SGLang (EAGLE3 == eagle3); paths are not.
        return low if "/" not in text else text
    return value


@dataclass
class Override:
    flag: str
    requested: Any
    effective: Any
    source: str  # "server_info" | "log"
    detail: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None or k in ("requested", "effective")}


@dataclass
class Adjustment:
    """One adjustment line from the server log: the setting, its new value (None if not computable), the text."""

    flag: str
    effective: Any
    line: str
    expression: str


# "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
# "Max running requests is reset to 48 for speculative decoding. You can override this ..."
_ADJUST = re.compile(
    r"(?P<name>[A-Za-z_][A-Za-z0-9_ ]*?)\s+(?:is|are|was|has been)\s+(?:adjusted|reset|set|changed|forced|capped|clamped)"
    r"\s+to\s+(?P<expr>[A-Za-z0-9_.+\-* ]+?)(?=\s+(?:when|for|because|since|as|if|due)\b|[.,;(]\s|[.,;]?$)"
)
_TERM = re.compile(r"^\s*(?P<a>[A-Za-z_][A-Za-z0-9_]*|-?\d+(?:\.\d+)?)\s*(?:(?P<op>[+\-*])\s*(?P<b>-?\d+(?:\.\d+)?))?\s*$")


def parse_adjustments(log_text: str, values: Mapping[str, Any] | None = None) -> list[Adjustment]:
    """Every "X is adjusted/reset to Y" line. ``Y`` may be a number, a word, or ``other_flag +|-|* n``,
    evaluated with ``values`` (canonical flag keys -> values) when possible."""
    known = {flag_key(k): v for k, v in (values or {}).items()}
    found: list[Adjustment] = []
    for line in log_text.splitlines():
        match = _ADJUST.search(line)
        if not match:
            continue
        name = match.group("name").strip()
        # "Max running requests" -> max_running_requests; drop a leading article.
        words = [w for w in name.split() if w.lower() not in ("the", "a")]
        flag = flag_key("_".join(words[-6:]))
        expr = match.group("expr").strip()
        found.append(Adjustment(flag=flag, effective=_evaluate(expr, known), line=line.strip(), expression=expr))
    return found


def _evaluate(expr: str, known: Mapping[str, Any]) -> Any:
    term = _TERM.match(expr)
    if not term:
        return None
    a_text, op, b_text = term.group("a"), term.group("op"), term.group("b")
    try:
        a: Any = float(a_text)
    except ValueError:
        key = flag_key(a_text)
        if op is None and key not in known:
            return a_text  # a word value ("EAGLE", "triton")
        a = known.get(key)
        if a is None:
            return None
        try:
            a = float(a)
        except (TypeError, ValueError):
            return None if op else a
    if op is None:
        return _num(a)
    b = float(b_text)
    return _num({"+": a + b, "-": a - b, "*": a * b}[op])


def _num(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def requested_vs_effective(
    requested: Mapping[str, Any],
    effective: Mapping[str, Any] | None,
    *,
    log_text: str = "",
    aliases: Mapping[str, str] | None = None,
    source: str = "server_info",
    quotes: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Compare requested flags with the server's resolved args and its adjustment log lines.

    ``source``: where ``effective`` was read ("server_info" for SGLang, "log" for vLLM's start-up config line);
    ``quotes``: per canonical key, the text that says the effective value (an override's ``detail``). Values are
    compared as given: an engine whose resolved form differs from what users write (vLLM's ``torch.float32`` for
    ``float32``) resolves both sides first (servers/vllm.py).

    Returns ``{overrides: [Override...], adjustments: [...], unverified: [flag...], effective: {flag: value}}``;
    ``unverified`` lists requested flags the server did not report (lab-only or renamed flags).
    """
    alias = {flag_key(k): flag_key(v) for k, v in (aliases or {}).items()}
    eff = {flag_key(k): v for k, v in (effective or {}).items()}
    overrides: list[Override] = []
    unverified: list[str] = []
    seen: dict[str, Any] = {}
    for name, want in requested.items():
        key = alias.get(flag_key(name), flag_key(name))
        if want is None:
            continue
        if key not in eff:
            unverified.append(key)
            continue
        seen[key] = eff[key]
        if normalize_value(want) != normalize_value(eff[key]):
            overrides.append(Override(flag=key, requested=want, effective=eff[key], source=source,
                                      detail=(quotes or {}).get(key)))
    values = {**{alias.get(flag_key(k), flag_key(k)): v for k, v in requested.items()}, **eff}
    adjustments = parse_adjustments(log_text, values)
    requested_keys = {alias.get(flag_key(k), flag_key(k)): v for k, v in requested.items() if v is not None}
    reported = {o.flag for o in overrides}
    for adj in adjustments:
        if adj.flag in requested_keys and adj.flag not in reported:
            want = requested_keys[adj.flag]
            if adj.effective is None or normalize_value(adj.effective) != normalize_value(want):
                overrides.append(Override(flag=adj.flag, requested=want, effective=adj.effective, source="log",
                                          detail=adj.line))
                reported.add(adj.flag)
        elif adj.flag in reported:
            for o in overrides:  # the log says why the server_info value differs
                if o.flag == adj.flag and o.detail is None:
                    o.detail = adj.line
    return {
        "overrides": [o.as_dict() for o in overrides],
        "adjustments": [asdict(a) for a in adjustments],
        "unverified": unverified,
        "effective": seen,
    }
