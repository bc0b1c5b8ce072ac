"""draft_inspect on EAGLE-3 checkpoints written here with torch + safetensors, in each layout real drafts use."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.probes import parse_result
from orchestrator.probes.models import DraftInspectResult
from tests import realparts

torch = realparts.importorskip("torch")
safetensors_torch = realparts.importorskip("safetensors.torch")
pytestmark = pytest.mark.torch

H, V, VD, N = 64, 512, 128, 12  # draft hidden, target vocab, draft vocab, target layers


def _selection() -> list[int]:
    """A frequency-style draft vocabulary: a dense low block (adjacent ids -> repeated offsets) + scattered ids."""
    gen = torch.Generator().manual_seed(0)
    rest = (torch.randperm(V - 64, generator=gen)[: VD - 64] + 64).tolist()
    return sorted(list(range(64)) + rest)


def write_draft(root: Path, *, arch: str = "LlamaForCausalLMEagle3", layer: str = "midlayer", prefix: str = "",
                lm_head: bool = True, d2t_mode: str = "offsets", ids: tuple[str, list[int]] | None = ("nested", [1, 5, 8]),
                rope_theta: float | None = 500000.0, extra_config: dict[str, Any] | None = None,
                target_hidden: int = H, embed: bool = False, shards: int = 1) -> Path:
    sel = _selection()
    t: dict[str, Any] = {
        "fc.weight": torch.randn(H, 3 * target_hidden),
        f"{layer}.input_layernorm.weight": torch.ones(H),
        f"{layer}.hidden_norm.weight": torch.ones(H),
        f"{layer}.self_attn.q_proj.weight": torch.randn(H, 2 * H),
        f"{layer}.self_attn.o_proj.weight": torch.randn(H, H),
        f"{layer}.mlp.down_proj.weight": torch.randn(H, 4 * H),
        "norm.weight": torch.ones(H),
    }
    if lm_head:
        t["lm_head.weight"] = torch.randn(VD, H)
    if embed:
        t["embed_tokens.weight"] = torch.randn(V, H)
    if d2t_mode:
        d2t = [s - i for i, s in enumerate(sel)] if d2t_mode == "offsets" else sel
        t["d2t"] = torch.tensor(d2t, dtype=torch.int64)
        t2d = torch.zeros(V, dtype=torch.bool)
        t2d[torch.tensor(sel)] = True
        t["t2d"] = t2d
    t = {(prefix + k if k not in ("d2t", "t2d", "lm_head.weight") else k): v for k, v in t.items()}
    root.mkdir(parents=True)
    names = sorted(t)
    if shards == 1:
        safetensors_torch.save_file(t, str(root / "model.safetensors"))
    else:
        weight_map = {}
        for s in range(shards):
            file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = {k: t[k] for k in names[s::shards]}
            safetensors_torch.save_file(part, str(root / file))
            weight_map.update(dict.fromkeys(part, file))
        (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    cfg: dict[str, Any] = {"architectures": [arch], "model_type": "llama", "hidden_size": H, "num_hidden_layers": 1,
                           "vocab_size": V, "draft_vocab_size": VD, "num_attention_heads": 4,
                           "num_key_value_heads": 2, "intermediate_size": 4 * H}
    if rope_theta is not None:
        cfg["rope_theta"] = rope_theta
    if ids and ids[0] == "nested":
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids[1], "use_aux_hidden_state": True}
    elif ids:
        cfg["eagle_aux_hidden_state_layer_ids"] = ids[1]
    cfg.update(extra_config or {})
    (root / "config.json").write_text(json.dumps(cfg))
    return root


AGREEING = dict.fromkeys(("agree_hidden_size", "agree_vocab_size", "agree_draft_vocab_size", "agree_attention",
                          "agree_max_position_embeddings", "agree_torch_dtype", "served_parts", "served_parts_eagle",
                          "draft_fields"),
                         "info")


def inspect(run_probe, path: Path, **args: Any) -> DraftInspectResult:
    run = run_probe("draft_inspect", dict({"path": str(path)}, **args))
    result = parse_result("draft_inspect", run.outcome)
    assert isinstance(result, DraftInspectResult)
    return result


def sev(res: DraftInspectResult) -> dict[str, str]:
    return {f.id: f.severity for f in res.findings}


def test_correct_specforge_draft_is_clean(run_probe, tmp_path):
    res = inspect(run_probe, write_draft(tmp_path / "d"), target_num_layers=N, target_hidden_size=H)
    assert sev(res) == {"architecture": "info", "variant_flags": "info", "fc_width": "info", "lm_head": "info", "d2t": "info", "t2d": "info",
                        "tied_embeddings": "info", "aux_layer_ids": "info", "rope": "info", "naming": "info",
                        "embed_tokens": "info", **AGREEING}
    assert res.feeds.sglang == [2, 6, 9] == res.feeds.vllm  # nested [1,5,8] +1 == default [2, N//2, N-3]
    assert res.finding("d2t").details["verdict"] == "offsets"
    assert res.naming.variant == "midlayer" and not res.naming.model_prefix
    assert res.tensors["d2t"].dtype == "I64" and res.tensors["d2t"].shape == [VD]
    assert res.tensors["fc.weight"].shape == [H, 3 * H]
    assert res.config["draft_vocab_size"] == VD and res.worst == "info"


def test_no_lm_head_with_draft_vocab_size_is_a_random_head(run_probe, tmp_path):
    res = inspect(run_probe, write_draft(tmp_path / "d", lm_head=False), target_num_layers=N)
    head = res.finding("lm_head")
    assert head.severity == "error" and "27908" in head.message and head.details["draft_vocab_size"] == VD
    # Without draft_vocab_size the target's head is used on purpose: not an error.
    res2 = inspect(run_probe, write_draft(tmp_path / "e", lm_head=False, d2t_mode="",
                                          extra_config={"draft_vocab_size": None}))
    assert res2.finding("lm_head").severity == "info"


def test_direct_d2t_is_caught_and_t2d_explains_it(run_probe, tmp_path):
    res = inspect(run_probe, write_draft(tmp_path / "d", d2t_mode="direct"), target_num_layers=N)
    d2t = res.finding("d2t")
    assert d2t.severity == "error" and d2t.details["verdict"] == "direct_ids"
    assert "exceeds the vocabulary" in d2t.details["reason"]
    assert res.finding("t2d").severity == "warning"


def test_top_level_ids_follow_the_vllm_convention(run_probe, tmp_path):
    res = inspect(run_probe, write_draft(tmp_path / "d", ids=("top", [1, 5, 8])), target_num_layers=N)
    aux = res.finding("aux_layer_ids")
    assert aux.severity == "warning" and aux.details["location"] == "top_level"
    assert res.feeds.sglang == [2, 6, 9]  # SGLang ignores top-level ids: default [2, N//2, N-3]
    assert res.feeds.vllm == [1, 5, 8]  # vLLM takes them as HF indices
    # Unknown target depth: SGLang's feed cannot be resolved, and the probe says so.
    res2 = inspect(run_probe, tmp_path / "d")
    assert res2.feeds.sglang is None and res2.feeds.vllm == [1, 5, 8]


def test_speculators_layers0_naming(run_probe, tmp_path):
    path = write_draft(tmp_path / "d", arch="Eagle3Speculator", layer="layers.0", ids=("top", [2, 6, 9]),
                       extra_config={"speculators_model_type": "eagle3"})
    res = inspect(run_probe, path, target_num_layers=N)
    assert res.naming.variant == "layers" and res.naming.speculators_config and res.naming.decoder_layers == [0]
    assert "speculators" in res.finding("naming").message
    assert res.feeds.sglang == res.feeds.vllm == [2, 6, 9] and res.finding("aux_layer_ids").severity == "info"


def test_model_prefix_and_sharded_weights(run_probe, tmp_path):
    res = inspect(run_probe, write_draft(tmp_path / "d", layer="layers.0", prefix="model.", shards=3),
                  target_num_layers=N)
    assert res.weights["sharded"] and len(res.weights["files"]) == 3
    assert res.naming.model_prefix and res.naming.variant == "layers"
    assert "model.fc.weight" in res.tensors and res.finding("fc_width").severity == "info"
    assert res.finding("d2t").severity == "info"


def test_plain_llama_architecture_misses_the_eagle3_loader(run_probe, tmp_path):
    res = inspect(run_probe, write_draft(tmp_path / "d", arch="LlamaForCausalLM"), target_num_layers=N)
    arch = res.finding("architecture")
    assert arch.severity == "error" and "33966" in arch.message and arch.details["eagle3_loader"] is False


def test_wrong_fc_width_missing_rope_and_foreign_hidden(run_probe, tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"num_hidden_layers": N, "hidden_size": 96, "vocab_size": V,
                                                    "rope_theta": 500000.0}))
    res = inspect(run_probe, write_draft(tmp_path / "d", rope_theta=None), target_path=str(target))
    assert res.target["hidden_size"] == 96 and res.target["source"]["num_layers"] == "target_path"
    assert res.finding("fc_width").severity == "error"  # 3 x 64 trained, target has 96
    assert res.finding("rope").severity == "warning" and "10000" in res.finding("rope").message
    assert res.finding("embed_tokens").severity == "error"  # no embedding and hidden sizes differ


def test_bad_inputs_are_clear_errors(run_probe, tmp_path):
    run = run_probe("draft_inspect", {"path": str(tmp_path / "missing")})
    assert run.outcome.error is not None and run.outcome.error.kind == "not_found"
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{broken")
    run = run_probe("draft_inspect", {"path": str(bad)})
    assert run.outcome.error is not None and run.outcome.error.kind == "bad_config"
    (bad / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": H}))
    (bad / "pytorch_model.bin").write_bytes(b"\0" * 16)
    res = parse_result("draft_inspect", run_probe("draft_inspect", {"path": str(bad)}).outcome)
    assert {"id": "weights", "severity": "warning"}.items() <= res.findings[0].model_dump().items()


def _draft_fields(res: DraftInspectResult) -> Any:
    return next(f for f in res.findings if f.id == "draft_fields")


def test_nonfinite_and_zero_weights_are_named_by_tensor(run_probe, tmp_path):
    """The values scan (remote_probes/checks/tensor_values.py) reads the saved bytes: a NaN, an Inf and a projection
    of zeros are each named by tensor in the draft_fields finding, whatever engine is installed."""
    root = write_draft(tmp_path / "d")
    state = safetensors_torch.load_file(str(root / "model.safetensors"))
    state["midlayer.mlp.down_proj.weight"][3, 7] = float("nan")
    state["fc.weight"][0, 0] = float("-inf")
    state["midlayer.self_attn.o_proj.weight"] = torch.zeros(H, H)
    state = {k: (v.to(torch.bfloat16) if k == "fc.weight" else v) for k, v in state.items()}
    safetensors_torch.save_file(state, str(root / "model.safetensors"))
    res = inspect(run_probe, root, target_num_layers=N, target_hidden_size=H)
    fields = _draft_fields(res)
    assert fields.severity == "error"
    values = {f["details"]["field"]: f for f in fields.details["findings"] if f["id"] == "tensor.values"}
    assert set(values) == {"midlayer.mlp.down_proj.weight", "fc.weight", "midlayer.self_attn.o_proj.weight"}
    assert values["midlayer.mlp.down_proj.weight"]["details"]["nonfinite"] == 1
    assert values["fc.weight"]["details"]["dtype"] == "BF16" and "1 non-finite" in values["fc.weight"]["message"]
    assert "all zeros" in values["midlayer.self_attn.o_proj.weight"]["message"]
    clean = inspect(run_probe, write_draft(tmp_path / "ok"), target_num_layers=N, target_hidden_size=H)
    assert not [f for f in _draft_fields(clean).details["findings"] if f["id"] == "tensor.values"]
