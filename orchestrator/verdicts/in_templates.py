"""Facts in templates: ``fact('weighing')`` in a playbook's ``when:``, ``set:`` or step arguments computes the
registered fact over the variables the template sees (the runner binds ``fact`` beside its other built-ins)."""

from __future__ import annotations

from typing import Any

from jinja2 import pass_context
from jinja2.runtime import Context

from orchestrator.verdicts.context import RuleContext


@pass_context
def fact_in_template(context: Context, name: str) -> Any:
    """The fact ``name`` over the calling template's variables; raises UserInputError for an unknown name."""
    return RuleContext(variables=context.get_all()).fact(name)


#: what the runner adds to every template's variables
TEMPLATE_FUNCTIONS: dict[str, Any] = {"fact": fact_in_template}
