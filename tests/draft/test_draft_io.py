"""The lab's draft writer: SpecForge layout by default, and each fault knob changes exactly what it says."""

from __future__ import annotations

import json
import sys

import pytest

from tests import realparts

torch = realparts.importorskip("torch")
realparts.importorskip("safetensors")

from remote_probes.eagle3.checkpoint import read_safetensors  # noqa: E402
from remote_probes.eagle3.draft import DraftConfig, DraftLoadError, Eagle3Draft  # noqa: E402
from remote_probes.eagle3.validate import load_draft  # noqa: E402
from remote_probes.engine.served_wiring import server_wiring  # noqa: E402
from tests.draft.conftest import REPO  # noqa: E402

sys.path.insert(0, str(REPO))
from orchestrator.lab.training.draft_io import DraftLayout, save_draft  # noqa: E402


@pytest.fixture
def draft(tiny_config):
    torch.manual_seed(0)
    cfg = dict(tiny_config, target_hidden_size=64)
    d = Eagle3Draft(DraftConfig.from_dict(cfg))
    hot = torch.arange(0, 256, 4)
    d.d2t.copy_(hot - torch.arange(64))
    return d


def _write(tmp_path, draft, wiring, layout=DraftLayout()):
    path = save_draft(draft, tmp_path / "out", wiring=wiring, layout=layout, recipe={"seed": 0})
    return path, json.loads((path / "config.json").read_text()), read_safetensors(str(path / "model.safetensors"))


def test_default_layout_is_specforge_and_round_trips(tmp_path, draft):
    path, cfg, state = _write(tmp_path, draft, [2, 6, 9])
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["draft_vocab_size"] == 64
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 5, 8]  # stored = HF index - 1
    assert server_wiring(cfg, 12) == [2, 6, 9]
    assert "embed_tokens.weight" not in state and "midlayer.self_attn.q_proj.weight" in state
    assert torch.equal(torch.nonzero(state["t2d"]).flatten(), state["d2t"] + torch.arange(64))
    loaded = load_draft(str(path), embed_tokens=draft.embed_tokens.weight, target_vocab_size=256)
    x = torch.randn(1, 5, 3 * 64)
    tok = torch.randint(0, 256, (1, 5))
    with torch.no_grad():
        torch.testing.assert_close(loaded(tok, x).logits, draft(tok, x).logits)
    assert json.loads((path / "lab_recipe.json").read_text())["trained_wiring"] == [2, 6, 9]


def test_embedding_first_wiring_writes_no_ids_like_the_seed(tmp_path, draft):
    _, cfg, _ = _write(tmp_path, draft, [0, 6, 11])
    assert "eagle_aux_hidden_state_layer_ids" not in cfg["eagle_config"]
    assert server_wiring(cfg, 12) == [2, 6, 9]  # SGLang falls back to its default
    with pytest.raises(ValueError, match="embedding output"):
        _write(tmp_path, draft, [0, 6, 11], DraftLayout(ids_location="nested"))


def test_fault_knobs(tmp_path, draft):
    _, cfg, state = _write(tmp_path, draft, [2, 6, 9], DraftLayout(ids_location="top-level"))
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 6, 9]
    assert "eagle_aux_hidden_state_layer_ids" not in cfg["eagle_config"]
    path, cfg, state = _write(tmp_path, draft, [2, 6, 9], DraftLayout(include_lm_head=False))
    assert "lm_head.weight" not in state and cfg["draft_vocab_size"] == 64
    with pytest.raises(DraftLoadError, match="lm_head"):
        load_draft(str(path), embed_tokens=draft.embed_tokens.weight)
    path, _, state = _write(tmp_path, draft, [2, 6, 9], DraftLayout(d2t_format="direct"))
    assert torch.equal(state["d2t"], torch.arange(0, 256, 4))
    with pytest.raises(DraftLoadError, match="direct target ids"):
        load_draft(str(path), embed_tokens=draft.embed_tokens.weight)
    _, cfg, _ = _write(tmp_path, draft, [2, 6, 9], DraftLayout(ids=(2, 6, 9), declare_draft_vocab=False))
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 6, 9] and "draft_vocab_size" not in cfg
