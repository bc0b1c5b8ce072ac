"""Shared fixtures for the draft-model tests: import path for the remote probes, tiny checkpoints."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

TINY = {
    "architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1, "rms_norm_eps": 1e-6,
    "vocab_size": 256, "draft_vocab_size": 64, "target_hidden_size": 48, "max_position_embeddings": 256,
    "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
}


def save_checkpoint(directory: Path, config: dict, state: dict) -> Path:
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in state.items()}, str(directory / "model.safetensors"))
    return directory


@pytest.fixture
def tiny_config() -> dict:
    return json.loads(json.dumps(TINY))
