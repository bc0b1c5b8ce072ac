"""The Kimi-K2.5 wrapper's layout for a trained DeepSeek-V3 language model (what train.py calls for the ``kimi``
class; the recipes are kimi_train.py's, which imports train.py, so this module imports neither).

Kimi-K2.5's config.json nests the language model's under ``text_config`` and its checkpoint keeps the tensors under
``language_model.`` (``language_model.model.layers.N...``, ``language_model.lm_head.weight``). No vision tower: the
lab drafts text, and a vision tower of random weights would be a part nobody measures (real vLLM 0.32 refuses such a
wrapper at start, for want of its image processor: BENCHMARKS.md, "the seed's class").

Public API: ``WRAPPER_ARCHITECTURE``, ``WRAPPER_MODEL_TYPE``, ``deepseek_fields(recipe) -> dict``,
``wrap_language_model(out_dir)``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: the seed's target class (Kimi-K2.5), as its config.json names it
WRAPPER_ARCHITECTURE = "KimiK25ForConditionalGeneration"
WRAPPER_MODEL_TYPE = "kimi_k25"


def deepseek_fields(recipe: Any) -> dict[str, Any]:
    """The DeepSeek-V3 config fields of a kimi_train.KimiRecipe beyond the common ones train.py sets; one expert
    group (the grouped top-k of the 256-expert models is the plain top-k here) and no routed scaling."""
    return {"moe_intermediate_size": recipe.moe_intermediate_size,
            "n_routed_experts": recipe.n_routed_experts, "num_experts_per_tok": recipe.num_experts_per_tok,
            "n_shared_experts": recipe.n_shared_experts, "first_k_dense_replace": recipe.first_k_dense_replace,
            "n_group": 1, "topk_group": 1, "routed_scaling_factor": 1.0, "q_lora_rank": recipe.q_lora_rank,
            "kv_lora_rank": recipe.kv_lora_rank, "qk_nope_head_dim": recipe.qk_nope_head_dim,
            "qk_rope_head_dim": recipe.qk_rope_head_dim, "v_head_dim": recipe.v_head_dim,
            "num_nextn_predict_layers": 0,
            # what transformers' DeepSeek-V3 router does (a sigmoid score, e_score_correction_bias for the choice),
            # named as DeepSeek-V3's and Kimi-K2.5's configs name it: vLLM builds the bias only for noaux_tc
            # (deepseek_v2.py; without it its loader has no e_score_correction_bias parameter: KeyError)
            "topk_method": "noaux_tc", "scoring_func": "sigmoid"}


def wrap_language_model(out_dir: Path) -> None:
    """Turn a saved ``DeepseekV3ForCausalLM`` into the Kimi-K2.5 wrapper's layout, in place."""
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
