"""An MLA EAGLE-3 draft for a Kimi-K2.5 target (SGLang's Eagle3DeepseekV2ForCausalLM, srt/models/kimi_k25_eagle3.py),
statically checked by the rules of its own architecture: no Llama q/k/v rule, no false error.

The checkpoint has the published shapes (Kimi-K2.5's text model: hidden 7168, 64 heads, q_lora_rank 1536,
kv_lora_rank 512, qk_nope/rope/v head dims 128/64/128, vocab 163840; a 32000-token draft vocabulary) in a SPARSE
safetensors file: the header and the small d2t/t2d tensors are written, the 1.3 GB of weights are a hole (a few KB on
disk), since draft_inspect reads headers and the vocabulary maps only."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from orchestrator.probes import parse_result
from orchestrator.probes.models import DraftInspectResult

pytestmark = pytest.mark.sglang_source
PUBLISHED = Path(__file__).resolve().parent / "published_targets"
H, HEADS, Q_RANK, KV_RANK, NOPE, ROPE, V_HEAD, INTER, VOCAB, DVOCAB = (7168, 64, 1536, 512, 128, 64, 128, 18432,
                                                                      163840, 32000)
CONFIG = {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2", "hidden_size": H,
          "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "q_lora_rank": Q_RANK, "kv_lora_rank": KV_RANK,
          "qk_nope_head_dim": NOPE, "qk_rope_head_dim": ROPE, "v_head_dim": V_HEAD, "intermediate_size": INTER,
          "hidden_act": "silu", "num_hidden_layers": 1, "vocab_size": VOCAB, "draft_vocab_size": DVOCAB,
          "max_position_embeddings": 262144, "rms_norm_eps": 1e-5, "rope_theta": 50000.0, "torch_dtype": "bfloat16",
          "tie_word_embeddings": False}


def mla_shapes(**override: list[int]) -> dict[str, list[int]]:
    attn = "layers.0.self_attn."
    shapes = {
        "fc.weight": [H, 3 * H], "norm.weight": [H], "lm_head.weight": [DVOCAB, H],
        "layers.0.input_layernorm.weight": [H], "layers.0.hidden_norm.weight": [H],
        "layers.0.post_attention_layernorm.weight": [H],
        attn + "q_a_proj.weight": [Q_RANK, 2 * H], attn + "q_a_layernorm.weight": [Q_RANK],
        attn + "q_b_proj.weight": [HEADS * (NOPE + ROPE), Q_RANK],
        attn + "kv_a_proj_with_mqa.weight": [KV_RANK + ROPE, 2 * H], attn + "kv_a_layernorm.weight": [KV_RANK],
        attn + "kv_b_proj.weight": [HEADS * (NOPE + V_HEAD), KV_RANK], attn + "o_proj.weight": [H, HEADS * V_HEAD],
        "layers.0.mlp.gate_proj.weight": [INTER, H], "layers.0.mlp.up_proj.weight": [INTER, H],
        "layers.0.mlp.down_proj.weight": [H, INTER],
    }
    shapes.update(override)
    return shapes


def write_sparse(directory: Path, shapes: dict[str, list[int]], config: dict[str, Any]) -> Path:
    """bf16 weights as a hole; d2t (int64 offsets: the first DVOCAB target ids) and t2d (bool) written for real."""
    directory.mkdir(parents=True)
    table: dict[str, Any] = {}
    offset = 0
    small: dict[str, bytes] = {"d2t": struct.pack(f"<{DVOCAB}q", *([0] * DVOCAB)),
                               "t2d": bytes([1] * DVOCAB + [0] * (VOCAB - DVOCAB))}
    entries = [(name, "BF16", shape) for name, shape in shapes.items()]
    entries += [("d2t", "I64", [DVOCAB]), ("t2d", "BOOL", [VOCAB])]
    for name, dtype, shape in entries:
        size = {"BF16": 2, "I64": 8, "BOOL": 1}[dtype]
        for dim in shape:
            size *= dim
        table[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    header = json.dumps(table).encode()
    path = directory / "model.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        base = f.tell()
        for name, data in small.items():
            f.seek(base + table[name]["data_offsets"][0])
            f.write(data)
        f.truncate(base + offset)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def inspect(run_probe: Any, draft: Path, target: Path, sglang: Path) -> DraftInspectResult:
    run = run_probe("draft_inspect", {"path": str(draft), "target_path": str(target),
                                      "engine_sys_path": [str(sglang)]})
    result = parse_result("draft_inspect", run.outcome)
    assert isinstance(result, DraftInspectResult)
    return result


@pytest.fixture
def kimi_target(tmp_path: Path) -> Path:
    target = tmp_path / "kimi-k2.5"
    target.mkdir()
    (target / "config.json").write_text((PUBLISHED / "kimi-k2.5.json").read_text())
    return target


@pytest.mark.parametrize("version", ["0.5.12.post1", "0.5.23"])
def test_a_published_mla_draft_gets_no_false_error(run_probe, sglang_trees, tmp_path: Path, kimi_target: Path,
                                                   version: str) -> None:
    draft = write_sparse(tmp_path / "draft", mla_shapes(), CONFIG)
    assert (draft / "model.safetensors").stat().st_blocks * 512 < 10 * 2 ** 20  # a hole, not 1.3 GB
    result = inspect(run_probe, draft, kimi_target, sglang_trees(version))
    errors = {f.id: f.message for f in result.findings if f.severity == "error"}
    # the shape and field rules raise nothing; the file's bytes are a hole, so the values scan (checks/tensor_values.py)
    # says every 2-D weight is all zeros, and that is all it says
    assert set(errors) == {"draft_fields"}, errors
    wrong = [f for f in result.finding("draft_fields").details["findings"] if f["severity"] == "error"]
    assert wrong and all(f["id"] == "tensor.values" and "is all zeros" in f["message"] for f in wrong), wrong
    attention = result.finding("agree_attention")
    assert attention.severity == "info" and "MLA" in attention.message, attention
    assert attention.details["attention"] == "mla"
    assert result.finding("architecture").severity == "info", result.finding("architecture")
    # the feeds prediction follows the target's own class: Kimi-K2.5's wrapper forwards to its DeepSeek model
    feeds = result.finding("aux_layer_ids").details
    assert feeds["default"] == [2, 30, 58] == result.feeds.sglang
    assert feeds["default_from"].startswith("sglang/srt/models/deepseek_v2.py:"), feeds


def test_a_wrong_mla_projection_is_an_error_by_the_mla_rule(run_probe, sglang_trees, tmp_path: Path,
                                                            kimi_target: Path) -> None:
    # kv_a_proj_with_mqa trained on the hidden state alone (input H, not the 2 x H concatenation SGLang builds)
    shapes = mla_shapes(**{"layers.0.self_attn.kv_a_proj_with_mqa.weight": [KV_RANK + ROPE, H]})
    draft = write_sparse(tmp_path / "draft", shapes, CONFIG)
    attention = inspect(run_probe, draft, kimi_target, sglang_trees("0.5.12.post1")).finding("agree_attention")
    assert attention.severity == "error" and "kv_a_proj_with_mqa [576, 7168]" in attention.message, attention
    assert "q_proj" not in attention.message  # never the Llama rule


def test_an_mla_draft_without_q_lora_rank_fails_as_sglang_does(run_probe, sglang_trees, tmp_path: Path,
                                                               kimi_target: Path) -> None:
    config = {k: v for k, v in CONFIG.items() if k != "q_lora_rank"}
    draft = write_sparse(tmp_path / "draft", mla_shapes(), config)
    attention = inspect(run_probe, draft, kimi_target, sglang_trees("0.5.12.post1")).finding("agree_attention")
    assert attention.severity == "error" and "requires q_lora_rank" in attention.message
