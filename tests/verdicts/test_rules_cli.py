"""`orchestrator rules`: what a playbook can name, from the registry itself; one rule or fact in full; a name that is
not registered is a clear error (exit 2) with the closest name."""

from __future__ import annotations

from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.verdicts import registered_facts, registered_rules


def test_the_list_is_the_registry() -> None:
    out = CliRunner().invoke(app, ["rules"], env={"COLUMNS": "240"})
    assert out.exit_code == 0, out.output
    for name in [*registered_rules(), *registered_facts()]:
        assert name in out.output, name


def test_one_rule_or_fact_in_full() -> None:
    rule = CliRunner().invoke(app, ["rules", "draft_quality_last_resort"], env={"COLUMNS": "240"})
    assert rule.exit_code == 0 and "decides draft_quality" in rule.output and "The last resort" in rule.output
    fact = CliRunner().invoke(app, ["rules", "weighing"], env={"COLUMNS": "240"})
    assert fact.exit_code == 0 and "fact weighing" in fact.output and "fix_verified" in fact.output


def test_an_unknown_name_says_the_closest() -> None:
    out = CliRunner().invoke(app, ["rules", "weighng"], env={"COLUMNS": "240"})
    assert out.exit_code == 2 and "did you mean 'weighing'" in out.output and "Traceback" not in out.output
