"""Numerical parity of remote_probes/eagle3_draft against SpecForge's reference EAGLE-3 draft (test-only dep).

Same random weights in both; SpecForge's multi-step loop needs triton, so the test drives its steps through
``backbone`` with a shared ``cache_hidden`` exactly as its training loop does.
"""

from __future__ import annotations

import pytest

from tests import realparts

torch = realparts.importorskip("torch")
realparts.importorskip("transformers")
llama3_eagle = realparts.importorskip(
    "specforge.modeling.draft.llama3_eagle",
    reason="reference implementation missing: pip install --no-deps specforge==0.2.0",
)

from remote_probes.eagle3.validate import load_draft  # noqa: E402
from tests.draft.conftest import chain_matches_ttt, save_checkpoint  # noqa: E402

STEPS = 4
SEQ = 12


def _reference(tiny_config):
    from transformers import LlamaConfig

    torch.manual_seed(0)
    cfg = LlamaConfig(**{k: v for k, v in tiny_config.items() if k != "architectures"})
    ref = llama3_eagle.LlamaForCausalLMEagle3(cfg, attention_backend="sdpa").eval()
    with torch.no_grad():
        for p in ref.parameters():  # post_init leaves norms at 1: randomise everything
            p.copy_(torch.randn_like(p) * 0.2)
        vd, v = tiny_config["draft_vocab_size"], tiny_config["vocab_size"]
        hot = torch.sort(torch.randperm(v)[:vd]).values
        ref.d2t.copy_(hot - torch.arange(vd))
        ref.t2d.zero_()
        ref.t2d[hot] = True
    return ref


def _reference_steps(ref, aux, tokens):
    """SpecForge's TTT loop: step k reads tokens shifted by k and the previous pre-norm hidden."""
    b, t, _ = aux.shape
    mask = llama3_eagle.prepare_decoder_attention_mask(torch.ones(b, t, dtype=torch.bool), (b, t), aux, 0)
    pos = torch.arange(t).unsqueeze(0)
    cache = [[], []]
    hidden = ref.project_hidden_states(aux)
    outs = []
    for k in range(STEPS):
        emb = ref.embed_tokens(tokens[:, k:k + t])
        hidden = ref.backbone(emb, hidden, cache, mask, pos, use_cache=False)
        outs.append((hidden, ref.lm_head(ref.norm(hidden))))
    return outs


@pytest.fixture
def pair(tmp_path, tiny_config):
    ref = _reference(tiny_config)
    path = save_checkpoint(tmp_path / "draft", tiny_config, dict(ref.state_dict()))
    mine = load_draft(str(path), target_vocab_size=256, target_hidden_size=48)
    torch.manual_seed(1)
    aux = torch.randn(2, SEQ, 3 * 48)
    tokens = torch.randint(0, 256, (2, SEQ + STEPS - 1))
    return ref, mine, aux, tokens


def test_single_step_matches_specforge_forward(pair):
    ref, mine, aux, tokens = pair
    with torch.no_grad():
        ref_norm = ref(hidden_states=aux, inputs_embeds=ref.embed_tokens(tokens[:, :SEQ]), ttt_length=1)
        out = mine.ttt_forward(aux, tokens, steps=1)[0]
    torch.testing.assert_close(mine.norm(out.hidden), ref_norm, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out.logits, ref.lm_head(ref_norm), rtol=1e-4, atol=1e-4)
    # d2t offsets: target id = draft id + d2t[draft id]
    draft_ids = ref.lm_head(ref_norm).argmax(-1)
    assert torch.equal(out.token_ids, draft_ids + ref.d2t[draft_ids])


def test_feedback_steps_match_specforge_ttt(pair):
    ref, mine, aux, tokens = pair
    with torch.no_grad():
        expected = _reference_steps(ref, aux, tokens)
        got = mine.ttt_forward(aux, tokens, steps=STEPS)
    assert len(got) == STEPS >= 3
    for k, ((ref_h, ref_logits), out) in enumerate(zip(expected, got, strict=True)):
        torch.testing.assert_close(out.hidden, ref_h, rtol=1e-4, atol=1e-4, msg=lambda m, k=k: f"step {k}: {m}")
        torch.testing.assert_close(out.logits, ref_logits, rtol=1e-4, atol=1e-4,
                                   msg=lambda m, k=k: f"step {k}: {m}")


def test_incremental_cache_matches_ttt_chain(pair):
    """Chain decoding with the KV cache from anchor t reproduces TTT step k at column t (serving == offline)."""
    _, mine, aux, tokens = pair
    for anchor, cache in chain_matches_ttt(mine, aux, tokens, (0, 5, SEQ - 1), STEPS):
        cache.crop(anchor + 1)
        assert cache.length == anchor + 1
