"""The pre-flight flag check on the real start path (local transport, the lab engine, real sglang trees on the
host's path): a flag the installed SGLang refuses fails the start in seconds, before anything is spawned, with that
version's own message; ``preflight: false`` leaves the refusal to the (lab) server itself, which refuses alike."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.inventory import Inventory
from tests.servers.conftest import REPO, processes_with, run_playbook

pytestmark = pytest.mark.sglang_source

AMBIGUOUS = ("sglang serve: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
             "--cuda-graph-max-bs-prefill")


def _inventory(state_dir: Path, tree: Path) -> Inventory:
    # the host's python sees the sglang tree (as the lab host does with its site), so the check finds that version
    host = {"transport": "local", "python": sys.executable, "state_dir": str(state_dir),
            "env": {"PYTHONPATH": f"{REPO}:{tree}"}, "vars": {"engine": "lab"}}
    return Inventory.model_validate({"hosts": {"localhost": host}, "default_hosts": "localhost"})


def _start(flags: str, marker: str, extra: str = "") -> str:
    return f"""
name: pre-flight
steps:
  - server: {{model: /nonexistent, flags: {flags}, env: {{MARK: {marker}}}, ready_timeout: 60{extra}}}
    register: srv
"""


def test_ambiguous_flag_is_refused_in_seconds_before_anything_starts(
        sglang_trees: Callable[[str], Path], state_dir: Path, tmp_path: Path, marker: str) -> None:
    inventory = _inventory(state_dir, sglang_trees("0.5.23"))
    ran = run_playbook(_start("{cuda-graph-max-bs: 8}", marker), inventory, tmp_path / "sessions")
    assert ran.status == "failed"
    step = ran.step("s1")
    assert step["duration"] < 5.0, "a refused flag must fail the start in seconds"
    result = ran.result("s1")["result"]
    failure, check = result["failure"], result["preflight"]
    assert (failure["cause"], failure["label"], failure["reason"], failure["exit_code"]) == (
        "ambiguous_flag", "ambiguous flag", "preflight", 2)
    assert failure["error_lines"] == [AMBIGUOUS]
    assert (check["route"], check["version"], check["ok"]) == ("static", "0.5.23", False)
    assert check["errors"][0]["message"] == AMBIGUOUS
    assert "refused by the pre-flight check (SGLang 0.5.23's own parser, static route" in step["error"]
    assert result["pid"] is None and ran.of_type("server_started") == []  # nothing was spawned
    [failed] = ran.of_type("server_failed")
    assert "ambiguous flag" in failed["detail"]
    assert processes_with(marker) == []
    print(f"\npre-flight refusal, 0.5.23: step {step['duration']:.2f}s, probe {check['seconds']}s")


def test_steps_without_topk_is_a_bad_combination_on_0512(
        sglang_trees: Callable[[str], Path], state_dir: Path, tmp_path: Path, marker: str) -> None:
    inventory = _inventory(state_dir, sglang_trees("0.5.12.post1"))
    flags = "{speculative-algorithm: EAGLE3, speculative-draft-model-path: /d, speculative-num-steps: 3}"
    ran = run_playbook(_start(flags, marker), inventory, tmp_path / "sessions")
    step = ran.step("s1")
    failure = ran.result("s1")["result"]["failure"]
    assert failure["cause"] == "bad_combination" and failure["exit_code"] == 1
    assert failure["summary"].startswith("SGLang 0.5.12.post1 crashes at start-up with these flags (TypeError: '>' "
                                         "not supported between instances of 'NoneType' and 'int' at "
                                         "srt/server_args.py:3838)")
    assert step["duration"] < 5.0
    print(f"\npre-flight refusal, 0.5.12.post1: step {step['duration']:.2f}s")


def test_preflight_false_leaves_it_to_the_lab_server_which_refuses_like_the_version(
        sglang_trees: Callable[[str], Path], state_dir: Path, tmp_path: Path, marker: str) -> None:
    inventory = _inventory(state_dir, sglang_trees("0.5.23"))
    ran = run_playbook(_start("{cuda-graph-max-bs: 8}", marker, ", preflight: false"), inventory,
                       tmp_path / "sessions")
    result = ran.result("s1")["result"]
    assert result["preflight"] is None
    assert result["exit_code"] == 2 and result["failure"]["reason"] == "exited"
    assert result["failure"]["cause"] == "unknown_flag"  # the log analysis files ambiguity under unknown flags
    assert AMBIGUOUS in result["failure"]["error_lines"]
    assert processes_with(marker) == []


def test_no_sglang_on_the_host_skips_the_check_with_a_note(inventory: Inventory, tmp_path: Path,
                                                          marker: str) -> None:
    # the plain test host has no sglang: the check cannot run, says so, and the start goes on (the lab refuses)
    ran = run_playbook(_start("{no-such-flag: 3}", marker), inventory, tmp_path / "sessions")
    result = ran.result("s1")["result"]
    assert result["preflight"]["skipped"].startswith("sglang is not installed for")
    assert result["failure"]["reason"] == "exited" and result["exit_code"] == 2


def test_lab_stands_in_for_0523_when_asked(sglang_trees: Callable[[str], Path], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.errors import UserInputError
    from orchestrator.lab.building import build, inventory

    sglang_trees("0.5.23")  # cached: the site is a link to it
    root = tmp_path / "lab"
    root.mkdir()
    monkeypatch.setenv("ORCHESTRATOR_LAB_SGLANG", "0.5.23")
    build.install_sglang_site(root, lambda *_: None, build.lab_sglang_version())
    info = build.status(root)
    assert info["sglang_version"] == "0.5.23" and info["sglang_site"] == str(root / "site-0.5.23")
    assert inventory.lab_env(root)["PYTHONPATH"].endswith(str(root / "site-0.5.23"))
    monkeypatch.setenv("ORCHESTRATOR_LAB_SGLANG", "0.4")
    with pytest.raises(UserInputError, match="cannot stand in for sglang '0.4'"):
        build.lab_sglang_version()
