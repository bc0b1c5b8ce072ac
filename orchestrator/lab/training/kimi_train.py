"""The lab's target of the seed's class and its EAGLE-3 drafts: a tiny DeepSeek-V3 language model (multi-latent
attention, routed and shared experts after a first dense layer) inside a Kimi-K2.5-style wrapper
(``KimiK25ForConditionalGeneration``: ``text_config`` and ``language_model.`` tensors), with one-layer MLA drafts
(SGLang's ``Eagle3DeepseekV2ForCausalLM``, vLLM's deepseek_eagle3.py) trained against it by train.py's own loops.
orchestrator/lab/building/class_lab.py says why the lab has it and builds the lab from these recipes.

The target trains as transformers' ``DeepseekV3ForCausalLM`` (its own MLA and MoE layers) and is saved as the
wrapper: the seed's target is served through one (SGLang srt/models/kimi_k25.py delegates
``set_eagle3_layers_to_capture`` to its DeepSeek-V3 language model), and a wrapper is what the loaders must follow
(remote_probes/evaluation/target_model.py). No vision tower: the lab drafts text, and a vision tower of random
weights would be a part nobody measures. ``KIMI_TRAINING_VERSION`` is in these models' cache keys: bump it when a
change alters what the training produces.

Public API: ``KimiRecipe``, ``KIMI_DRAFT``, ``KIMI_TRAINING_VERSION``, ``WRAPPER_ARCHITECTURE``,
``deepseek_fields(recipe) -> dict`` (the DeepSeek-V3 config fields), ``wrap_language_model(out_dir)``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.lab.training.train import DraftRecipe

#: the version of this module's training (the recipe's meaning, the wrapper's layout): in the models' cache keys
KIMI_TRAINING_VERSION = 1
#: the seed's target class (Kimi-K2.5), as its config.json names it
WRAPPER_ARCHITECTURE = "KimiK25ForConditionalGeneration"
WRAPPER_MODEL_TYPE = "kimi_k25"


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


def deepseek_fields(recipe: KimiRecipe) -> dict[str, Any]:
    """The DeepSeek-V3 config fields of ``recipe`` beyond the common ones train.py sets; one expert group (the
    grouped top-k of the 256-expert models is the plain top-k here) and no routed scaling."""
    return {"moe_intermediate_size": recipe.moe_intermediate_size,
            "n_routed_experts": recipe.n_routed_experts, "num_experts_per_tok": recipe.num_experts_per_tok,
            "n_shared_experts": recipe.n_shared_experts, "first_k_dense_replace": recipe.first_k_dense_replace,
            "n_group": 1, "topk_group": 1, "routed_scaling_factor": 1.0, "q_lora_rank": recipe.q_lora_rank,
            "kv_lora_rank": recipe.kv_lora_rank, "qk_nope_head_dim": recipe.qk_nope_head_dim,
            "qk_rope_head_dim": recipe.qk_rope_head_dim, "v_head_dim": recipe.v_head_dim,
            "num_nextn_predict_layers": 0}


def wrap_language_model(out_dir: Path) -> None:
    """Turn a saved ``DeepseekV3ForCausalLM`` into the Kimi-K2.5 wrapper's layout, in place: its config under
    ``text_config`` (Kimi-K2.5's config.json nests it so), its tensors under ``language_model.``
    (``language_model.model.layers.N...``, ``language_model.lm_head.weight``, as the published checkpoint)."""
    from safetensors.torch import load_file, save_file

    from remote_probes.evaluation.target_model import WRAPPED_PREFIX

    config_path, weights = out_dir / "config.json", out_dir / "model.safetensors"
    text = json.loads(config_path.read_text())
    wrapper = {"architectures": [WRAPPER_ARCHITECTURE], "model_type": WRAPPER_MODEL_TYPE, "text_config": text,
               "tie_word_embeddings": False, "bos_token_id": text.get("bos_token_id"),
               "eos_token_id": text.get("eos_token_id"), "pad_token_id": text.get("pad_token_id")}
    config_path.write_text(json.dumps(wrapper, indent=2) + "\n")
    state = load_file(str(weights))
    save_file({WRAPPED_PREFIX + name: tensor for name, tensor in state.items()}, str(weights),
              metadata={"format": "pt"})
