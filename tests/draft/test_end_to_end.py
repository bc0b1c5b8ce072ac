"""End to end: the lab's tiny target and its draft trained on the embedding-first wiring W = [0, N/2, N-1]
(built and calibrated once), then the draft_test probe as a subprocess: it must put W in the best tier and find
the cost of SGLang's default wiring.

First run trains both models (~6 min on 2 cores); later runs reuse $ORCHESTRATOR_CACHE_DIR.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests import realparts

realparts.importorskip("torch")
realparts.importorskip("transformers")
realparts.importorskip("tokenizers")

from orchestrator.probes import probe_module  # noqa: E402
from tests.draft.conftest import REPO  # noqa: E402

pytestmark = [pytest.mark.lab, pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="session")
def lab_pair():
    """The lab's calibrated seed-wiring draft (trained on W, retrained by the build if a machine's first training
    was not clear) and its target: the same lab directory the lab tests use."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from orchestrator.lab.building.build import seed_wiring
    from orchestrator.lab.building.builder import build_lab
    from tests.labdir import test_lab_root

    lab = build_lab("seed-wiring", root=test_lab_root())
    return lab.target, lab.drafts["seed-wiring"], seed_wiring(lab.num_layers), lab.num_layers


def run_draft_test(tmp_path, args: dict, probe: str = "draft_test") -> dict:
    (tmp_path / "args.json").write_text(json.dumps(args))
    env = dict(os.environ, ORCH_PROBE_NONCE="e2e")
    proc = subprocess.run([sys.executable, "-m", probe_module(probe), str(tmp_path / "args.json")], cwd=str(REPO),
                          capture_output=True, text=True, timeout=600, env=env)
    out = proc.stdout
    begin, end = "@@ORCH-RESULT-BEGIN e2e@@", "@@ORCH-RESULT-END e2e@@"
    assert begin in out, proc.stderr[-3000:]
    doc = json.loads(out.split(begin, 1)[1].split(end, 1)[0])
    assert proc.returncode == 0 and doc["ok"], doc
    assert "@@ORCH-PROGRESS@@" in proc.stderr
    from orchestrator.probes import PROBES as TYPED
    from orchestrator.probes import check_result

    check_result(probe, TYPED[probe][1], doc["result"])  # the result the orchestrator validates
    return doc["result"]


def test_draft_test_finds_the_trained_wiring(tmp_path, lab_pair):
    target, draft, wiring, n = lab_pair
    config = json.loads((draft / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert "eagle_aux_hidden_state_layer_ids" not in config["eagle_config"]  # the seed's pipeline wrote none
    from orchestrator.lab.building.calibrate import FlagshipSample

    sample = FlagshipSample()  # the sample the lab's calibration checked this draft with
    result = run_draft_test(tmp_path, {"target": str(target), "draft": str(draft), "wirings": "auto",
                                       "engine": "sglang", "num_prompts": sample.dt_prompts,
                                       "max_new_tokens": sample.dt_tokens, "steps": sample.dt_steps,
                                       "margin": sample.wiring_margin})
    by_wiring = {tuple(w["wiring"]): w for w in result["wirings"]}
    default = [2, n // 2, n - 3]
    ranking = [(w["wiring"], w["tau_serving"], w["tau_serving_ci"], w["tier"]) for w in result["wirings"]]
    trained, served = by_wiring[tuple(wiring)], by_wiring[tuple(default)]
    # the trained wiring is in the best tier: tied with, or above, every other wiring (never "the one exact winner")
    assert trained["tier"] == 1 and wiring in result["best_tier"], ranking
    assert result["server_wiring"] == default and result["server"]["wiring"] == default
    # the served wiring is clearly worse: intervals apart, and the paired gain clears the 20% margin
    assert served["tau_serving_ci"][1] < trained["tau_serving_ci"][0], ranking
    assert trained["beats_server"] and trained["vs_server"]["ratio_ci"][0] > 1.2
    assert result["decision"] == "mismatch" and served["tier"] > 1
    assert len(trained["acc"]) == len(trained["alpha"]) == len(trained["acc_ci"]) == 5
    assert all(lo <= a <= hi for a, (lo, hi) in zip(trained["acc"], trained["acc_ci"], strict=True))
    assert str(default) in result["verdict"] and "CI" in result["verdict"]
    assert result["target"] == {**result["target"], "num_layers": n, "vocab_size": 1024}


def test_draft_test_on_explicit_wirings_and_vllm(tmp_path, lab_pair):
    target, draft, wiring, n = lab_pair
    result = run_draft_test(tmp_path, {"target": str(target), "draft": str(draft), "engine": "vllm",
                                       "wirings": {"trained": wiring, "no-embed": [n // 2, n - 1, n]},
                                       "prompts_file": str(target / "prompts.json"), "num_prompts": 4,
                                       "max_new_tokens": 32, "steps": 3})
    by_name = {w["name"]: w for w in result["wirings"]}
    assert by_name["trained"]["tier"] == 1 and "server(vllm)" in by_name  # the engine's wiring is always measured
    assert result["server"]["wiring"] == [2, n // 2, n - 3]


def test_a_d2t_of_target_ids_is_scored_through_its_derived_offsets(tmp_path, lab_pair):
    """The lab's direct-d2t fault on the seed draft: d2t holds the target ids i + d2t[i] instead of the offsets.
    Served as it is, both engines map drafted tokens past the vocabulary; the draft test reads the map through
    d2t[i] - i (what draft_fix writes), so the wiring fault under it is measured in the same run, with exactly the
    figures of the draft as exported right. The reconcile predicts what is SERVED, so it still refuses the map."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    target, draft, wiring, n = lab_pair
    direct = tmp_path / "direct-d2t"
    shutil.copytree(draft, direct)
    state = load_file(str(draft / "model.safetensors"))
    state["d2t"] = state["d2t"] + torch.arange(state["d2t"].shape[0], dtype=state["d2t"].dtype)
    save_file(state, str(direct / "model.safetensors"))
    args = {"target": str(target), "engine": "vllm", "wirings": {"trained": wiring},
            "prompts_file": str(target / "prompts.json"), "num_prompts": 4, "max_new_tokens": 32, "steps": 3}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    as_exported = run_draft_test(tmp_path / "a", {**args, "draft": str(draft)})
    derived = run_draft_test(tmp_path / "b", {**args, "draft": str(direct)})
    assert "d2t_derived" not in as_exported["parts"]
    assert "direct_ids" not in str(as_exported["verdict"]) and "scored through its offsets" not in \
        as_exported["verdict"]
    assert "not offsets" in derived["parts"]["d2t_derived"]["reason"], derived["parts"]
    assert "scored through its offsets d2t[i] - i" in derived["verdict"]

    def figures(result: dict) -> dict:
        return {tuple(w["wiring"]): (w["tau_serving"], w["tau_serving_ci"]) for w in result["wirings"]}

    assert figures(derived) == figures(as_exported) and derived["decision"] == as_exported["decision"]
    prompts = json.loads((target / "prompts.json").read_text())
    prompts = [p if isinstance(p, str) else p["text"] for p in (prompts.get("prompts", prompts)
                                                                 if isinstance(prompts, dict) else prompts)][:2]
    (tmp_path / "c").mkdir()
    rc = run_draft_test(tmp_path / "c", {"target": str(target), "engine": "vllm", "prompts": prompts,
                                         "num_prompts": 2, "max_new_tokens": 16,
                                         "configs": [{"draft": str(direct), "algorithm": "EAGLE3", "steps": 3},
                                                     {"draft": str(draft), "algorithm": "EAGLE3", "steps": 3}]},
                        probe="draft_reconcile")
    refused, served = rc["configs"]
    assert "direct target ids" in refused["error"] and "row" not in refused, refused
    assert served["row"]["tau_serving"] is not None
