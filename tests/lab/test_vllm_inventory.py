"""The lab standing in for vLLM: its inventory, scenarios and the one vLLM-only draft (a config-only copy)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from orchestrator.errors import UserInputError
from orchestrator.lab.building.build import LabPaths
from orchestrator.lab.building.inventory import active_scenario, ensure_lab, lab_inventory
from orchestrator.lab.building.vllm_lab import VLLM_SCENARIO_NAMES, draft_dir, vllm_scenarios

pytestmark = pytest.mark.lab


def test_vllm_inventory_and_the_sglang_convention_copy(lab: LabPaths) -> None:
    ensure_lab("sglang-ids", root=lab.root, engine="vllm")
    inv = lab_inventory("sglang-ids", root=lab.root, engine="vllm")
    hv = inv.host_vars("lab")
    assert hv["engine"] == "lab-vllm" and hv["engine_family"] == "vllm" and hv["vllm_version"] == "0.33.0"
    assert hv["candidate_flags"] == {"speculative-config": {"method": "eagle3", "model": hv["draft"],
                                                           "num_speculative_tokens": 7}}
    assert hv["fixed_flags"]["lab-capture-layers"] == "0,6,11"
    path = inv.hosts["lab"].env["PYTHONPATH"].split(os.pathsep)
    assert any(Path(p, "vllm", "__init__.py").is_file() for p in path)  # read_source package: vllm finds it
    assert any(Path(p, "sglang", "__init__.py").is_file() for p in path)  # and the cross-engine run SGLang's
    # the vLLM-only draft: seed-wiring's weights, its trained wiring as SGLang-convention nested ids
    copy = draft_dir(lab.root, "sglang-ids")
    assert copy.parent.name == "vllm-drafts" and Path(hv["draft"]) == copy  # outside drafts/: the build is untouched
    config = json.loads((copy / "config.json").read_text())
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [-1, 5, 10]
    assert "eagle_aux_hidden_state_layer_ids" not in config
    assert (copy / "model.safetensors").read_bytes() == (lab.root / "drafts/seed-wiring/model.safetensors").read_bytes()
    # the SGLang lab is still the default, with its own names
    assert lab_inventory("seed-wiring", root=lab.root, engine="sglang").host_vars("lab")["engine"] == "lab"
    with pytest.raises(UserInputError, match="unknown lab scenario 'sglang-ids'"):
        active_scenario("sglang-ids", "sglang")
    with pytest.raises(UserInputError, match="unknown vLLM lab scenario 'topk-override'"):
        active_scenario("topk-override", "vllm")
    assert set(vllm_scenarios(lab.root, lab.num_layers)) == set(VLLM_SCENARIO_NAMES)
