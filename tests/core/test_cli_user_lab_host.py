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


def test_the_lab_built_is_the_one_the_inventory_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine and scenario are chosen once, when the lab inventory is made; building it follows the inventory
    (a vLLM lab inventory builds the vLLM lab even with the environment saying nothing), and the run gets a new
    inventory read from the built lab instead of a patched one."""
    from orchestrator.lab.building import inventory as lab_inventory_module

    monkeypatch.setenv("ORCHESTRATOR_LAB_DIR", str(tmp_path / "lab"))
    monkeypatch.setenv("ORCHESTRATOR_LAB_ENGINE", "vllm")
    inv = lab_inventory_module.lab_inventory("sglang-ids")
    monkeypatch.delenv("ORCHESTRATOR_LAB_ENGINE")
    built: list[tuple[object, ...]] = []
    monkeypatch.setattr(lab_inventory_module, "lab_is_built", lambda *a, **k: False)
    monkeypatch.setattr(lab_inventory_module, "ensure_lab", lambda *a, **k: built.append((a, k)))
    after = common.ensure_lab_for(inv, None)
    assert [(a[0], k["engine"]) for a, k in built] == [("sglang-ids", "vllm")]
    assert after is not inv and after.hosts["lab"].vars["engine"] == "lab-vllm"
    assert inv.hosts["lab"].vars == after.hosts["lab"].vars  # nothing patched in place
