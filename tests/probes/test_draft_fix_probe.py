"""draft_fix: the fix a real SGLang host can serve, derived from the evidence, on drafts saved by SpecForge and
speculators and on the real 0.5.12.post1 and 0.5.23 trees (their capture rule is read from their own source)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from remote_probes.engine.sglang_capture import LLAMA, STAGE, capture_rules, find_sglang_root  # noqa: E402
from tests import realparts
from tests.draft.libraries import save_specforge_draft, save_speculators_draft, save_target_config

N = 12
SEED_WIRING = [0, N // 2, N - 1]  # trained with the embedding output first (the seed's draft)


@pytest.fixture
def checkpoints(tmp_path: Path) -> tuple[Path, Path]:
    draft, target = tmp_path / "models" / "draft", tmp_path / "models" / "target"
    save_specforge_draft(draft)  # no eagle_config ids: SGLang feeds its default [2, N//2, N-3]
    save_target_config(target, num_layers=N)
    return draft, target


def fix_args(draft: Path, target: Path, tree: Path, **extra: Any) -> dict[str, Any]:
    flags = {"speculative-algorithm": "EAGLE3", "speculative-draft-model-path": str(draft),
             "speculative-num-steps": 7, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 8}
    return {"draft": str(draft), "target": str(target), "candidate_flags": flags, "engine_sys_path": [str(tree)],
            **extra}


def mismatch(best: list[int]) -> dict[str, Any]:
    return {"decision": "mismatch", "best": best, "served": [2, N // 2, N - 3]}


@pytest.mark.parametrize("version", ["0.5.12.post1", "0.5.23"])
def test_capture_rule_is_read_from_the_tree_and_cites_lines_that_say_so(sglang_trees, version: str) -> None:
    root = find_sglang_root([str(sglang_trees(version))])
    assert root is not None
    rules = capture_rules(root)
    assert rules["embedding"] is (version == "0.5.23"), rules["why"]
    assert rules["final_norm"] is False
    for cite in rules["evidence"]:
        line = Path(root, cite["file"]).read_text().splitlines()[cite["line"] - 1]
        assert line.strip() == cite["text"]
    files = [c["file"] for c in rules["evidence"]]
    if version == "0.5.23":
        assert files == [LLAMA, STAGE] and "capture_output" in rules["evidence"][0]["text"]
    else:
        assert [c["text"] for c in rules["evidence"]] == ["residual = None",
                                                        "aux_hidden_states.append(hidden_states + residual)"]


def test_embedding_first_wiring_cannot_be_served_on_0_5_12(run_probe, sglang_trees, checkpoints) -> None:
    draft, target = checkpoints
    before = (draft / "config.json").read_bytes()
    res = run_probe("draft_fix", fix_args(draft, target, sglang_trees("0.5.12.post1"),
                                          wiring=mismatch(SEED_WIRING))).result
    assert res["fix_status"] == "blocked" and res["draft"] is None and res["changes"] == []
    [blocker] = res["blockers"]
    assert blocker["what"] == "wiring" and "hidden_states[0] is the embedding output" in blocker["why"]
    assert "residual is None before layer 0" in blocker["why"]
    assert any("0.5.23" in r for r in blocker["remedies"]) and any("retrain" in r for r in blocker["remedies"])
    assert res["flags"] == fix_args(draft, target, Path("."))["candidate_flags"]  # nothing to restart with
    assert (draft / "config.json").read_bytes() == before
    assert not Path(str(draft) + ".orchestrator-fix").exists()
    assert "no fix SGLang 0.5.12.post1 can serve" in res["summary"]


def test_embedding_first_wiring_is_served_on_0_5_23_by_a_config_beside_the_draft(run_probe, sglang_trees,
                                                                                   checkpoints) -> None:
    draft, target = checkpoints
    before = (draft / "config.json").read_bytes()
    res = run_probe("draft_fix", fix_args(draft, target, sglang_trees("0.5.23"), wiring=mismatch(SEED_WIRING))).result
    assert res["fix_status"] == "fix", res["summary"]
    fixed = Path(res["draft"])
    assert fixed.parent == draft.parent and fixed.name == "draft.orchestrator-fix"
    config = json.loads((fixed / "config.json").read_text())
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [-1, N // 2 - 1, N - 2]  # SGLang adds 1
    assert (draft / "config.json").read_bytes() == before  # the draft itself is never touched
    weights = sorted(p.name for p in draft.iterdir() if p.name != "config.json")
    for name in weights:
        assert (fixed / name).is_symlink() and (fixed / name).resolve() == (draft / name).resolve()
    assert res["flags"]["speculative-draft-model-path"] == str(fixed)
    assert json.loads((fixed / "ORCHESTRATOR_FIX.json").read_text())["from"] == str(draft)
    # derived again (a second session): the directory is ours, so it is rewritten, not refused
    again = run_probe("draft_fix", fix_args(draft, target, sglang_trees("0.5.23"), wiring=mismatch(SEED_WIRING)))
    assert again.result["draft"] == str(fixed)


@pytest.mark.parametrize("version", ["0.5.12.post1", "0.5.23"])
def test_the_final_normed_state_is_never_servable(run_probe, sglang_trees, checkpoints, version: str) -> None:
    draft, target = checkpoints
    res = run_probe("draft_fix", fix_args(draft, target, sglang_trees(version),
                                          wiring=mismatch([2, N // 2, N]))).result
    assert res["fix_status"] == "blocked"
    assert "after the final norm" in res["blockers"][0]["why"]


def test_a_servable_wiring_on_a_speculators_draft_keeps_vllms_reading_coherent(run_probe, sglang_trees,
                                                                              tmp_path: Path) -> None:
    draft, target = tmp_path / "spec", tmp_path / "target"
    save_speculators_draft(draft, aux_ids=[1, 5, 8])
    save_target_config(target, num_layers=N)
    res = run_probe("draft_fix", fix_args(draft, target, sglang_trees("0.5.12.post1"),
                                          wiring=mismatch([1, 5, 8]))).result
    config = json.loads((Path(res["draft"]) / "config.json").read_text())
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 4, 7]
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 5, 8]


def test_flags_the_server_changed_are_derived_back(run_probe, sglang_trees, checkpoints) -> None:
    draft, target = checkpoints
    args = fix_args(draft, target, sglang_trees("0.5.12.post1"),
                    effective={"speculative_algorithm": "EAGLE", "speculative_eagle_topk": 1},
                    overrides=[{"flag": "speculative_num_draft_tokens", "requested": 16, "effective": 2,
                                "source": "log"}],
                    wiring={"decision": "fine", "best": [2, 6, 9], "served": [2, 6, 9]})
    args["candidate_flags"].update({"speculative-algorithm": "EAGLE", "speculative-num-steps": 1,
                                    "speculative-num-draft-tokens": 16})
    res = run_probe("draft_fix", args).result
    assert res["fix_status"] == "fix" and res["draft"] is None
    assert res["flags"]["speculative-algorithm"] == "EAGLE3"
    assert res["flags"]["speculative-num-steps"] == 15
    assert {c["what"] for c in res["changes"]} == {"speculative-algorithm", "speculative-num-steps"}


def test_the_draft_token_cap_is_left_alone_while_the_wiring_is_wrong(run_probe, sglang_trees, checkpoints) -> None:
    """The seed's red herring: 16 draft tokens capped at steps + 1 are real, but the mis-wired draft comes first."""
    draft, target = checkpoints
    args = fix_args(draft, target, sglang_trees("0.5.12.post1"), effective={"speculative_eagle_topk": 1},
                    overrides=[{"flag": "speculative_num_draft_tokens", "requested": 16, "effective": 8}],
                    wiring=mismatch(SEED_WIRING))
    res = run_probe("draft_fix", args).result
    assert res["fix_status"] == "blocked" and res["changes"] == []
    assert res["flags"]["speculative-num-steps"] == 7
    assert any("capped to 8 by topk 1" in n and "wiring mismatch" in n for n in res["notes"])


def test_weights_config_cannot_mend_are_blockers(run_probe, sglang_trees, checkpoints) -> None:
    draft, target = checkpoints
    findings = [{"id": "lm_head", "severity": "error", "message": "draft_vocab_size 64 but no lm_head.weight"},
                {"id": "d2t", "severity": "error", "message": "d2t holds target ids"}]
    res = run_probe("draft_fix", fix_args(draft, target, sglang_trees("0.5.12.post1"), findings=findings)).result
    assert res["fix_status"] == "blocked"
    assert [b["what"] for b in res["blockers"]] == ["lm_head", "d2t"]


def test_nothing_to_fix_says_so(run_probe, sglang_trees, checkpoints) -> None:
    draft, target = checkpoints
    res = run_probe("draft_fix", fix_args(draft, target, sglang_trees("0.5.23"),
                                          wiring={"decision": "fine", "best": [2, 6, 9], "served": [2, 6, 9]})).result
    assert res["fix_status"] == "nothing_to_fix" and res["changes"] == [] and res["blockers"] == []


def test_a_directory_it_did_not_write_is_never_overwritten(run_probe, sglang_trees, checkpoints) -> None:
    draft, target = checkpoints
    theirs = Path(str(draft) + ".orchestrator-fix")
    theirs.mkdir()
    (theirs / "config.json").write_text("{}")
    run = run_probe("draft_fix", fix_args(draft, target, sglang_trees("0.5.23"), wiring=mismatch(SEED_WIRING)))
    assert not run.outcome.ok and run.outcome.error is not None
    assert run.outcome.error.kind == "exists" and "not written by orchestrator" in run.outcome.error.message
    assert (theirs / "config.json").read_text() == "{}"


def test_a_d2t_of_target_ids_is_rewritten_as_offsets_for_sglang_too(run_probe, sglang_trees, checkpoints,
                                                                    tmp_path: Path) -> None:
    """SGLang adds arange to d2t as vLLM does (hot_token_id): the same servable fix, a copy beside the draft."""
    torch = realparts.importorskip("torch")
    from safetensors.torch import load_file, save_file

    good, target = checkpoints
    weights = load_file(str(good / "model.safetensors"))
    offsets = weights["d2t"].clone()
    draft = tmp_path / "models" / "direct-d2t"
    draft.mkdir()
    (draft / "config.json").write_bytes((good / "config.json").read_bytes())
    save_file({**weights, "d2t": offsets + torch.arange(offsets.numel())}, str(draft / "model.safetensors"))
    found = run_probe("draft_inspect", {"path": str(draft), "target_path": str(target)}).result["findings"]
    res = run_probe("draft_fix", fix_args(draft, target, sglang_trees("0.5.12.post1"), findings=found)).result
    assert res["fix_status"] == "fix" and res["changes"][0]["what"] == "d2t", res["summary"]
    assert "hot_token_id" in res["changes"][0]["why"]
    fixed = Path(res["flags"]["speculative-draft-model-path"])
    assert fixed == Path(res["draft"]) and torch.equal(load_file(str(fixed / "model.safetensors"))["d2t"], offsets)
