"""`orchestrator tui`: user mistakes are clear errors (exit 2), never a traceback."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from orchestrator.cli.tui import tui


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("tui")(tui)
    app.command("noop")(lambda: None)  # two commands: `tui` stays a sub-command
    return app


def test_playbook_and_replay_together_is_refused(tmp_path) -> None:
    result = CliRunner().invoke(_app(), ["tui", str(tmp_path / "x.yaml"), "--replay", "last"])
    assert result.exit_code == 2 and "not both" in result.output


def test_replay_of_a_missing_session_names_it(tmp_path) -> None:
    result = CliRunner().invoke(_app(), ["tui", "--replay", "nope", "--sessions-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "no session" in result.output


def test_broken_playbook_is_located(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsteps:\n  - shell: {command: echo, nope: 1}\n", encoding="utf-8")
    result = CliRunner().invoke(_app(), ["tui", str(bad), "--host", "localhost", "--sessions-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "bad.yaml:3" in result.output
