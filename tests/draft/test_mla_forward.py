"""MLA EAGLE-3 drafts run in the offline draft test (remote_probes/eagle3/mla.py): SGLang's
``Eagle3DeepseekV2ForCausalLM`` layout (srt/models/kimi_k25_eagle3.py: ``layers.0.self_attn.q_a_proj`` and
``kv_a_proj_with_mqa`` read the 2H concatenation [input_layernorm(embeds), hidden_norm(h)]; the embedding is the
target's) at tiny sizes: it loads strictly, runs both paths, serves what ttt_forward scores, does transformers'
DeepSeek-V3 math, and is refused by tensor name when a shape is wrong."""

from __future__ import annotations

import pytest

from tests import realparts

torch = realparts.importorskip("torch")
realparts.importorskip("transformers")

from torch import nn  # noqa: E402
from transformers.models.deepseek_v3.configuration_deepseek_v3 import DeepseekV3Config  # noqa: E402
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (  # noqa: E402
    DeepseekV3Attention,
    DeepseekV3RotaryEmbedding,
)

from remote_probes.agent.protocol import ProbeFailure  # noqa: E402
from remote_probes.checks.runnable import check_architecture  # noqa: E402
from remote_probes.eagle3.draft import DraftConfig, DraftLoadError  # noqa: E402
from remote_probes.eagle3.validate import load_draft  # noqa: E402
from tests.draft.conftest import chain_matches_ttt, save_checkpoint  # noqa: E402
from tests.probes.test_mla_draft import CONFIG as KIMI_DRAFT  # noqa: E402  (the published Kimi-K2.5 draft's config)

pytestmark = pytest.mark.torch
H, HEADS, Q_RANK, KV_RANK, NOPE, ROPE, V_HEAD, INTER, VOCAB, DVOCAB = 64, 4, 32, 32, 16, 8, 16, 128, 256, 64
SEQ, STEPS = 10, 4
CONFIG = {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2", "hidden_size": H,
          "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "q_lora_rank": Q_RANK, "kv_lora_rank": KV_RANK,
          "qk_nope_head_dim": NOPE, "qk_rope_head_dim": ROPE, "v_head_dim": V_HEAD, "intermediate_size": INTER,
          "hidden_act": "silu", "num_hidden_layers": 1, "vocab_size": VOCAB, "draft_vocab_size": DVOCAB,
          "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 50000.0, "tie_word_embeddings": False}
YARN = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 32, "beta_slow": 1,
        "mscale": 1.0, "mscale_all_dim": 1.0}  # DeepSeek-V3's legacy spelling: its softmax scale grows by mscale^2


def mla_state(q_rank: int | None = Q_RANK, seed: int = 0, **override: list[int]) -> dict:
    """Random weights under SGLang's checkpoint names (the published draft's: layers.0.*, no embed_tokens)."""
    attn = "layers.0.self_attn."
    shapes = {"fc.weight": [H, 3 * H], "norm.weight": [H], "lm_head.weight": [DVOCAB, H],
              "layers.0.input_layernorm.weight": [H], "layers.0.hidden_norm.weight": [H],
              "layers.0.post_attention_layernorm.weight": [H],
              attn + "kv_a_proj_with_mqa.weight": [KV_RANK + ROPE, 2 * H], attn + "kv_a_layernorm.weight": [KV_RANK],
              attn + "kv_b_proj.weight": [HEADS * (NOPE + V_HEAD), KV_RANK], attn + "o_proj.weight": [H, HEADS * V_HEAD],
              "layers.0.mlp.gate_proj.weight": [INTER, H], "layers.0.mlp.up_proj.weight": [INTER, H],
              "layers.0.mlp.down_proj.weight": [H, INTER]}
    if q_rank is None:  # transformers' (and other engines') layout without a q LoRA
        shapes[attn + "q_proj.weight"] = [HEADS * (NOPE + ROPE), 2 * H]
    else:
        shapes.update({attn + "q_a_proj.weight": [q_rank, 2 * H], attn + "q_a_layernorm.weight": [q_rank],
                       attn + "q_b_proj.weight": [HEADS * (NOPE + ROPE), q_rank]})
    shapes.update(override)
    gen = torch.Generator().manual_seed(seed)
    state = {name: (1.0 + 0.2 * torch.randn(shape, generator=gen) if "norm" in name
                    else torch.randn(shape, generator=gen) * 0.2) for name, shape in shapes.items()}
    hot = torch.sort(torch.randperm(VOCAB, generator=gen)[:DVOCAB]).values
    state["d2t"] = hot - torch.arange(DVOCAB)  # offsets, as SGLang reads them
    return state


def save_mla(tmp_path, q_rank: int | None = Q_RANK, config_extra: dict | None = None, **override: list[int]):
    config = dict(CONFIG, **(config_extra or {}))
    if q_rank is None:
        config.pop("q_lora_rank")
    return save_checkpoint(tmp_path / "draft", config, mla_state(q_rank, **override))


def target_embedding() -> torch.Tensor:
    return torch.randn(VOCAB, H, generator=torch.Generator().manual_seed(7))


def load(path, **kw):
    return load_draft(str(path), embed_tokens=target_embedding(), target_vocab_size=VOCAB, target_hidden_size=H,
                      **kw)


def inputs(batch: int = 2):
    gen = torch.Generator().manual_seed(3)
    aux = torch.randn(batch, SEQ, 3 * H, generator=gen)
    tokens = torch.randint(0, VOCAB, (batch, SEQ + STEPS - 1), generator=gen)
    return aux, tokens


@pytest.mark.parametrize("q_rank", [Q_RANK, None], ids=["q_lora", "q_proj"])
def test_an_mla_draft_with_sglang_names_loads_strictly_and_runs(tmp_path, q_rank):
    path = save_mla(tmp_path, q_rank)
    draft = load(path)  # strict=True
    assert draft.cfg.attention == "mla" and draft.cfg.q_lora_rank == q_rank
    assert any("renamed" in n for n in draft.load_report["notes"]), draft.load_report  # layers.0.* -> midlayer.*
    assert not any("ignored" in n for n in draft.load_report["notes"]), draft.load_report
    # every tensor of the checkpoint landed in the model (nothing left randomly initialised)
    state, params = mla_state(q_rank), dict(draft.named_parameters())
    for name, tensor in state.items():
        if name != "d2t":
            torch.testing.assert_close(params[name.replace("layers.0.", "midlayer.")], tensor, rtol=0, atol=0)
    assert set(params) == {n.replace("layers.0.", "midlayer.") for n in state if n != "d2t"} | {"embed_tokens.weight"}
    aux, tokens = inputs()
    with torch.no_grad():
        out = draft.forward(tokens[:, :SEQ], aux)
        ttt = draft.ttt_forward(aux, tokens, STEPS)
    assert out.logits.shape == (2, SEQ, DVOCAB) and out.hidden.shape == (2, SEQ, H)
    assert len(ttt) == STEPS and all(o.logits.shape == (2, SEQ, DVOCAB) for o in ttt)
    torch.testing.assert_close(ttt[0].logits, out.logits, rtol=1e-5, atol=1e-5)  # step 0 is the plain forward
    assert all(bool(torch.isfinite(o.logits).all()) for o in ttt)
    assert int((ttt[1].token_ids - draft.d2t[ttt[1].logits.argmax(-1)]).max()) < VOCAB  # ids mapped to the target


def test_bfloat16_keeps_the_rope_frequencies_in_float32(tmp_path):
    draft = load(save_mla(tmp_path), dtype=torch.bfloat16)
    attn = draft.midlayer.self_attn
    assert attn.q_a_proj.weight.dtype == torch.bfloat16 and attn.rotary.inv_freq.dtype == torch.float32
    aux, tokens = inputs(1)
    with torch.no_grad():
        outs = draft.ttt_forward(aux.bfloat16(), tokens, 2)
    assert outs[1].logits.dtype == torch.bfloat16 and bool(torch.isfinite(outs[1].logits.float()).all())


@pytest.mark.parametrize("q_rank", [Q_RANK, None], ids=["q_lora", "q_proj"])
def test_incremental_cache_matches_ttt_chain(tmp_path, q_rank):
    """Chain decoding with the KV cache (the compressed latents) from anchor t reproduces TTT step k at column t:
    what serving drafts is what the draft test scores (as tests/draft/test_parity.py checks for Llama drafts)."""
    draft = load(save_mla(tmp_path, q_rank, config_extra={"rope_scaling": YARN}))
    aux, tokens = inputs()
    for anchor, cache in chain_matches_ttt(draft, aux, tokens, (0, 4, SEQ - 1), STEPS):
        assert cache.k is not None
        assert cache.k.shape[1:] == (1, anchor + STEPS, KV_RANK)  # latents cached, not per-head keys
        cache.crop(anchor + 1)
        assert cache.length == anchor + 1
    with torch.no_grad():  # a chain re-fed after crop (speculative entries dropped) gives step 1 again
        ttt = draft.ttt_forward(aux, tokens, steps=STEPS)
        out = draft.forward(tokens[:1, anchor + 1:anchor + 2], ttt[0].hidden[:1, anchor:anchor + 1], cache)
    torch.testing.assert_close(out.logits[0, 0], ttt[1].logits[0, anchor], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rope", [None, YARN], ids=["default_rope", "yarn"])
def test_the_attention_is_transformers_deepseek_v3_on_the_2h_input(tmp_path, rope):
    """The draft's MLA attention equals transformers' DeepseekV3Attention, built here by hand from its own config
    with the two down-projections widened to 2H, run with its eager kernel and additive causal mask."""
    draft = load(save_mla(tmp_path, config_extra={"rope_scaling": rope} if rope else None))
    mine = draft.midlayer.self_attn
    rope_parameters = {"rope_type": "default", "rope_theta": 50000.0}
    if rope:
        rope_parameters = dict({k: v for k, v in rope.items() if k != "type"}, rope_type="yarn", rope_theta=50000.0)
    config = DeepseekV3Config(hidden_size=H, num_attention_heads=HEADS, num_key_value_heads=HEADS,
                              q_lora_rank=Q_RANK, kv_lora_rank=KV_RANK, qk_nope_head_dim=NOPE,
                              qk_rope_head_dim=ROPE, v_head_dim=V_HEAD, rope_parameters=rope_parameters,
                              max_position_embeddings=256, rms_norm_eps=1e-5)
    config._attn_implementation = "eager"
    ref = DeepseekV3Attention(config, layer_idx=0)
    ref.q_a_proj = nn.Linear(2 * H, Q_RANK, bias=False)
    ref.kv_a_proj_with_mqa = nn.Linear(2 * H, KV_RANK + ROPE, bias=False)
    ref.load_state_dict(mine.state_dict(), strict=True)
    for norm in (ref.q_a_layernorm, ref.kv_a_layernorm):
        norm.variance_epsilon = 1e-5  # SGLang's latent norms use the config's eps (transformers' default: 1e-6)
    x = torch.randn(2, SEQ, 2 * H, generator=torch.Generator().manual_seed(5))
    pos = torch.arange(SEQ)
    additive = torch.full((SEQ, SEQ), float("-inf")).triu(1)[None, None]
    with torch.no_grad():
        theirs, _ = ref(x, DeepseekV3RotaryEmbedding(config)(x, pos[None]), additive)
        ours = mine.columns(x, pos, pos[None, :] <= pos[:, None], None, draft._rope(x.device))
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    if rope:  # yarn's mscale reached the softmax scale (what SGLang's compute_mla_mscale_scaling does)
        assert mine.scaling > (NOPE + ROPE) ** -0.5


@pytest.mark.parametrize(("override", "tensor"), [
    ({"layers.0.self_attn.kv_a_proj_with_mqa.weight": [KV_RANK + ROPE, H]}, "kv_a_proj_with_mqa"),  # H, not 2H
    ({"layers.0.self_attn.kv_b_proj.weight": [HEADS * (NOPE + ROPE), KV_RANK]}, "kv_b_proj"),  # rope for v
], ids=["kv_a_proj_with_mqa", "kv_b_proj"])
def test_a_wrong_mla_shape_is_refused_naming_the_tensor(tmp_path, override, tensor):
    with pytest.raises(DraftLoadError) as err:
        load(save_mla(tmp_path, **override))
    assert err.value.field == f"midlayer.self_attn.{tensor}.weight"
    assert tensor in err.value.message and str(list(override.values())[0]) in err.value.message


def test_a_missing_mla_tensor_is_refused_naming_it(tmp_path):
    config, state = dict(CONFIG), mla_state()
    del state["layers.0.self_attn.q_b_proj.weight"]
    with pytest.raises(DraftLoadError) as err:
        load(save_checkpoint(tmp_path / "draft", config, state))
    assert err.value.field == "midlayer.self_attn.q_b_proj.weight"


def test_expert_keys_are_served_dense_and_expert_tensors_refused(tmp_path):
    """SGLang's Eagle3MLADecoderLayer builds a DeepseekV2MLP whatever the config's expert keys (a config copied from
    the MoE target): the draft runs as served; expert weights in the checkpoint are said, unplaced (not loaded)."""
    moe_keys = {"n_routed_experts": 8, "moe_intermediate_size": 32, "num_experts_per_tok": 2}
    check_architecture(dict(CONFIG, **moe_keys))
    draft = load(save_mla(tmp_path / "keys", config_extra=moe_keys))
    assert draft.cfg.attention == "mla"
    config, state = dict(CONFIG, **moe_keys), mla_state()
    state["layers.0.mlp.experts.0.gate_proj.weight"] = torch.zeros(32, H)
    draft = load(save_checkpoint(tmp_path / "experts", config, state))
    assert any("experts.0.gate_proj" in note for note in draft.load_report["notes"]), draft.load_report["notes"]


def test_check_architecture_runs_dense_mla_drafts():
    check_architecture(CONFIG)  # the tiny draft above
    check_architecture(KIMI_DRAFT)  # the published Kimi-K2.5 draft's config
    assert DraftConfig.from_dict(KIMI_DRAFT).attention == "mla"
    incomplete = {k: v for k, v in CONFIG.items() if k != "v_head_dim"}
    with pytest.raises(ProbeFailure) as err:  # before the target loads, not after
        check_architecture(incomplete)
    assert err.value.kind == "draft_load" and err.value.details["field"] == "v_head_dim"
    with pytest.raises(DraftLoadError) as load_err:  # the loader says the same
        DraftConfig.from_dict(incomplete)
    assert load_err.value.field == "v_head_dim"


def test_the_draft_test_runs_an_mla_draft_on_a_real_target(tmp_path):
    """The probe end to end on the shipped lab target (hidden 128) with an MLA draft of its width: every candidate
    wiring is scored and the counterfactual served parts run (a random draft: it predicts nothing, tau 1)."""
    import json
    from pathlib import Path

    from remote_probes.evaluation.draft_test import main

    target = Path(__file__).resolve().parents[2] / "orchestrator" / "data" / "lab" / "target"
    vocab, h = json.loads((target / "config.json").read_text())["vocab_size"], 128
    attn, gen = "layers.0.self_attn.", torch.Generator().manual_seed(0)
    shapes = {"fc.weight": [h, 3 * h], "norm.weight": [h], "lm_head.weight": [vocab // 2, h],
              "layers.0.input_layernorm.weight": [h], "layers.0.hidden_norm.weight": [h],
              "layers.0.post_attention_layernorm.weight": [h], attn + "q_a_proj.weight": [Q_RANK, 2 * h],
              attn + "q_a_layernorm.weight": [Q_RANK], attn + "q_b_proj.weight": [HEADS * (NOPE + ROPE), Q_RANK],
              attn + "kv_a_proj_with_mqa.weight": [KV_RANK + ROPE, 2 * h], attn + "kv_a_layernorm.weight": [KV_RANK],
              attn + "kv_b_proj.weight": [HEADS * (NOPE + V_HEAD), KV_RANK], attn + "o_proj.weight": [h, HEADS * V_HEAD],
              "layers.0.mlp.gate_proj.weight": [INTER, h], "layers.0.mlp.up_proj.weight": [INTER, h],
              "layers.0.mlp.down_proj.weight": [h, INTER]}
    state = {k: torch.ones(s) if k.endswith("norm.weight") else torch.randn(s, generator=gen) * 0.05
             for k, s in shapes.items()}
    state["d2t"] = torch.sort(torch.randperm(vocab, generator=gen)[:vocab // 2]).values - torch.arange(vocab // 2)
    config = dict(CONFIG, hidden_size=h, vocab_size=vocab, draft_vocab_size=vocab // 2, target_hidden_size=h)
    draft = save_checkpoint(tmp_path / "draft", config, state)
    args = {"target": str(target), "draft": str(draft), "engine": "sglang", "num_prompts": 3, "max_new_tokens": 12}
    result = main(dict(args))
    assert len(result["wirings"]) >= 5 and result["decision"] == "no_signal", result["verdict"]
    swaps = main(dict(args, counterfactual=True))["counterfactual"]["swaps"]
    assert {s["part"] for s in swaps} >= {"head", "norm", "d2t"} and all(s.get("error") is None for s in swaps), swaps
