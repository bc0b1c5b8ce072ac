"""The registry of verdict rules and facts: a name -> a typed function, looked up when a playbook is loaded (an unknown
name is a playbook error at its file:line:col) and when a step's evidence is judged."""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar

from orchestrator.errors import UserInputError

if TYPE_CHECKING:
    from orchestrator.verdicts.context import RuleContext

#: the states a rule may conclude (the board's states less ``open``)
RuleState = Literal["confirmed", "supported", "refuted", "inconclusive"]

#: the modules that define the built-in rules and facts, imported on the first lookup
BUILTIN_MODULES = ("orchestrator.verdicts.flagship",)


class Verdict(NamedTuple):
    """What a rule concludes about its hypothesis, and the observation that decides it (one sentence a reader can
    check against the step's result)."""

    state: RuleState
    because: str


RuleFunction = Callable[["RuleContext"], "Verdict | None"]
FactFunction = Callable[["RuleContext"], Any]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class RegisteredRule:
    name: str
    function: RuleFunction
    #: the hypotheses this rule may decide (a playbook that names it for another is refused at load)
    decides: tuple[str, ...]
    #: the registered results it reads (documentation, and the cases file's keys)
    reads: tuple[str, ...]

    @property
    def doc(self) -> str:
        return inspect.cleandoc(self.function.__doc__ or "")


@dataclass(frozen=True)
class RegisteredFact:
    name: str
    function: FactFunction

    @property
    def doc(self) -> str:
        return inspect.cleandoc(self.function.__doc__ or "")


_RULES: dict[str, RegisteredRule] = {}
_FACTS: dict[str, RegisteredFact] = {}
_loaded = False


def verdict_rule(name: str, *, decides: tuple[str, ...], reads: tuple[str, ...] = ()) -> Callable[[F], F]:
    """Register ``function(ctx) -> Verdict | None`` as the rule ``name`` (None: the rule says nothing here)."""

    def register(function: F) -> F:
        if name in _RULES and _RULES[name].function is not function:
            raise ValueError(f"verdict rule {name!r} is registered twice")
        _RULES[name] = RegisteredRule(name=name, function=function, decides=decides, reads=reads)
        return function

    return register


def fact(name: str) -> Callable[[F], F]:
    """Register ``function(ctx) -> value`` as the fact ``name``: templates read it as ``fact('name')``."""

    def register(function: F) -> F:
        if name in _FACTS and _FACTS[name].function is not function:
            raise ValueError(f"fact {name!r} is registered twice")
        _FACTS[name] = RegisteredFact(name=name, function=function)
        return function

    return register


def _load_builtins() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for module in BUILTIN_MODULES:
            importlib.import_module(module)


def registered_rules() -> dict[str, RegisteredRule]:
    _load_builtins()
    return dict(_RULES)


def registered_facts() -> dict[str, RegisteredFact]:
    _load_builtins()
    return dict(_FACTS)


def _unknown(kind: str, name: str, known: dict[str, Any]) -> UserInputError:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return UserInputError(f"unknown {kind} {name!r}{hint}")


def rule_named(name: str) -> RegisteredRule:
    """The rule registered as ``name``; raises UserInputError (with the closest name) when there is none."""
    rules = registered_rules()
    if name not in rules:
        raise _unknown("verdict rule", name, rules)
    return rules[name]


def fact_named(name: str) -> RegisteredFact:
    """The fact registered as ``name``; raises UserInputError (with the closest name) when there is none."""
    facts = registered_facts()
    if name not in facts:
        raise _unknown("fact", name, facts)
    return facts[name]
