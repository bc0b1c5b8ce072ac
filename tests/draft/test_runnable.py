"""The draft test says what it cannot run, and why, before loading anything (remote_probes/checks/runnable.py):
expert keys do not change the (dense) draft layer, an MLA draft without its MLA dimensions is refused by the missing key (a complete dense MLA
draft runs: tests/draft/test_mla_forward.py), and checkpoints that do not fit the free memory are refused with both
figures. The big checkpoints here are safetensors HEADERS with the shapes of published models and no data (a few
KB on disk): the check reads headers only."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from remote_probes.agent.protocol import ProbeFailure
from remote_probes.checks.runnable import check_architecture, check_fits, checkpoint_params
from tests.draft.test_bad_input import _probe

# DeepSeek-V3 / Kimi-K2.5 text-model sizes (hidden 7168, vocab 129280 / 163840, 61 layers, MLA ranks 512/1536)
MLA_DRAFT = {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2", "hidden_size": 7168,
             "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
             "v_head_dim": 128, "num_attention_heads": 64, "intermediate_size": 18432, "num_hidden_layers": 1,
             "vocab_size": 163840, "draft_vocab_size": 32000}
#: the same without its nope/v head dims: the MLA layer's shapes are unknown
MLA_INCOMPLETE = {k: v for k, v in MLA_DRAFT.items() if k not in ("qk_nope_head_dim", "v_head_dim")}
MOE_DRAFT = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 2048, "num_experts": 128,
             "num_hidden_layers": 1}
LLAMA_DRAFT = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4096, "num_attention_heads": 32,
               "num_key_value_heads": 8, "intermediate_size": 14336, "num_hidden_layers": 1, "vocab_size": 128256,
               "draft_vocab_size": 32000}


def header_only(directory: Path, tensors: dict[str, tuple[str, list[int]]], config: dict | None = None) -> Path:
    """A checkpoint directory whose model.safetensors is only its header (the data is never read)."""
    directory.mkdir(parents=True, exist_ok=True)
    table, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        size = 2 if dtype in ("BF16", "F16") else 4
        for dim in shape:
            size *= dim
        table[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(table).encode()
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    if config is not None:
        (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_a_complete_mla_draft_passes_and_an_incomplete_one_is_refused_by_the_missing_key() -> None:
    check_architecture(MLA_DRAFT)  # no error: the draft test runs MLA drafts with a dense MLP
    with pytest.raises(ProbeFailure) as err:
        check_architecture(MLA_INCOMPLETE)
    assert err.value.kind == "draft_load" and err.value.details["field"] == "qk_nope_head_dim"
    assert "Eagle3DeepseekV2ForCausalLM" in err.value.message and "MLA attention" in err.value.message
    assert "kv_lora_rank=512" in err.value.message and "qk_nope_head_dim, v_head_dim" in err.value.message
    assert err.value.details["mla"]["q_lora_rank"] == 1536
    with pytest.raises(ProbeFailure) as err:  # a DeepSeek-style class with no MLA keys at all
        check_architecture({"architectures": ["Eagle3DeepseekV2ForCausalLM"], "hidden_size": 7168})
    assert err.value.kind == "draft_load" and err.value.details["field"] == "kv_lora_rank"


def test_expert_keys_do_not_change_the_draft_layer() -> None:
    # the engines' EAGLE-3 layers build a dense MLP whatever the config's expert keys (a config copied from an MoE
    # target): so does the test (expert tensors are left unplaced and said: test_mla_forward.py)
    check_architecture(MOE_DRAFT)
    check_architecture(dict(MLA_DRAFT, n_routed_experts=256))
    check_architecture(LLAMA_DRAFT)  # no error


def test_parameters_are_counted_from_headers(tmp_path: Path) -> None:
    ckpt = header_only(tmp_path / "d", {"a": ("BF16", [1000, 10]), "b": ("F32", [7])})
    info = checkpoint_params(str(ckpt))
    assert (info["params"], info["stored_bytes"]) == (10007, 20028)
    assert (tmp_path / "d" / "model.safetensors").stat().st_size < 1000  # headers only


def test_a_checkpoint_bigger_than_free_memory_is_refused_with_both_figures(tmp_path: Path) -> None:
    # a 30 GB draft (15e9 bf16 parameters, as one header) beside a small target, on a host with 24 GiB free
    draft = header_only(tmp_path / "draft", {"w": ("BF16", [15_000, 1_000_000])})
    target = header_only(tmp_path / "target", {"w": ("BF16", [1000, 1000])})
    with pytest.raises(ProbeFailure) as err:
        check_fits(str(target), str(draft), bytes_per_param=4, available=24 * 2 ** 30, where="this host's memory")
    assert err.value.kind == "too_large"
    assert "24.0 GiB is free" in err.value.message and "2 x draft 55.9 GiB" in err.value.message
    fits = check_fits(str(target), str(target), bytes_per_param=4, available=24 * 2 ** 30, where="here")
    assert fits["needed_bytes"] == 3 * 4 * 10 ** 6


def test_the_probe_refuses_before_loading(tmp_path: Path) -> None:
    """Through the probe: the MLA draft without its dimensions and the 30 GB draft fail with their
    own kind, before the target loads (the target directory here holds no model at all, so loading it would fail
    with target_load instead)."""
    target = header_only(tmp_path / "target", {"w": ("BF16", [1000, 1000])})
    mla = header_only(tmp_path / "mla", {"w": ("BF16", [10, 10])}, MLA_INCOMPLETE)
    code, doc, stderr = _probe(tmp_path, {"target": str(target), "draft": str(mla)})
    assert code == 3 and doc["error"]["kind"] == "draft_load", doc
    assert doc["error"]["details"]["field"] == "qk_nope_head_dim", doc
    huge = header_only(tmp_path / "huge", {"w": ("BF16", [60_000, 1_000_000])}, LLAMA_DRAFT)
    code, doc, stderr = _probe(tmp_path, {"target": str(target), "draft": str(huge), "device": "cpu"})
    assert code == 3 and doc["error"]["kind"] == "too_large", doc
    assert "Traceback" not in stderr
