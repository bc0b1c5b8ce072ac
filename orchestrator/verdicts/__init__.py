"""Verdict rules as typed code: each rule is a Python function over a step's registered results (typed views) that
returns a verdict and its reason, registered by name the way step kinds are; a playbook names the rule under a step's
``evidence`` (``wiring: {rule: wiring_by_draft_test}``) and keeps the experiment plan. Facts are the values rules and
``when:`` conditions share (``fact('weighing')``), defined once here rather than as Jinja in YAML.

The flagship's own rules live in ``verdicts/flagship/`` and each has a table of recorded cases under
``tests/verdicts/cases/`` (the promtool way: results in, state and reason out). A user's playbook may still write a rule
as YAML expressions (``support_if: ...``); both kinds are judged by the board, one at a time, so one failing rule never
silences another.
"""

from orchestrator.verdicts.context import RuleContext
from orchestrator.verdicts.registry import (
    RegisteredFact,
    RegisteredRule,
    Verdict,
    fact,
    fact_named,
    registered_facts,
    registered_rules,
    rule_named,
    verdict_rule,
)

__all__ = ["RegisteredFact", "RegisteredRule", "RuleContext", "Verdict", "fact", "fact_named", "registered_facts",
           "registered_rules", "rule_named", "verdict_rule"]
