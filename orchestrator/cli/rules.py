"""`rules`: the registered verdict rules and facts a playbook can name (``evidence: {wiring: {rule: NAME}}``,
``fact('NAME')``), with what each decides and how."""

from __future__ import annotations

import difflib
from typing import Annotated

import typer

from orchestrator.cli.common import handle_errors


def register(app: typer.Typer) -> None:
    app.command("rules")(rules)


@handle_errors
def rules(
    name: Annotated[str | None, typer.Argument(help="A rule or fact: show all it says.")] = None,
) -> None:
    """List the verdict rules and facts playbooks can name, or show one in full."""
    from rich.console import Console
    from rich.table import Table

    from orchestrator.errors import UserInputError
    from orchestrator.verdicts import fact_named, registered_facts, registered_rules, rule_named

    console = Console()
    if name is not None:
        try:
            rule = rule_named(name)
            console.print(f"[bold]rule {rule.name}[/] decides {', '.join(rule.decides) or 'any hypothesis'}; reads "
                          f"{', '.join(rule.reads) or 'the step it judges'}\n\n{rule.doc}")
        except UserInputError:
            try:
                fact = fact_named(name)
            except UserInputError:
                known = [*registered_rules(), *registered_facts()]
                close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
                raise UserInputError(f"no verdict rule or fact named {name!r}"
                                     + (f"; did you mean {close[0]!r}?" if close else "")) from None
            console.print(f"[bold]fact {fact.name}[/]\n\n{fact.doc}")
        return
    table = Table(title="verdict rules (evidence: {HYPOTHESIS: {rule: NAME}})", title_justify="left")
    for column in ("rule", "decides", "what it weighs"):
        table.add_column(column, overflow="fold")
    for rule in registered_rules().values():
        table.add_row(rule.name, ", ".join(rule.decides), rule.doc.split("\n\n")[0].replace("\n", " "))
    console.print(table)
    facts = Table(title="facts (fact('NAME') in a template)", title_justify="left")
    facts.add_column("fact")
    facts.add_column("what it is", overflow="fold")
    for fact in registered_facts().values():
        facts.add_row(fact.name, fact.doc.split("\n\n")[0].replace("\n", " "))
    console.print(facts)
