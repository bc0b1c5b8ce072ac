"""The lab directory, its scenarios, the lab inventory and the `orchestrator lab` commands."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from orchestrator.cli.lab import lab_app
from orchestrator.errors import UserInputError
from orchestrator.lab.building import build
from orchestrator.lab.building.build import LabPaths
from orchestrator.lab.building.inventory import active_scenario, lab_inventory, lab_is_built

pytestmark = [pytest.mark.lab]


def test_fault_variants_carry_exactly_their_fault(lab: LabPaths):
    from safetensors.torch import load_file

    seed = load_file(str(lab.drafts["seed-wiring"] / "model.safetensors"))
    seed_cfg = json.loads((lab.drafts["seed-wiring"] / "config.json").read_text())
    assert "eagle_aux_hidden_state_layer_ids" not in seed_cfg.get("eagle_config", {})  # the seed wrote no ids
    no_head = load_file(str(lab.drafts["no-lm-head"] / "model.safetensors"))
    assert "lm_head.weight" not in no_head and "draft_vocab_size" in json.loads(
        (lab.drafts["no-lm-head"] / "config.json").read_text())
    direct = load_file(str(lab.drafts["direct-d2t"] / "model.safetensors"))
    assert (direct["d2t"] - seed["d2t"]).tolist() == list(range(seed["d2t"].shape[0]))
    off = json.loads((lab.drafts["off-by-one"] / "config.json").read_text())
    assert off["eagle_aux_hidden_state_layer_ids"] == build.seed_wiring(lab.num_layers)
    healthy = json.loads((lab.drafts["healthy"] / "config.json").read_text())
    assert [i + 1 for i in healthy["eagle_config"]["eagle_aux_hidden_state_layer_ids"]] == \
        build.sglang_wiring(lab.num_layers)


def test_lab_inventory_host_vars(lab: LabPaths, monkeypatch):
    monkeypatch.setenv("ORCHESTRATOR_LAB_DIR", str(lab.root))
    inv = lab_inventory()
    assert inv.resolve(None) == ["lab"] and inv.host("lab").kind == "local"
    assert inv.host("localhost").kind == "local"
    hv = inv.host_vars("lab")
    assert hv["scenario"] == "seed-wiring" and hv["engine"] == "lab" and hv["target_num_layers"] == lab.num_layers
    assert hv["candidate_flags"]["speculative-draft-model-path"] == hv["draft"] == str(lab.drafts["seed-wiring"])
    assert hv["candidate_flags"]["speculative-num-steps"] == 7
    assert hv["fixed_flags"]["lab-capture-layers"] == ",".join(map(str, build.seed_wiring(lab.num_layers)))
    monkeypatch.setenv("ORCHESTRATOR_LAB_SCENARIO", "topk-override")
    assert active_scenario() == "topk-override"
    flags = lab_inventory().host_vars("lab")["candidate_flags"]
    assert (flags["speculative-num-steps"], flags["speculative-num-draft-tokens"]) == (1, 16)
    assert lab_is_built("topk-override") and lab_is_built("eagle-not-eagle3")
    with pytest.raises(UserInputError, match="unknown lab scenario"):
        lab_inventory("nonsense")


def test_lab_host_python_sees_sglang_and_still_runs_the_server(lab: LabPaths):
    env = {**lab_inventory(root=lab.root).host("lab").env, "PATH": "/usr/bin:/bin"}
    code = ("import importlib.util as u, orchestrator.lab.stand_in.server as s; "
            "print(u.find_spec('sglang').origin); print(s.READY_LINE)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd="/", timeout=60)
    assert out.returncode == 0, out.stderr
    origin, ready = out.stdout.split("\n")[:2]
    assert origin.startswith(str(lab.site)) and ready.startswith("The server is fired up")
    assert (lab.site / "sglang" / "srt" / "speculative" / "eagle_worker.py").is_file()


def test_cli_status_and_errors(lab: LabPaths, tmp_path):
    runner = CliRunner()
    result = runner.invoke(lab_app, ["status", "--dir", str(lab.root), "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["target"] and info["scenarios"]["seed-wiring"] and info["scenarios"]["healthy"]
    assert runner.invoke(lab_app, ["build", "--scenario", "nope", "--dir", str(tmp_path)]).exit_code == 2
    (tmp_path / "precious.txt").write_text("keep me")
    result = runner.invoke(lab_app, ["clean", "--dir", str(tmp_path)])
    assert result.exit_code == 2 and (tmp_path / "precious.txt").exists()


def test_clean_removes_a_lab_dir_but_not_the_cache(tmp_path):
    root = tmp_path / "lab"
    (root / "target").mkdir(parents=True)
    (root / "lab.json").write_text("{}")
    assert CliRunner().invoke(lab_app, ["clean", "--dir", str(root)]).exit_code == 0
    assert not root.exists() and not lab_is_built(root=root)
