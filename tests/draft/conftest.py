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


def chain_matches_ttt(draft, aux, tokens, anchors, steps: int) -> list:  # noqa: ANN001 - torch objects
    """Chain decoding with the KV cache from each anchor t reproduces TTT step k at column t (what serving drafts is
    what the draft test scores); returns each anchor's cache, filled to anchor + steps."""
    import torch

    from remote_probes.eagle3.draft import DraftKVCache

    caches = []
    with torch.no_grad():
        ttt = draft.ttt_forward(aux, tokens, steps=steps)
        for anchor in anchors:
            cache = DraftKVCache()
            out = draft.forward(tokens[:1, :anchor + 1], aux[:1, :anchor + 1], cache)
            torch.testing.assert_close(out.hidden[0], ttt[0].hidden[0, :anchor + 1], rtol=1e-4, atol=1e-4)
            hidden = out.hidden[:, -1:]
            for k in range(1, steps):
                out = draft.forward(tokens[:1, anchor + k:anchor + k + 1], hidden, cache)
                hidden = out.hidden
                torch.testing.assert_close(out.logits[0, 0], ttt[k].logits[0, anchor], rtol=1e-4, atol=1e-4)
            assert cache.length == anchor + steps
            caches.append((anchor, cache))
    return caches


@pytest.fixture
def tiny_config() -> dict:
    return json.loads(json.dumps(TINY))
