"""Tiny EAGLE-3 drafts written by the REAL training libraries (test-only dependencies, installed ``--no-deps``):

- SpecForge 0.2.0 (``LlamaForCausalLMEagle3``: flat Llama config, ``midlayer.*``, nested ``eagle_config``)
- vLLM speculators 0.9.0 (``Eagle3DraftModel``: ``transformer_layer_config``, ``speculators_config``, ``layers.0.*``,
  top-level ids and the variant flags ``norm_before_residual`` / ``norm_before_fc`` / ``fc_norm``)

Both save with the installed transformers (5.x), so their configs carry RoPE as ``rope_parameters``.

speculators' package ``__init__`` imports its training-data module, which imports ``openai``, ``datasets`` and
``hs_connectors`` (data generation only; never called when a config or model is built and saved). When those are
not installed, ``import_speculators`` puts inert placeholder modules under those three names for the import only,
instead of pulling their dependency trees (pyarrow, an HTTP client stack, ...) into the test environment.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

from tests import realparts

H, V, VD = 64, 256, 64  # draft hidden = target hidden, target vocab, draft vocab
TRAINING_ONLY = ("openai", "datasets", "hs_connectors")


class _Inert(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {"__init__": lambda self, *a, **k: None})


def import_speculators() -> Any:
    """``speculators`` (skips, or fails under CI, when it is not installed)."""
    if importlib.util.find_spec("speculators") is None:
        realparts.missing("speculators missing: pip install --no-deps -c constraints.txt speculators==0.9.0")
    placed = []
    for name in TRAINING_ONLY:
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            for sub in (name, f"{name}.types", f"{name}.types.chat", f"{name}.types.completion"):
                sys.modules[sub] = _Inert(sub)
                sys.modules[sub].__path__ = []  # type: ignore[attr-defined]
                placed.append(sub)
    try:
        return importlib.import_module("speculators")
    finally:
        for sub in placed:  # only speculators' own modules keep a reference
            sys.modules.pop(sub, None)


def _randomise(model: Any, torch: Any, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # post_init leaves norms at 1: randomise everything
            if "norm" in name:
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))


def _vocab_map(torch: Any, seed: int) -> tuple[Any, Any]:
    gen = torch.Generator().manual_seed(seed)
    hot = torch.sort(torch.randperm(V, generator=gen)[:VD]).values
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[hot] = True
    return hot - torch.arange(VD), t2d


def llama_layer_config(**extra: Any) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=H, intermediate_size=2 * H, num_attention_heads=4, num_key_value_heads=2,
                       num_hidden_layers=1, vocab_size=V, max_position_embeddings=256, rms_norm_eps=1e-6, **extra)


def save_specforge_draft(path: Path, *, aux_ids: list[int] | None = None, seed: int = 0, **flags: Any) -> Any:
    """SpecForge's LlamaForCausalLMEagle3 with random weights, saved by ``save_pretrained``; returns the model."""
    torch = realparts.importorskip("torch")
    llama3_eagle = realparts.importorskip("specforge.modeling.draft.llama3_eagle",
                                          reason="specforge missing: pip install --no-deps specforge==0.2.0")
    cfg = llama_layer_config(draft_vocab_size=VD, **flags)
    cfg.architectures = ["LlamaForCausalLMEagle3"]
    if aux_ids is not None:
        cfg.eagle_config = {"eagle_aux_hidden_state_layer_ids": aux_ids, "use_aux_hidden_state": True}
    model = llama3_eagle.LlamaForCausalLMEagle3(cfg, attention_backend="sdpa").eval()
    _randomise(model, torch, seed)
    d2t, t2d = _vocab_map(torch, seed)
    model.d2t.copy_(d2t)
    model.t2d.copy_(t2d)
    model.save_pretrained(str(path))
    return model


def save_speculators_draft(path: Path, *, aux_ids: list[int] | None = (1, 5, 8), seed: int = 0,  # type: ignore[assignment]
                           **flags: Any) -> Any:
    """speculators' Eagle3DraftModel (Llama layer) with random weights, saved by ``save_pretrained``."""
    torch = realparts.importorskip("torch")
    spec = import_speculators()
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig

    layer = llama_layer_config()
    layer._attn_implementation = "eager"  # CPU: no flex attention
    cfg = Eagle3SpeculatorConfig(
        transformer_layer_config=layer, draft_vocab_size=VD,
        eagle_aux_hidden_state_layer_ids=None if aux_ids is None else list(aux_ids),
        speculators_config=spec.SpeculatorsConfig(
            algorithm="eagle3", proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            default_proposal_method="greedy",
            verifier=spec.VerifierConfig(name_or_path=None, architectures=["LlamaForCausalLM"])),
        **flags)
    model = Eagle3DraftModel(cfg).eval()
    _randomise(model, torch, seed)
    d2t, t2d = _vocab_map(torch, seed)
    model.load_vocab_mappings(t2d, d2t)
    model.save_pretrained(str(path))
    return model


def save_target_config(path: Path, *, num_layers: int = 12, rope_theta: float = 10000.0) -> Path:
    """A target config.json as transformers 5 writes it (RoPE under rope_parameters)."""
    from transformers import LlamaConfig

    LlamaConfig(hidden_size=H, intermediate_size=2 * H, num_attention_heads=4, num_key_value_heads=2,
                num_hidden_layers=num_layers, vocab_size=V, rope_theta=rope_theta,
                max_position_embeddings=256).save_pretrained(str(path))  # the drafts' own (llama_layer_config)
    return path


def save_tiny_target(path: Path, prompts: list[str], *, num_layers: int = 12, seed: int = 0) -> Path:
    """A random Llama target (hidden H, vocab V) with a word-level tokenizer of V ids over the prompts' words."""
    torch = realparts.importorskip("torch")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words: dict[str, int] = {}
    for text in prompts:
        for word in text.split():
            words[word] = words.get(word, 0) + 1
    vocab = ["[UNK]", "<eos>"] + sorted(words, key=lambda w: (-words[w], w))[:V - 2]
    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="<eos>",
                                        pad_token="<eos>", bos_token="<eos>")
    torch.manual_seed(seed)
    cfg = LlamaConfig(hidden_size=H, intermediate_size=2 * H, num_attention_heads=4, num_key_value_heads=2,
                      num_hidden_layers=num_layers, vocab_size=V, max_position_embeddings=512,
                      eos_token_id=1, pad_token_id=1, bos_token_id=1)
    LlamaForCausalLM(cfg).save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path
