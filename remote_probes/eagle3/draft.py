"""An EAGLE-3 draft model in plain PyTorch (torch only), per research/eagle3-draft-spec.md.

Public API (stable; the lab server and the lab's training code use it):

- ``DraftConfig.from_dict(config_json: dict) -> DraftConfig``        validated draft config, any format: flat
  (SpecForge / EAGLE), speculators (``transformer_layer_config`` nested), RoPE from ``rope_parameters``
  (transformers 5) or the legacy keys; ``.flags`` holds the variant flags, all implemented in the forward:
  ``norm_before_fc`` (``input_norm`` over the concatenated aux states), ``fc_norm`` (``fc_norm.N`` per aux state),
  ``norm_before_residual`` (the residual is ``hidden_norm(h)``), ``norm_output`` (the normed hidden is fed back)
- ``Eagle3Draft(cfg, num_aux=3)``                                      the module (randomly initialised)
- ``DraftConfig.attention``: ``"llama"`` (q/k/v/o grouped-query attention) or ``"mla"`` (DeepSeek-V3 multi-latent
  attention, SGLang's ``Eagle3DeepseekV2ForCausalLM``: built from transformers' own module in eagle3/mla.py, which
  is imported only for such a draft, so a Llama draft needs torch alone)
- ``eagle3_validate.load_draft(path, *, embed_tokens=None, lm_head=None, target_vocab_size=None,
  target_hidden_size=None, device="cpu", dtype=torch.float32, strict=True) -> Eagle3Draft``   from a checkpoint
  directory (the loader lives with the checks it runs: this module builds the model, that one validates and loads)
- ``draft.forward(tokens, hidden, cache=None) -> DraftOutput``          one incremental call (KV cache optional)
- ``draft.ttt_forward(aux, next_tokens, steps) -> list[DraftOutput]``  all columns, ``steps`` chained steps
  (SpecForge's test-time-training layout: what training optimises and what the draft test measures)
- ``draft.to_target_ids(draft_ids) -> target ids`` (``d2t`` offsets); ``DraftOutput.token_ids`` already mapped
- ``DraftKVCache``: ``.length``, ``.crop(n)`` (keep the first n positions)
- ``DraftLoadError`` (a ``ProbeFailure``, kind ``draft_load``, ``.field`` names the tensor / config key at fault)
- ``draft.load_report``: dict with ``notes`` (renames, ignored tensors, lm_head/embedding taken from the target)

Alignment ("column t"): the draft's input at column t is the target's aux hidden states at position t together
with the token x_{t+1} that the target produced there; its output predicts x_{t+2}. Column t sits at RoPE
position t (= its slot in the KV cache). A chained step feeds the previous PRE-norm hidden back (width H, so fc
is skipped — exactly SGLang's rule "fc only when the width differs from hidden_size").

Incremental decoding with the KV cache (greedy chain speculative decoding, topk=1)::

    draft = eagle3_validate.load_draft(draft_dir, embed_tokens=target.get_input_embeddings().weight,
                       lm_head=target.lm_head.weight, target_vocab_size=V, target_hidden_size=H)
    cache = DraftKVCache()
    # prompt x_0..x_{n-1}; the target's prefill gave aux states A[:, 0:n] and its next token x_n
    out = draft.forward(tokens=ids[:, 1:n + 1], hidden=A[:, 0:n], cache=cache)      # columns 0..n-1
    tok, h, proposal = out.token_ids[:, -1:], out.hidden[:, -1:], []
    for _ in range(K):
        proposal.append(tok)                      # d_1 .. d_K
        if len(proposal) == K:
            break
        out = draft.forward(tokens=tok, hidden=h, cache=cache)   # fc skipped: h has width H
        tok, h = out.token_ids, out.hidden
    # the target verifies [x_n, d_1..d_K] in one forward -> m accepted drafts + bonus token b, aux states A'
    cache.crop(n)                                 # drop the speculative entries, keep verified columns 0..n-1
    out = draft.forward(tokens=cat([d_1..d_m, b]), hidden=A'[:, 0:m + 1], cache=cache)  # columns n..n+m
    # ... continue from out's last column
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn

from remote_probes.eagle3.checkpoint import DraftLoadError
from remote_probes.eagle3.config import flat_config, rope_config, variant_flags

if TYPE_CHECKING:  # imported at run time only for an MLA draft (_MidLayer)
    from remote_probes.eagle3.mla import MLAAttention

__all__ = ["DraftConfig", "DraftKVCache", "DraftLoadError", "DraftOutput", "Eagle3Draft"]
#: config keys that make a draft's attention MLA (any one present)
MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim")

def _need(cfg: Dict[str, Any], key: str) -> Any:
    value = cfg.get(key)
    if value is None:
        raise DraftLoadError("draft config.json has no %s" % key, field=key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise DraftLoadError("draft config.json: %s must be a positive integer, got %r" % (key, value), field=key)
    return value


@dataclass
class DraftConfig:
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    draft_vocab_size: Optional[int]
    target_hidden_size: int
    rms_norm_eps: float = 1e-6
    hidden_act: str = "silu"  # the MLP's activation, as both engines' decoder layer reads it (ACTIVATIONS)
    rope_theta: float = 10000.0
    rope_scaling: Optional[Dict[str, Any]] = None
    raw: Dict[str, Any] = field(default_factory=dict)
    # variant flags set in the config (eagle3_config.VARIANT_FLAGS): norm_before_residual, norm_before_fc, fc_norm,
    # norm_output (speculators / SGLang meaning: the normed hidden is fed back to the next step)
    flags: Dict[str, bool] = field(default_factory=dict)
    # "mla" when the config has MLA dimensions (DeepSeek-V3 / Kimi-K2.5 drafts); the dims below are used only then
    attention: str = "llama"
    q_lora_rank: Optional[int] = None  # None: one q_proj instead of q_a_proj/q_a_layernorm/q_b_proj (as transformers)
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    rope_interleave: bool = True  # DeepSeek's RoPE pairs (x0, x1), (x2, x3): SGLang's default, transformers' too
    max_position_embeddings: int = 4096  # read by transformers' yarn RoPE when no original_max_position_embeddings

    @classmethod
    def from_dict(cls, raw: Dict[str, Any]) -> DraftConfig:
        """Any format: flat (SpecForge), ``transformer_layer_config`` (speculators), ``eagle_config`` flags."""
        cfg = flat_config(raw)
        hidden = _need(cfg, "hidden_size")
        heads = _need(cfg, "num_attention_heads")
        theta, scaling, _ = rope_config(cfg)
        if theta is None:
            theta = 10000.0  # what SGLang and transformers assume when no key names a theta
        mla = any(cfg.get(k) is not None for k in MLA_KEYS)
        # an MLA draft's RoPE is transformers' DeepSeek-V3 rotary embedding, which also does DeepSeek's yarn
        kinds = ("default", "linear", "llama3") + (("yarn",) if mla else ())
        if isinstance(scaling, dict):
            kind = scaling.get("rope_type", scaling.get("type", "default"))
            if kind not in kinds:
                raise DraftLoadError("rope scaling type %r is not supported (%s)" % (kind, ", ".join(kinds)),
                                     field="rope_scaling")
            scaling = None if kind == "default" else dict(scaling, rope_type=kind)
        dvs = cfg.get("draft_vocab_size")
        dims: Dict[str, Any] = {}
        if mla:
            dims = {"attention": "mla", "q_lora_rank": None if cfg.get("q_lora_rank") is None
                    else _need(cfg, "q_lora_rank"), "rope_interleave": bool(cfg.get("rope_interleave", True))}
            dims.update({k: _need(cfg, k) for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                                    "v_head_dim")})
            if isinstance(cfg.get("max_position_embeddings"), int):
                dims["max_position_embeddings"] = cfg["max_position_embeddings"]
        return cls(
            hidden_size=hidden,
            intermediate_size=_need(cfg, "intermediate_size"),
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or hidden // heads,
            vocab_size=_need(cfg, "vocab_size"),
            draft_vocab_size=None if dvs is None else _need(cfg, "draft_vocab_size"),
            target_hidden_size=cfg.get("target_hidden_size") or hidden,
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            hidden_act=_activation(cfg.get("hidden_act", "silu")),
            rope_theta=float(theta),
            rope_scaling=scaling,
            raw=dict(raw),
            flags=variant_flags(raw),
            **dims,
        )


class DraftKVCache:
    """Keys/values of the draft's one layer, one slot per column; ``crop(n)`` keeps the first n.

    An MLA draft caches its compressed latents instead (k: the normed kv latent [B, 1, L, kv_lora_rank], v: the
    rotated shared rope key [B, 1, L, qk_rope_head_dim]), as transformers' DeepSeek-V3 attention does: it calls
    ``update``, a transformers ``Cache``'s method for one layer.
    """

    def __init__(self) -> None:
        self.k: Optional[torch.Tensor] = None  # [B, kv_heads, L, head_dim], RoPE already applied
        self.v: Optional[torch.Tensor] = None

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def crop(self, n: int) -> None:
        if self.k is not None and self.v is not None:  # set together by append()
            self.k, self.v = self.k[:, :, :n], self.v[:, :, :n]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Add columns; return all the cached keys and values."""
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def update(self, k: torch.Tensor, v: torch.Tensor, *_layer_and_kwargs: Any,
               **_kwargs: Any) -> Tuple[torch.Tensor, torch.Tensor]:
        """``append`` under transformers' ``Cache.update(key, value, layer_idx, ...)`` name (one layer only)."""
        return self.append(k, v)


class ChainKeys:
    """The keys/values of ``ttt_forward``'s steps so far, and the attention it runs (shared by both attentions).

    Step 0's query at column t sees step 0's keys of columns <= t (``causal``); step k >= 1's query at column t
    sees those plus its own chain's keys of steps 1..k at column t (the "diagonal"), which is what incremental
    decoding of a chain anchored at t sees. Only the diagonal is scored for steps >= 1, not a (k+1)T-wide mask.
    """

    def __init__(self) -> None:
        self.keys: List[torch.Tensor] = []    # per step: [B, heads, T, d], heads already expanded
        self.values: List[torch.Tensor] = []

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: torch.Tensor,
               scale: Optional[float] = None) -> torch.Tensor:
        """Add this step's keys/values; return the attention output [B, heads, T, d_v]. ``scale``: the softmax
        scale, None for SDPA's 1/sqrt(head_dim) (the Llama layer's; left to SDPA so its bits stay as they were)."""
        self.keys.append(k)
        self.values.append(v)
        if len(self.keys) == 1:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=causal, scale=scale)
        if scale is None:
            scale = 1.0 / math.sqrt(q.shape[-1])
        t = q.shape[2]
        s0 = (q @ self.keys[0].transpose(2, 3)) * scale
        s0 = s0.masked_fill(~causal, float("-inf"))
        diag = torch.stack([(q * kj).sum(-1) * scale for kj in self.keys[1:]], dim=-1)
        p = torch.softmax(torch.cat([s0, diag], dim=-1).float(), dim=-1).to(q.dtype)
        o = p[..., :t] @ self.values[0]
        for j, vj in enumerate(self.values[1:]):
            o = o + p[..., t + j, None] * vj
        return o


@dataclass
class DraftOutput:
    logits: torch.Tensor     # [B, T, draft_vocab]
    hidden: torch.Tensor     # [B, T, H] fed back as the next step's hidden: pre-norm (post-norm with norm_output)
    token_ids: torch.Tensor  # [B, T] greedy choice mapped to TARGET ids via d2t


class _RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def _inv_freq(cfg: DraftConfig) -> torch.Tensor:
    dim = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2).float() / dim))
    sc = cfg.rope_scaling
    if sc and sc["rope_type"] == "linear":
        inv = inv / float(sc["factor"])
    elif sc and sc["rope_type"] == "llama3":  # same frequency surgery as Llama 3 / SpecForge
        factor, low, high = float(sc["factor"]), float(sc["low_freq_factor"]), float(sc["high_freq_factor"])
        orig = float(sc["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv
        smooth = (orig / wavelen - low) / (high - low) if low != high else torch.zeros_like(inv)
        inv = torch.where(wavelen < orig / high, inv,
                          torch.where(wavelen > orig / low, inv / factor, (1 - smooth) * inv / factor + smooth * inv))
    return inv


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class _Attention(nn.Module):
    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        h2, nh, nkv, hd = 2 * cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(h2, nh * hd, bias=False)
        self.k_proj = nn.Linear(h2, nkv * hd, bias=False)
        self.v_proj = nn.Linear(h2, nkv * hd, bias=False)
        self.o_proj = nn.Linear(nh * hd, cfg.hidden_size, bias=False)
        self.nh, self.nkv, self.hd = nh, nkv, hd

    def qkv(self, x: torch.Tensor, positions: torch.Tensor,
            inv_freq: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)
        freqs = positions.float()[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        return q, k, v

    def expand(self, kv: torch.Tensor) -> torch.Tensor:
        rep = self.nh // self.nkv
        return kv if rep == 1 else kv.repeat_interleave(rep, dim=1)

    def out(self, o: torch.Tensor) -> torch.Tensor:
        b, _, t, _ = o.shape
        return self.o_proj(o.transpose(1, 2).reshape(b, t, self.nh * self.hd))

    def columns(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                cache: Optional[DraftKVCache], inv_freq: torch.Tensor) -> torch.Tensor:
        """Attention output of columns at ``positions`` after the cached ones (``mask``: [T, cached + T])."""
        q, k, v = self.qkv(x, positions, inv_freq)
        if cache is not None:
            k, v = cache.append(k, v)
        return self.out(F.scaled_dot_product_attention(q, self.expand(k), self.expand(v), attn_mask=mask))

    def ttt_step(self, x: torch.Tensor, positions: torch.Tensor, causal: torch.Tensor, chain: ChainKeys,
                 inv_freq: torch.Tensor) -> torch.Tensor:
        """One ``ttt_forward`` step over all columns (``chain`` holds the earlier steps' keys)."""
        q, k, v = self.qkv(x, positions, inv_freq)
        return self.out(chain.attend(q, self.expand(k), self.expand(v), causal))


#: the gated MLP activations the engines' Llama layer accepts (SiluAndMul, GeluAndMul and their kin)
ACTIVATIONS: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"silu": F.silu, "gelu": F.gelu, "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
               "gelu_new": lambda x: F.gelu(x, approximate="tanh"), "relu": F.relu}


def _activation(name: Any) -> str:
    if name not in ACTIVATIONS:
        raise DraftLoadError("hidden_act %r is not an activation the draft test models (%s)"
                             % (name, ", ".join(sorted(ACTIVATIONS))), field="hidden_act")
    return str(name)


class _MLP(nn.Module):
    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.act: Callable[[torch.Tensor], torch.Tensor] = ACTIVATIONS[cfg.hidden_act]
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class _MidLayer(nn.Module):
    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.input_layernorm = _RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_norm = _RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = _RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn: Union[_Attention, MLAAttention]
        if cfg.attention == "mla":
            # imported here, not at the top: transformers is needed for MLA drafts only
            from remote_probes.eagle3.mla import MLAAttention

            self.self_attn = MLAAttention(cfg)
        else:
            self.self_attn = _Attention(cfg)
        self.mlp = _MLP(cfg)  # dense in both: SGLang's and the other engines' EAGLE-3 MLA layers keep a dense MLP


class Eagle3Draft(nn.Module):
    """EAGLE-3 draft; parameter names follow SpecForge (``fc``, ``midlayer.*``, ``norm``, ``lm_head``)."""

    d2t: torch.Tensor  # a buffer (registered in __init__): draft id -> offset to the target id

    def __init__(self, cfg: DraftConfig, num_aux: int = 3) -> None:
        super().__init__()
        self.cfg = cfg
        self.num_aux = num_aux
        vd = cfg.draft_vocab_size or cfg.vocab_size
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.fc = nn.Linear(num_aux * cfg.target_hidden_size, cfg.hidden_size, bias=False)
        # variants (speculators / SGLang names): one norm over the concatenation, or one per aux state
        self.input_norm: Optional[_RMSNorm] = (_RMSNorm(num_aux * cfg.target_hidden_size, cfg.rms_norm_eps)
                                               if cfg.flags.get("norm_before_fc") else None)
        self.fc_norm: Optional[nn.ModuleList] = (nn.ModuleList([_RMSNorm(cfg.target_hidden_size, cfg.rms_norm_eps) for _ in range(num_aux)])
                                                 if cfg.flags.get("fc_norm") else None)
        self.midlayer = _MidLayer(cfg)
        self.norm = _RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, vd, bias=False)
        self.register_buffer("d2t", torch.zeros(vd, dtype=torch.long))
        self._inv_freq = _inv_freq(cfg)  # not a buffer: .to(bfloat16) must not round the RoPE frequencies
        self.load_report: Dict[str, Any] = {"notes": []}

    # -- pieces -------------------------------------------------------------------------------------------
    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        """fc over concatenated aux states; skipped when the width already equals hidden_size (SGLang's rule)."""
        if hidden.shape[-1] == self.cfg.hidden_size:
            return hidden
        if hidden.shape[-1] != self.fc.in_features:
            raise DraftLoadError("hidden input width %d matches neither fc input %d nor hidden_size %d"
                                 % (hidden.shape[-1], self.fc.in_features, self.cfg.hidden_size), field="fc.weight")
        hidden = hidden.to(self.fc.weight.dtype)
        if self.input_norm is not None:
            hidden = self.input_norm(hidden)
        if self.fc_norm is not None:
            chunks = hidden.chunk(self.num_aux, dim=-1)
            hidden = torch.cat([self.fc_norm[i](c) for i, c in enumerate(chunks)], dim=-1)
        return self.fc(hidden)

    def residual(self, h: torch.Tensor) -> torch.Tensor:
        """What the attention output is added to: h, or hidden_norm(h) with norm_before_residual (speculators)."""
        return self.midlayer.hidden_norm(h) if self.cfg.flags.get("norm_before_residual") else h

    def _attn_input(self, tokens: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        emb = self.embed_tokens(tokens)
        layer = self.midlayer
        return torch.cat([layer.input_layernorm(emb), layer.hidden_norm(hidden)], dim=-1)  # embedding FIRST

    def _finish(self, residual: torch.Tensor, attn_out: torch.Tensor) -> DraftOutput:
        layer = self.midlayer
        h = residual + attn_out
        h = h + layer.mlp(layer.post_attention_layernorm(h))
        normed = self.norm(h)
        logits = self.lm_head(normed)
        fed_back = normed if self.cfg.flags.get("norm_output") else h
        return DraftOutput(logits=logits, hidden=fed_back, token_ids=self.to_target_ids(logits.argmax(-1)))

    def _rope(self, device: torch.device) -> torch.Tensor:
        if self._inv_freq.device != device:
            self._inv_freq = self._inv_freq.to(device)
        return self._inv_freq

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]

    # -- incremental decoding -------------------------------------------------------------------------------
    def propose(self, tokens: torch.Tensor, hidden: torch.Tensor, cache: "DraftKVCache", steps: int) -> List[int]:
        """A chain of ``steps`` proposals (target ids): the columns ``tokens``/``hidden`` run after the cached ones,
        then each proposal fed back with its pre-norm hidden (the module doc's loop; the lab's server and the
        offline simulation both serve with it)."""
        out = self.forward(tokens=tokens, hidden=hidden, cache=cache)
        tok, hid = out.token_ids[:, -1:], out.hidden[:, -1:]
        proposal = [int(tok)]
        while len(proposal) < steps:
            out = self.forward(tokens=tok, hidden=hid, cache=cache)
            tok, hid = out.token_ids, out.hidden
            proposal.append(int(tok))
        return proposal

    def forward(self, tokens: torch.Tensor, hidden: torch.Tensor,
                cache: Optional[DraftKVCache] = None) -> DraftOutput:
        """Run columns ``tokens[:, i]`` / ``hidden[:, i]`` after the ``cache.length`` cached ones (causal)."""
        h = self.project(hidden)
        start = 0 if cache is None else cache.length
        t = tokens.shape[1]
        positions = torch.arange(start, start + t, device=tokens.device)
        # query i sits at absolute slot start+i and sees slots 0..start+i
        mask = torch.arange(start + t, device=tokens.device)[None, :] <= positions[:, None]
        attn_out = self.midlayer.self_attn.columns(self._attn_input(tokens, h), positions, mask, cache,
                                                   self._rope(tokens.device))
        return self._finish(self.residual(h), attn_out)

    # -- test-time-training layout (all columns, chained steps) ----------------------------------------------
    def ttt_forward(self, aux: torch.Tensor, next_tokens: torch.Tensor, steps: int) -> List[DraftOutput]:
        """Step k at column t reads token ``next_tokens[:, t + k]`` (= x_{t+1+k}) and RoPE position t+k.

        ``aux``: [B, T, num_aux * target_hidden]; ``next_tokens``: [B, >= T + steps - 1]. Step k's query at
        column t attends to step-0 keys of columns <= t plus its own chain's keys of steps 1..k — identical
        to incremental decoding of a chain anchored at t, so these outputs are what serving would draft.
        """
        b, t, _ = aux.shape
        if next_tokens.shape[1] < t + steps - 1:
            raise ValueError("next_tokens needs at least T + steps - 1 columns")
        attn = self.midlayer.self_attn
        pos = torch.arange(t, device=aux.device)
        causal = pos[None, :] <= pos[:, None]
        h = self.project(aux)
        chain = ChainKeys()
        outputs: List[DraftOutput] = []
        for k_step in range(steps):
            x = self._attn_input(next_tokens[:, k_step:k_step + t], h)
            out = self._finish(self.residual(h), attn.ttt_step(x, pos + k_step, causal, chain, self._rope(aux.device)))
            outputs.append(out)
            h = out.hidden
        return outputs
