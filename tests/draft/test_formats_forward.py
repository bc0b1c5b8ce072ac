"""The draft test's model (remote_probes/eagle3_draft) against the libraries that wrote the checkpoint, for every
format and variant: SpecForge (midlayer.*, fc_norm) and vLLM speculators (transformer_layer_config, layers.0.*,
norm_before_residual, norm_before_fc, fc_norm). Same saved weights in both; the draft test must score the network
that was trained, and dropping a flag (what an engine that ignores it serves) must change the drafts."""

from __future__ import annotations

import json

import pytest

from tests import realparts
from tests.draft.libraries import H, V, save_specforge_draft, save_speculators_draft

torch = realparts.importorskip("torch")
realparts.importorskip("transformers")

from remote_probes.eagle3.draft import DraftConfig  # noqa: E402
from remote_probes.eagle3.validate import load_draft  # noqa: E402

pytestmark = pytest.mark.torch
T, STEPS = 12, 3


def _inputs(seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    aux = torch.randn(1, T, 3 * H, generator=gen) * 2.0
    tokens = torch.randint(0, V, (1, T), generator=gen)
    return aux, tokens


def _mine(path, aux, tokens, **kw):
    draft = load_draft(str(path), target_vocab_size=V, target_hidden_size=H, **kw)
    nxt = torch.cat([tokens, torch.zeros(1, STEPS - 1, dtype=tokens.dtype)], dim=1)  # speculators pads with 0
    with torch.no_grad():
        return draft, draft.ttt_forward(aux, nxt, STEPS)


@pytest.mark.parametrize("flags", [{}, {"norm_before_residual": True}, {"norm_before_fc": True},
                                   {"fc_norm": True}, {"norm_output": True},
                                   {"norm_before_residual": True, "fc_norm": True}],
                         ids=lambda f: "+".join(f) or "plain")
def test_speculators_drafts_match_the_library(tmp_path, flags):
    ref = save_speculators_draft(tmp_path / "d", **flags)
    cfg = json.loads((tmp_path / "d" / "config.json").read_text())
    assert "hidden_size" not in cfg and cfg["architectures"] == ["Eagle3DraftModel"]
    assert DraftConfig.from_dict(cfg).flags == flags
    aux, tokens = _inputs()
    with torch.no_grad():
        theirs = ref(hidden_states=aux, input_ids=tokens, document_ids=torch.zeros_like(tokens), ttt_steps=STEPS)
    draft, outs = _mine(tmp_path / "d", aux, tokens)
    assert sorted(draft.load_report["variant_flags"]) == sorted(flags)
    for k in range(STEPS):
        assert torch.equal(outs[k].logits.argmax(-1), theirs[k]), f"step {k}"
    if flags:  # what an engine that ignores the flags would serve: other drafts
        cfg_plain = {k: v for k, v in cfg.items() if k not in flags}
        (tmp_path / "d" / "config.json").write_text(json.dumps(cfg_plain))
        _, plain = _mine(tmp_path / "d", aux, tokens, strict=False)
        differ = sum(int((plain[k].logits.argmax(-1) != theirs[k]).sum()) for k in range(STEPS))
        assert differ > 0


def _specforge_steps(ref, aux, tokens):
    from specforge.modeling.draft import llama3_eagle

    mask = llama3_eagle.prepare_decoder_attention_mask(torch.ones(1, T, dtype=torch.bool), (1, T), aux, 0)
    pos = torch.arange(T).unsqueeze(0)
    nxt = torch.cat([tokens, torch.zeros(1, STEPS - 1, dtype=tokens.dtype)], dim=1)
    cache = [[], []]
    hidden = ref.project_hidden_states(aux)
    outs = []
    for k in range(STEPS):
        hidden = ref.backbone(ref.embed_tokens(nxt[:, k:k + T]), hidden, cache, mask, pos, use_cache=False)
        outs.append(ref.lm_head(ref.norm(hidden)))
    return outs


@pytest.mark.parametrize("flags", [{}, {"fc_norm": True}], ids=["plain", "fc_norm"])
def test_specforge_drafts_match_the_library(tmp_path, flags):
    ref = save_specforge_draft(tmp_path / "d", aux_ids=[1, 5, 8], **flags).eval()
    aux, tokens = _inputs(2)
    with torch.no_grad():
        theirs = _specforge_steps(ref, aux, tokens)
    _, outs = _mine(tmp_path / "d", aux, tokens)
    for k in range(STEPS):
        torch.testing.assert_close(outs[k].logits, theirs[k], rtol=1e-4, atol=1e-4)


def test_rope_parameters_drive_the_draft(tmp_path):
    """transformers 5 writes rope_parameters only; its theta (and scaling) must reach the draft's RoPE."""
    save_specforge_draft(tmp_path / "d", rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    cfg = json.loads((tmp_path / "d" / "config.json").read_text())
    assert "rope_theta" not in cfg and cfg["rope_parameters"]["rope_theta"] == 500000.0
    assert DraftConfig.from_dict(cfg).rope_theta == 500000.0
    nested = {"transformer_layer_config": dict(cfg), "architectures": ["Eagle3DraftModel"]}
    assert DraftConfig.from_dict(nested).rope_theta == 500000.0
