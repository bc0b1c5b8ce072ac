"""Every registered verdict rule and fact against its table of recorded cases (tests/verdicts/cases/NAME.yaml), the
way promtool tests Prometheus rules: registered results and the board's states in, the verdict and its reason out.

A case file::

    defaults: {vars: {...}, states: {...}, hypothesis: ID}   # shared by its cases (a case's vars override by name)
    cases:
      - name: what the case shows
        vars: {spec_srv: {...}, ...}                          # the registered results and playbook vars it reads
        states: {wiring: confirmed}                           # the board before the step (default: all open)
        expect: {state: supported, because: "exact reason"}   # or because_has / because_lacks: [fragments]; or null: says nothing
      - name: a fact
        expect: {value: true}                                 # facts: the value; or value_has: {key: value}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from orchestrator.verdicts import RuleContext, registered_facts, registered_rules

CASES = Path(__file__).parent / "cases"


def _load(path: Path) -> dict[str, Any]:
    return YAML(typ="safe").load(path.read_text())


def _cases() -> list[Any]:
    out = []
    for path in sorted(CASES.glob("*.yaml")):
        doc = _load(path)
        defaults = doc.get("defaults") or {}
        for n, case in enumerate(doc["cases"]):
            out.append(pytest.param(path.stem, defaults, case, id=f"{path.stem}[{n}] {case['name']}"))
    return out


def _context(defaults: dict[str, Any], case: dict[str, Any]) -> RuleContext:
    variables = {**(defaults.get("vars") or {}), **(case.get("vars") or {})}
    states = {**(defaults.get("states") or {}), **(case.get("states") or {})}
    hypothesis = case.get("hypothesis") or defaults.get("hypothesis") or ""
    return RuleContext(variables=variables, hypothesis_id=hypothesis, states=states,
                       step_register=case.get("register") or defaults.get("register"))


@pytest.mark.parametrize(("name", "defaults", "case"), _cases())
def test_the_rule_decides_its_case(name: str, defaults: dict[str, Any], case: dict[str, Any]) -> None:
    ctx = _context(defaults, case)
    expect = case["expect"]
    if name in registered_facts():
        value = ctx.fact(name)
        if "value" in expect:
            assert value == expect["value"]
        for key, wanted in (expect.get("value_has") or {}).items():
            assert value[key] == wanted, key
        return
    rule = registered_rules()[name]
    assert not ctx.hypothesis_id or not rule.decides or ctx.hypothesis_id in rule.decides
    verdict = rule.function(ctx)
    if expect is None:
        assert verdict is None, verdict
        return
    assert verdict is not None, "the rule said nothing"
    assert verdict.state == expect["state"], verdict.because
    if "because" in expect:
        assert verdict.because == expect["because"]
    for fragment in expect.get("because_has") or []:
        assert fragment in verdict.because, verdict.because
    for fragment in expect.get("because_lacks") or []:
        assert fragment not in verdict.because, verdict.because


def test_every_rule_and_fact_has_its_table() -> None:
    """A rule without cases is a rule no reader can check: each has a file, with a case that decides something and,
    for a rule, one where it says nothing or decides otherwise."""
    for name in [*registered_rules(), *registered_facts()]:
        path = CASES / f"{name}.yaml"
        assert path.is_file(), f"no cases for {name}: write {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}"
        expects = [case["expect"] for case in _load(path)["cases"]]
        if name in registered_rules():
            outcomes = {None if e is None else e["state"] for e in expects}
            assert len(outcomes) >= 2, f"{name}: its cases show one outcome only ({outcomes})"
