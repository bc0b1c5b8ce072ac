"""draft_fix for ``vllm serve``: the fix derived from the evidence on drafts saved by speculators and SpecForge, against
the real vLLM 0.33.0 and 0.11.0 trees (which ids each reads and where it captures, read from their own source)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from remote_probes.engine.vllm_capture import capture_rules, vllm_wiring  # noqa: E402
from tests import realparts
from tests.draft.libraries import save_specforge_draft, save_speculators_draft, save_target_config

pytestmark = pytest.mark.vllm_source
N = 12
SEED_WIRING = [0, N // 2, N - 1]  # trained with the embedding output first (the seed's draft)
NEW, OLD = "0.33.0", "0.11.0"



def fix_args(draft: Path, target: Path, tree: Path, *, method: str = "eagle3", spec_as_text: bool = False,
             **extra: Any) -> dict[str, Any]:
    spec = {"method": method, "model": str(draft), "num_speculative_tokens": 5}
    flags = {"speculative-config": json.dumps(spec) if spec_as_text else spec, "max-model-len": 2048}
    return {"draft": str(draft), "target": str(target), "candidate_flags": flags, "engine": "vllm",
            "engine_sys_path": [str(tree)], **extra}


def mismatch(best: list[int]) -> dict[str, Any]:
    return {"decision": "mismatch", "best": best, "served": [2, N // 2, N - 3]}


@pytest.fixture
def specforge(tmp_path: Path) -> tuple[Path, Path]:
    draft, target = tmp_path / "models" / "draft", tmp_path / "models" / "target"
    save_specforge_draft(draft)  # no ids anywhere: vLLM feeds its default [2, N//2, N-3]
    save_target_config(target, num_layers=N)
    return draft, target


def test_embedding_first_wiring_is_served_on_0_33_by_top_level_ids_beside_the_draft(run_probe, vllm_trees,
                                                                                     specforge) -> None:
    draft, target = specforge
    before = (draft / "config.json").read_bytes()
    res = run_probe("draft_fix", fix_args(draft, target, vllm_trees[NEW], wiring=mismatch(SEED_WIRING))).result
    assert res["fix_status"] == "fix", res["summary"]
    assert res["engine"]["engine"] == "vllm" and res["engine"]["version"] == NEW
    fixed = Path(res["draft"])
    assert fixed.name == "draft.orchestrator-fix" and (draft / "config.json").read_bytes() == before
    config = json.loads((fixed / "config.json").read_text())
    assert config["eagle_aux_hidden_state_layer_ids"] == SEED_WIRING  # vLLM reads them as HF indices, no +1
    # what the real tree's rules make of the corrected config, in both of 0.33's runners
    for runner in ("v2", "v1"):
        assert vllm_wiring(config, N, capture_rules(str(vllm_trees[NEW] / "vllm"), runner)) == SEED_WIRING
    assert res["flags"]["speculative-config"]["model"] == str(fixed)
    assert res["flags"]["speculative-config"]["num_speculative_tokens"] == 5 and res["flags"]["max-model-len"] == 2048
    assert "vLLM 0.33.0" in res["summary"] and "eagle_aux_hidden_state_layer_ids None -> [0, 6, 11]" in res["summary"]


def test_vllm_0_11_reads_no_ids_so_nothing_config_can_do(run_probe, vllm_trees, specforge) -> None:
    draft, target = specforge
    res = run_probe("draft_fix", fix_args(draft, target, vllm_trees[OLD], wiring=mismatch([1, 5, 9]))).result
    assert res["fix_status"] == "blocked" and res["draft"] is None
    [blocker] = res["blockers"]
    assert "reads no layer ids from the draft config" in blocker["why"] and "0.11.0" in blocker["why"]
    assert any("0.33" in r for r in blocker["remedies"])
    assert not Path(str(draft) + ".orchestrator-fix").exists()


def test_the_final_normed_state_is_never_servable(run_probe, vllm_trees, specforge) -> None:
    draft, target = specforge
    res = run_probe("draft_fix", fix_args(draft, target, vllm_trees[NEW], wiring=mismatch([2, N // 2, N]))).result
    assert res["fix_status"] == "blocked" and "after the final norm" in res["blockers"][0]["why"]


def test_sglang_ids_on_a_speculators_draft_get_vllms_own_reading(run_probe, vllm_trees, tmp_path: Path) -> None:
    """The cross-engine pair: nested ids in SGLang's +1 convention mean nothing to vLLM 0.33's default runner; the fix
    states the trained wiring at the top level and leaves the nested ids SGLang reads as they were."""
    draft, target = tmp_path / "spec", tmp_path / "target"
    save_speculators_draft(draft, aux_ids=None)
    save_target_config(target, num_layers=N)
    config = json.loads((draft / "config.json").read_text())
    config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [-1, 5, 10]}
    (draft / "config.json").write_text(json.dumps(config))
    res = run_probe("draft_fix", fix_args(draft, target, vllm_trees[NEW], spec_as_text=True,
                                          wiring=mismatch(SEED_WIRING))).result
    fixed = json.loads((Path(res["draft"]) / "config.json").read_text())
    assert fixed["eagle_aux_hidden_state_layer_ids"] == SEED_WIRING
    assert fixed["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [-1, 5, 10]
    assert isinstance(res["flags"]["speculative-config"], dict)  # given as JSON text, returned as the object


def test_eagle_method_with_an_eagle3_draft_and_blockers(run_probe, vllm_trees, specforge) -> None:
    draft, target = specforge
    findings = [{"id": "lm_head", "severity": "error", "message": "draft_vocab_size 64 but no lm_head.weight"}]
    res = run_probe("draft_fix", fix_args(draft, target, vllm_trees[NEW], method="eagle", findings=findings,
                                          wiring={"decision": "fine", "best": [2, 6, 9], "served": [2, 6, 9]})).result
    assert res["fix_status"] == "partial"
    assert res["flags"]["speculative-config"]["method"] == "eagle3" and res["draft"] is None
    assert res["blockers"][0]["what"] == "lm_head" and "shares the target's head" in res["blockers"][0]["why"]


def test_nothing_to_fix_and_a_bad_config_flag(run_probe, vllm_trees, specforge) -> None:
    draft, target = specforge
    fine = {"decision": "fine", "best": [2, 6, 9], "served": [2, 6, 9]}
    res = run_probe("draft_fix", fix_args(draft, target, vllm_trees[NEW], wiring=fine)).result
    assert res["fix_status"] == "nothing_to_fix"
    args = fix_args(draft, target, vllm_trees[NEW], wiring=fine)
    args["candidate_flags"]["speculative-config"] = "{not json"
    run = run_probe("draft_fix", args)
    assert not run.outcome.ok and run.outcome.error is not None and run.outcome.error.kind == "bad_args"
    assert "--speculative-config is not JSON" in run.outcome.error.message


def test_a_d2t_of_target_ids_is_rewritten_as_offsets_in_a_copy_beside_the_draft(run_probe, vllm_trees,
                                                                                 tmp_path: Path) -> None:
    """The lab's direct-d2t fault on a SpecForge-saved draft: d2t holds the target ids (hot) instead of the offsets
    hot - i both engines add to arange (vLLM 0.32.0 fails its first draft step on it). The ids determine the
    offsets, so the fix is servable: a copy beside the draft whose d2t is exactly the offsets SpecForge saved."""
    torch = realparts.importorskip("torch")
    from safetensors.torch import load_file, save_file

    good, target = tmp_path / "models" / "good", tmp_path / "models" / "target"
    save_specforge_draft(good)
    save_target_config(target, num_layers=N)
    weights = load_file(str(good / "model.safetensors"))
    offsets = weights["d2t"].clone()
    draft = tmp_path / "models" / "direct-d2t"
    draft.mkdir()
    (draft / "config.json").write_bytes((good / "config.json").read_bytes())
    ids = offsets + torch.arange(offsets.numel())
    save_file({**weights, "d2t": ids.to(offsets.dtype)}, str(draft / "model.safetensors"))
    before = (draft / "model.safetensors").read_bytes()

    def findings(path: Path) -> list[dict[str, Any]]:
        return run_probe("draft_inspect", {"path": str(path), "target_path": str(target)}).result["findings"]

    found = findings(draft)
    assert [f["details"]["verdict"] for f in found if f["id"] == "d2t"] == ["direct_ids"]
    res = run_probe("draft_fix", fix_args(draft, target, vllm_trees[NEW], findings=found)).result
    assert res["fix_status"] == "fix", res["summary"]
    assert [c["what"] for c in res["changes"]] == ["d2t", "speculative-config model"] and res["blockers"] == []
    fixed = Path(res["draft"])
    assert res["flags"]["speculative-config"]["model"] == str(fixed)
    assert (draft / "model.safetensors").read_bytes() == before  # the draft itself is never changed
    mended = load_file(str(fixed / "model.safetensors"))
    assert torch.equal(mended["d2t"], offsets)
    assert all(torch.equal(mended[k], v) for k, v in weights.items() if k != "d2t")
    assert [f["severity"] for f in findings(fixed) if f["id"] == "d2t"] == ["info"]
    # a d2t that is no map of distinct ids stays a blocker, with the reason the offsets cannot be derived
    save_file({**weights, "d2t": torch.zeros_like(offsets)}, str(draft / "model.safetensors"))
    wrong = [{"id": "d2t", "severity": "error", "message": "d2t holds target ids", "details": {"verdict": "direct_ids"}}]
    res = run_probe("draft_fix", fix_args(draft, target, vllm_trees[NEW], findings=wrong)).result
    assert res["fix_status"] == "blocked" and "offsets cannot be derived" in res["blockers"][0]["why"]
