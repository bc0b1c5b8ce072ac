"""What a verdict rule (or a fact) sees: the variables of the step it judges, the board's states, the hypothesis it
decides, and typed views of the results registered so far."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.verdicts.results import (
    Bench,
    DraftFix,
    DraftInspect,
    DraftTest,
    Reconcile,
    ServerStart,
    SourceReads,
    V,
)

#: the default of the playbook var of the same name: a fault costs at least this share of acceptance
DEFAULT_WIRING_MARGIN = 0.2


@dataclass
class RuleContext:
    variables: Mapping[str, Any]
    #: the hypothesis the rule decides (a rule may serve several: the checkpoint findings share one)
    hypothesis_id: str = ""
    #: hypothesis id -> state, as the board had it when the step finished
    states: Mapping[str, str] = field(default_factory=dict)
    #: the name the judged step registered its result under (generic rules read "their" step's result)
    step_register: str | None = None
    _facts: dict[str, Any] = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------ the board

    def state(self, hid: str) -> str:
        """A hypothesis's state; ``open`` when it has no evidence yet (or the board does not know it)."""
        return str(self.states.get(hid, "open"))

    @property
    def own_state(self) -> str:
        return self.state(self.hypothesis_id)

    # ------------------------------------------------------------ variables

    def var(self, name: str, default: Any = None) -> Any:
        return self.variables.get(name, default)

    def defined(self, name: str) -> bool:
        return name in self.variables

    @property
    def margin(self) -> float:
        """The playbook's ``wiring_margin``: the share of acceptance a fault costs at least."""
        value = self.variables.get("wiring_margin", DEFAULT_WIRING_MARGIN)
        return float(value) if isinstance(value, (int, float)) else DEFAULT_WIRING_MARGIN

    # ------------------------------------------------------------ typed results

    def result(self, name: str, view: type[V]) -> V:
        """The result registered as ``name``, seen as ``view`` (an unregistered name: a view with status None)."""
        return view.of(self.variables.get(name))

    def server(self, name: str) -> ServerStart:
        return self.result(name, ServerStart)

    def bench(self, name: str) -> Bench:
        return self.result(name, Bench)

    def draft_test(self, name: str) -> DraftTest:
        return self.result(name, DraftTest)

    def inspect(self, name: str = "inspect") -> DraftInspect:
        return self.result(name, DraftInspect)

    def reconcile(self, name: str = "rc") -> Reconcile:
        return self.result(name, Reconcile)

    def draft_fix(self, name: str = "fix") -> DraftFix:
        return self.result(name, DraftFix)

    def reads(self, name: str | None = None) -> SourceReads:
        """A read_source step's result; by default the judged step's own."""
        return self.result(name or self.step_register or "", SourceReads)

    # ------------------------------------------------------------ facts

    def fact(self, name: str) -> Any:
        """A registered fact over these variables, computed once per context."""
        if name not in self._facts:
            from orchestrator.verdicts.registry import fact_named

            self._facts[name] = fact_named(name).function(self)
        return self._facts[name]
