"""Bundled playbooks by name: `orchestrator run eagle3` from any directory; a path still means that file; a name
that is neither says which names exist; `--version` and `playbooks` as a user types them."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.errors import PlaybookError, UserInputError
from orchestrator.playbook.bundled import BUNDLED_DIR, bundled_playbooks, flagship_path, resolve_playbook
from orchestrator.playbook.loader import load_playbook


def test_every_bundled_playbook_loads_by_name_from_another_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    names = set(bundled_playbooks())
    assert {"eagle3", "tune", "sweep", "read-sglang", "cross-engine"} <= names
    for name in names:
        assert resolve_playbook(name) == BUNDLED_DIR / f"{name}.yaml"
    names_a_host_gives = ("engine", "target", "draft", "candidate_flags")
    assert load_playbook("eagle3", extra_names=names_a_host_gives).name == "eagle3"
    assert resolve_playbook("eagle3.yaml") == flagship_path() == BUNDLED_DIR / "eagle3.yaml"


def test_a_file_of_the_same_name_wins_over_the_bundled_one(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "eagle3").write_text("name: mine\nhosts: localhost\nsteps: []\n")
    assert load_playbook("eagle3").name == "mine"


def test_an_unknown_name_lists_the_bundled_ones(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserInputError) as err:
        resolve_playbook("eagle")
    assert "eagle3" in str(err.value) and "file not found" in str(err.value)
    with pytest.raises(PlaybookError, match="file not found"):
        load_playbook("some/dir/eagle3")  # a path is a path: never silently the bundled one


def test_the_cli_prints_its_version_and_lists_the_playbooks() -> None:
    runner = CliRunner()
    version = runner.invoke(app, ["--version"])
    assert version.exit_code == 0 and version.stdout.startswith("orchestrator "), version.stdout
    listed = runner.invoke(app, ["playbooks"])
    assert listed.exit_code == 0, listed.stdout
    assert "eagle3 (the flagship)" in listed.stdout
    bad = runner.invoke(app, ["validate", "no-such-playbook"])
    assert bad.exit_code == 2 and "bundled" in bad.output and "Traceback" not in bad.output
