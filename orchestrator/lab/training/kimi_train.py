"""The lab's target of the seed's class and its EAGLE-3 drafts: a tiny DeepSeek-V3 language model (multi-latent
attention, routed and shared experts after a first dense layer) inside a Kimi-K2.5-style wrapper
(``KimiK25ForConditionalGeneration``: ``text_config`` and ``language_model.`` tensors), with one-layer MLA drafts
(SGLang's ``Eagle3DeepseekV2ForCausalLM``, vLLM's deepseek_eagle3.py) trained against it by train.py's own loops.
orchestrator/lab/building/class_lab.py says why the lab has it and builds the lab from these recipes.

The target trains as transformers' ``DeepseekV3ForCausalLM`` (its own MLA and MoE layers) and is saved as the
wrapper (kimi_wrapper.py): the seed's target is served through one (SGLang srt/models/kimi_k25.py delegates
``set_eagle3_layers_to_capture`` to its DeepSeek-V3 language model), and a wrapper is what the loaders must follow
(remote_probes/evaluation/target_model.py). ``KIMI_TRAINING_VERSION`` is in these models' cache keys: bump it when a
change alters what the training produces (2: the drafts' model_type kimi_k2, as the published Kimi-K2.5 draft's).

Public API: ``KimiRecipe``, ``KIMI_DRAFT``, ``KIMI_TRAINING_VERSION``.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.lab.training.train import DraftRecipe

#: the version of this module's training (the recipe's meaning, the wrapper's layout): in the models' cache keys
KIMI_TRAINING_VERSION = 2


@dataclass(frozen=True)
class KimiRecipe:
    """The Qwen3 lab's size (8 layers, hidden 128, one thread) with DeepSeek-V3's parts: MLA with a q LoRA rank,
    a first dense layer, then 4 routed experts (2 per token) beside one shared expert in every other layer."""

    vocab_size: int = 1024
    hidden_size: int = 128
    num_layers: int = 8
    num_heads: int = 4
    intermediate_size: int = 320        # the first (dense) layer's MLP
    moe_intermediate_size: int = 64     # each expert's
    n_routed_experts: int = 4
    num_experts_per_tok: int = 2
    n_shared_experts: int = 1
    first_k_dense_replace: int = 1
    q_lora_rank: int = 64
    kv_lora_rank: int = 32
    qk_nope_head_dim: int = 32
    qk_rope_head_dim: int = 16
    v_head_dim: int = 32
    corpus_bytes: int = 2_000_000
    steps: int = 420
    batch: int = 16
    seq_len: int = 64
    lr: float = 4e-3
    threads: int = 1  # as the Qwen3 lab's: two waiting OpenMP threads cost ten times over on a busy 2-core machine


#: the Qwen3 lab's draft recipe (the targets have the same size)
KIMI_DRAFT = DraftRecipe(steps=300, chunks=768, threads=1)
