"""Counterfactual served parts (remote_probes/evaluation/counterfactual.py): which swaps are built, how a swap is judged
on intervals, where the installed engine decides each part, the fix the named part gets (draft_fix_parts.py), and
one real draft test on the shipped lab models where the swap must name the part (a few seconds)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests import realparts

torch = realparts.importorskip("torch")

from remote_probes.eagle3.served import served_parts  # noqa: E402
from remote_probes.evaluation.counterfactual import judge, locate_refs, variants  # noqa: E402
from remote_probes.fixes.parts import part_fixes, write_without  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "orchestrator" / "data" / "lab"
CONFIG = {"hidden_size": 8, "vocab_size": 16, "draft_vocab_size": 8, "num_attention_heads": 2,
          "num_key_value_heads": 2, "rope_theta": 10000.0, "tie_word_embeddings": False}
TARGET = {"hidden_size": 8, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 4,
          "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}


def _state(**extra: object) -> dict:
    state = {"lm_head.weight": torch.zeros(8, 8), "d2t": torch.arange(8) * 0 + 1, "norm.weight": torch.ones(8),
             "fc.weight": torch.zeros(8, 24)}
    state.update(extra)
    return state


def _swaps(config: dict, state: dict, engine: str = "sglang") -> dict:
    parts = served_parts(config, state, "EAGLE3", engine, target_hidden_size=8)
    rows = variants(config, state, parts, TARGET, torch.ones(8) * 2, torch.randn(16, 8))
    return {r["part"]: r for r in rows}


def test_the_swaps_follow_what_the_engine_serves() -> None:
    plain = _swaps(CONFIG, _state())
    assert set(plain) == {"head", "norm", "d2t"}  # nothing to swap the target's embedding for; RoPE, heads as target
    assert plain["head"]["lm_head"].shape == (8, 8) and plain["head"]["parts"]["head"] == "target_head"
    assert torch.equal(plain["d2t"]["state"]["d2t"], torch.ones(8, dtype=torch.long) - torch.arange(8))
    assert torch.equal(plain["norm"]["state"]["norm.weight"], torch.ones(8) * 2)
    own = _state(**{"embed_tokens.weight": torch.zeros(16, 8)})
    # SGLang replaces a shipped embedding (the swap tries the draft's own); vLLM keeps it (the swap tries the target's)
    assert _swaps(CONFIG, own)["embedding"]["parts"]["embedding"] == "draft"
    assert _swaps(CONFIG, own, "vllm")["embedding"]["parts"]["embedding"] == "target"
    rope = _swaps(dict(CONFIG, rope_theta=100.0), _state())["rope"]
    assert rope["config"]["rope_theta"] == 10000.0 and "100.0" in rope["served"]
    heads = _swaps(dict(CONFIG, num_attention_heads=4, num_key_value_heads=4, head_dim=2), _state())["attention"]
    assert (heads["config"]["num_attention_heads"], heads["config"]["head_dim"]) == (2, 4)
    # a layout whose projections would not fit the checkpoint is not a counterfactual
    assert "attention" not in _swaps(dict(CONFIG, num_attention_heads=4, head_dim=4), _state())


def test_a_numeric_field_off_the_targets_is_scored_with_the_targets_value() -> None:
    target = dict(TARGET, rms_norm_eps=1e-6, hidden_act="silu")
    parts = served_parts(CONFIG, _state(), "EAGLE3", "sglang", target_hidden_size=8)
    rows = {r["part"]: r for r in variants(dict(CONFIG, rms_norm_eps=1e-2, hidden_act="gelu"), _state(), parts,
                                           target, torch.ones(8), torch.randn(16, 8))}
    assert rows["field.rms_norm_eps"]["config"]["rms_norm_eps"] == 1e-6
    assert rows["field.hidden_act"]["config"]["hidden_act"] == "silu" and "'gelu'" in rows["field.hidden_act"]["served"]
    same = {r["part"] for r in variants(dict(CONFIG, rms_norm_eps=1e-6), _state(), parts, target, torch.ones(8),
                                        torch.randn(16, 8))}
    assert not any(p.startswith("field.") for p in same)
    fixed = part_fixes([{"part": "field.rms_norm_eps", "served": "1e-2", "swapped": "1e-6", "refs": []}],
                       dict(CONFIG, rms_norm_eps=1e-2), target, "sglang", "SGLang 0.5.23")
    assert fixed["config"]["rms_norm_eps"] == 1e-6 and fixed["config_changed"] and not fixed["blockers"]


def test_the_draft_runs_the_activation_its_config_names(tiny_config: dict) -> None:
    from remote_probes.eagle3.checkpoint import DraftLoadError
    from remote_probes.eagle3.draft import DraftConfig, Eagle3Draft

    torch.manual_seed(0)
    silu = Eagle3Draft(DraftConfig.from_dict(tiny_config))
    gelu = Eagle3Draft(DraftConfig.from_dict(dict(tiny_config, hidden_act="gelu")))
    gelu.load_state_dict(silu.state_dict())
    x = torch.randn(1, 3, tiny_config["hidden_size"])
    assert not torch.allclose(silu.midlayer.mlp(x), gelu.midlayer.mlp(x))
    with pytest.raises(DraftLoadError, match="hidden_act 'swish7'"):
        DraftConfig.from_dict(dict(tiny_config, hidden_act="swish7"))


def _figures(per_prompt: list[tuple[float, float]]) -> dict:
    from remote_probes.evaluation.interval_stats import ratio_interval

    ys, xs = [t for t, _ in per_prompt], [c for _, c in per_prompt]
    iv = ratio_interval(ys, xs)
    assert iv is not None
    return {"tau_serving": iv.estimate, "tau_serving_ci": iv.as_list(), "_units": (ys, xs)}


def test_a_swap_recovers_only_on_intervals() -> None:
    served = _figures([(10 + i % 3, 10) for i in range(16)])
    better = _figures([(28 + i % 3, 10) for i in range(16)])
    assert judge(served, better, 0.2, 0.95)["recovers"]
    assert judge(better, served, 0.2, 0.95)["hurts"]
    same = _figures([(10 + (i + 1) % 3, 10) for i in range(16)])
    assert not judge(served, same, 0.2, 0.95)["recovers"]
    # a 15% gain on every prompt clears nothing: it is under the 20% margin, whatever the intervals say
    assert not judge(served, _figures([(11.5 + 1.15 * (i % 3), 10) for i in range(16)]), 0.2, 0.95)["recovers"]
    # two noisy prompts: the marginal intervals overlap, so no verdict
    assert not judge(_figures([(10, 10), (30, 10)]), _figures([(25, 10), (31, 10)]), 0.2, 0.95)["recovers"]


def test_the_deciding_code_is_located_in_the_installed_engine() -> None:
    from orchestrator.lab.building.build import cached_sglang_tree

    tree = cached_sglang_tree()
    refs = locate_refs("sglang", [str(tree)])
    assert refs["root"] and not refs["missing"], refs
    embed = {(r["file"], r["line"]) for r in refs["parts"]["embedding"]}
    assert ("srt/models/llama.py", 779) in embed  # eagle3_served.SGLANG_REFS["set_embed"] for 0.5.12.post1
    assert "def set_embed(" in (tree / "sglang" / "srt" / "models" / "llama.py").read_text().splitlines()[778]
    nowhere = locate_refs("vllm", ["/nonexistent"]) if not _has_vllm() else None
    if nowhere is not None:
        assert nowhere["root"] is None and nowhere["missing"]


def _has_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def test_the_named_part_gets_its_fix(tmp_path: Path) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file

    swaps = [{"part": "rope", "served": "rope_theta 100", "swapped": "rope_theta 10000 (the target's config)",
              "refs": [{"file": "srt/models/llama.py", "line": 267}]},
             {"part": "embedding", "served": "the draft's own", "swapped": "the target's embedding", "refs": []},
             {"part": "norm", "served": "ones", "swapped": "the target's final norm", "refs": []}]
    fixed = part_fixes(swaps, dict(CONFIG, rope_theta=100.0), TARGET, "vllm", "vLLM 0.32.0")
    assert fixed["config"]["rope_parameters"] == TARGET["rope_parameters"] and "rope_theta" not in fixed["config"]
    assert fixed["drop"] == ["embed_tokens.weight"] and [b["what"] for b in fixed["blockers"]] == ["norm"]
    assert "srt/models/llama.py:267" in fixed["changes"][0]["why"]
    on_sglang = part_fixes(swaps[1:2], CONFIG, TARGET, "sglang", "SGLang")
    assert not on_sglang["drop"] and on_sglang["blockers"][0]["what"] == "embedding"

    src, dest = tmp_path / "draft", tmp_path / "fix"
    src.mkdir()
    dest.mkdir()
    save_file({"model.embed_tokens.weight": torch.ones(4, 2), "fc.weight": torch.arange(6.0).reshape(2, 3),
               "d2t": torch.arange(3)}, str(src / "model.safetensors"), metadata={"format": "pt"})
    assert write_without(str(src), str(dest), ["embed_tokens.weight"]) == ["model.safetensors"]
    with safe_open(str(dest / "model.safetensors"), "pt") as f:
        assert sorted(f.keys()) == ["d2t", "fc.weight"] and f.metadata() == {"format": "pt"}
        assert torch.equal(f.get_tensor("fc.weight"), torch.arange(6.0).reshape(2, 3))
        assert torch.equal(f.get_tensor("d2t"), torch.arange(3))


def test_the_lab_draft_names_the_embedding_sglang_replaces(tmp_path: Path) -> None:
    """The healthy shipped draft made into one that trained its own embedding (build.write_variant): served by
    SGLang's rules it accepts almost nothing, and the swap back to its own embedding recovers it."""
    import remote_probes.evaluation.draft_test as draft_test
    from orchestrator.lab.building.build import write_variant

    lab = tmp_path / "lab"
    (lab / "drafts").mkdir(parents=True)
    shutil.copytree(SHIPPED / "target", lab / "target")
    shutil.copytree(SHIPPED / "drafts" / "healthy", lab / "drafts" / "healthy")
    write_variant(lab / "drafts" / "healthy", lab / "drafts" / "trained-embedding", "trained-embedding", 12)
    prompts = json.loads((lab / "target" / "prompts.json").read_text())
    (tmp_path / "prompts.json").write_text(json.dumps(prompts[:8]))
    torch.set_num_threads(1)
    result = draft_test.main({"target": str(lab / "target"), "draft": str(lab / "drafts" / "trained-embedding"),
                              "engine": "sglang", "counterfactual": True, "num_prompts": 8, "max_new_tokens": 32,
                              "prompts_file": str(tmp_path / "prompts.json")})
    cf = result["counterfactual"]
    assert [w["wiring"] for w in result["wirings"]] == [result["server_wiring"]]  # the served wiring only
    assert cf["recovering"] == ["embedding"], cf["verdict"]
    assert "srt/models/llama.py:" in cf["verdict"] or cf["engine_source"]["root"] is None
    assert all(not s["recovers"] for s in cf["swaps"] if s["part"] != "embedding")


@pytest.mark.parametrize("bad", [{"counterfactual": "yes"}, {"engine_site": 3}])
def test_counterfactual_arguments_are_checked(bad: dict, tmp_path: Path) -> None:
    import remote_probes.evaluation.draft_test as draft_test
    from remote_probes.agent.protocol import ProbeFailure

    with pytest.raises(ProbeFailure, match=next(iter(bad))):
        draft_test.parse_args({"target": str(tmp_path), "draft": str(tmp_path), **bad})
