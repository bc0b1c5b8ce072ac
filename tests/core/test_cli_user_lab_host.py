"""An inventory FILE whose host is named ``lab`` is the user's host (the real vLLM host of bench/engine_scenarios.py
--engine real-vllm names it so), never the embedded lab: the CLI must not try to build the lab for it (it used to
look the host's ``scenario`` var up among the SGLang lab's scenarios and refuse the run: "unknown lab scenario
'sglang-ids'")."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli import common
from orchestrator.inventory import load_inventory


def test_a_user_inventory_host_named_lab_is_not_the_embedded_lab(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text("hosts:\n  lab:\n    transport: local\n    vars: {engine: vllm, scenario: sglang-ids}\n"
                    "default_hosts: lab\n")
    inv = load_inventory(path)
    built: list[object] = []
    monkeypatch.setattr("orchestrator.lab.building.inventory.ensure_lab", lambda *a, **k: built.append(a))
    common.ensure_lab_for(inv, None)  # neither raises on the scenario nor builds anything
    assert built == [] and not common.is_embedded_lab(inv)
    assert common.is_embedded_lab(common.default_inventory())
