"""The MLA attention of an EAGLE-3 draft layer (DeepSeek-V3 / Kimi-K2.5 drafts), built from transformers' own module.

SGLang's ``Eagle3DeepseekV2ForCausalLM`` (srt/models/kimi_k25_eagle3.py, ``Eagle3MLADecoderLayer``) is one EAGLE-3
decoder layer whose attention is DeepSeek's multi-latent attention (MLA) over the concatenation
[input_layernorm(embeds), hidden_norm(h)], 2 x hidden_size wide. Only the down-projections read that input, so
only they are widened to 2H: ``q_a_proj`` [q_lora_rank, 2H] and ``kv_a_proj_with_mqa`` [kv_lora_rank + rope, 2H]
(SGLang fuses them into ``fused_qkv_a_proj_with_mqa`` at load time, from these checkpoint names). Without a
q_lora_rank (SGLang refuses such a draft; transformers' DeepSeek-V3 and other engines build it) ``q_proj``
[heads * (nope + rope), 2H] is the widened one. ``q_a_layernorm``, ``q_b_proj``, ``kv_a_layernorm``, ``kv_b_proj``
and ``o_proj`` (back to H) keep DeepSeek's shapes.

The math is transformers' ``DeepseekV3Attention.forward``: ``MLAAttention`` IS one, built from a
``DeepseekV3Config`` of the draft's dimensions, with the widened projections swapped in, and three things supplied
around that forward:

- RoPE: transformers' ``DeepseekV3RotaryEmbedding`` (default, linear, llama3 and DeepSeek's yarn with its softmax
  mscale; interleaved pairs by default, as SGLang's ``is_neox_style = not rope_interleave``);
- the KV cache: the draft's ``DraftKVCache``, whose ``update`` caches the compressed latents, as transformers'
  ``Cache`` does for this attention;
- the attention kernel, registered with transformers' ``AttentionInterface`` as ``eagle3_draft_mla``: its SDPA
  function with the draft's boolean mask, or, for ``ttt_forward``'s chained steps, the draft's
  ``ChainKeys.attend`` (the chain pattern the Llama attention runs too) fed transformers' keys, values and scale.

Public API: ``MLAAttention(cfg: DraftConfig)`` with ``columns(...)`` and ``ttt_step(...)`` (what ``Eagle3Draft``
calls, as on its Llama attention), ``deepseek_config(cfg) -> DeepseekV3Config``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Tuple

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.models.deepseek_v3.configuration_deepseek_v3 import DeepseekV3Config
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    DeepseekV3Attention,
    DeepseekV3RotaryEmbedding,
)

from remote_probes.eagle3.checkpoint import DraftLoadError

if TYPE_CHECKING:  # types only: draft.py imports this module (for MLA drafts), never the other way round
    from remote_probes.eagle3.draft import ChainKeys, DraftConfig, DraftKVCache

#: the name the attention kernel below is registered under (the config's ``_attn_implementation``)
ATTENTION = "eagle3_draft_mla"


def _attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: Optional[torch.Tensor], scaling: Optional[float] = None, dropout: float = 0.0,
               chain: Optional[ChainKeys] = None, **kwargs: Any) -> Tuple[torch.Tensor, None]:
    """transformers' attention-function contract: query/key [B, heads, T, nope + rope], value [B, heads, T, v]
    (keys already expanded from the latents by ``kv_b_proj``); returns [B, T, heads, v]."""
    if chain is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    assert attention_mask is not None and scaling is not None  # ttt_step passes the mask; the module its scale
    return chain.attend(query, key, value, attention_mask, scaling).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, _attention)


def deepseek_config(cfg: DraftConfig) -> DeepseekV3Config:
    """The transformers config of the draft layer's attention (its hidden_size is the draft's H: o_proj's output)."""
    scaling = cfg.rope_scaling or {}
    rope = {k: v for k, v in scaling.items() if k != "type"}  # the legacy spelling of rope_type
    rope.update(rope_type=scaling.get("rope_type", "default"), rope_theta=cfg.rope_theta)
    try:
        config = DeepseekV3Config(
            hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size, vocab_size=cfg.vocab_size,
            num_hidden_layers=1, num_attention_heads=cfg.num_heads,
            num_key_value_heads=cfg.num_heads,  # kv_b_proj gives every head its own key/value: no grouping
            q_lora_rank=cfg.q_lora_rank, kv_lora_rank=cfg.kv_lora_rank, qk_nope_head_dim=cfg.qk_nope_head_dim,
            qk_rope_head_dim=cfg.qk_rope_head_dim, v_head_dim=cfg.v_head_dim, rope_parameters=rope,
            rope_interleave=cfg.rope_interleave, max_position_embeddings=cfg.max_position_embeddings,
            rms_norm_eps=cfg.rms_norm_eps, attention_bias=False)
    except (KeyError, TypeError, ValueError) as exc:  # transformers validates the RoPE parameters
        raise DraftLoadError("the MLA draft's RoPE parameters %s are not valid for transformers' DeepSeek-V3: %s"
                             % (rope, exc), field="rope_scaling") from None
    config._attn_implementation = ATTENTION
    return config


class MLAAttention(DeepseekV3Attention):
    """transformers' DeepSeek-V3 attention reading the EAGLE-3 layer's 2H-wide input (see the module docstring)."""

    rotary: DeepseekV3RotaryEmbedding

    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__(deepseek_config(cfg), layer_idx=0)
        wide = 2 * cfg.hidden_size
        if self.q_lora_rank is None:
            self.q_proj = nn.Linear(wide, self.num_heads * self.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(wide, self.q_lora_rank, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(wide, self.kv_lora_rank + self.qk_rope_head_dim, bias=False)
        # SGLang builds the latent norms with the config's rms_norm_eps; transformers leaves them at 1e-6
        for norm in (self.q_a_layernorm, self.kv_a_layernorm):
            if norm is not None:
                norm.variance_epsilon = cfg.rms_norm_eps
        # not a submodule: the draft's .to(bfloat16) must not round the RoPE frequencies (the rotary computes in
        # float32 and moves them to the input's device itself)
        object.__setattr__(self, "rotary", DeepseekV3RotaryEmbedding(self.config))

    def columns(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: Optional[DraftKVCache],
                inv_freq: torch.Tensor) -> torch.Tensor:
        """Attention output of columns at ``positions`` after the cached ones (``mask``: [T, cached + T]);
        ``inv_freq`` (the Llama RoPE's) is unused: the RoPE is transformers'."""
        # the cache goes in positionally: transformers 5 names that parameter ``cache``, 4.x ``past_key_value(s)``
        out, _ = self.forward(x, self.rotary(x, positions[None]), mask[None, None], cache)
        return out

    def ttt_step(self, x: torch.Tensor, positions: torch.Tensor, causal: torch.Tensor, chain: ChainKeys,
                 inv_freq: torch.Tensor) -> torch.Tensor:
        """One ``ttt_forward`` step over all columns: no cache, the kernel attends through ``chain``."""
        out, _ = self.forward(x, self.rotary(x, positions[None]), causal[None, None], None, chain=chain)
        return out
