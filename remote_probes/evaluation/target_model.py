"""The target as a transformers causal LM, whether its checkpoint is one (``LlamaForCausalLM``, ``Qwen3ForCausalLM``,
``DeepseekV3ForCausalLM``) or a wrapper that nests its language model under ``text_config`` with the weights under
``language_model.`` (Kimi-K2.5's ``KimiK25ForConditionalGeneration``: a vision tower beside a DeepSeek-V3 language
model). transformers has no class for such a wrapper without the checkpoint's own remote code, and the draft never
sees the other towers: the engines delegate the EAGLE-3 capture to the language model
(SGLang srt/models/kimi_k25.py ``self.language_model = DeepseekV3ForCausalLM(...)``; vLLM kimi_k25.py
``set_aux_hidden_state_layers`` -> ``self.language_model``). So the language model is built here from
``text_config`` by transformers' own class for its ``model_type`` and loaded from the ``language_model.`` tensors
(``key_mapping``, applied before transformers' own checkpoint conversions, e.g. per-expert MoE tensors), the other
towers' tensors left out. Standard library at import; transformers and torch when a model loads.

Public API: ``WRAPPED_PREFIX``, ``text_config_of(raw) -> dict | None`` (the language model's config of a wrapper, None
for a causal LM), ``load_causal_lm(path, dtype) -> model``, ``causal_lm_config(path) -> config``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional

#: where a wrapper's language model tensors sit (Kimi-K2.5, Kimi-VL, DeepSeek-VL2: ``language_model.model.*``)
WRAPPED_PREFIX = "language_model."
_TEXT_KEYS = ("text_config", "language_config", "llm_config")


def read_config(path: str) -> Dict[str, Any]:
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        raw = json.load(f)
    if not isinstance(raw, dict):
        raise ValueError("%s/config.json is not a JSON object" % path)
    return raw


def text_config_of(raw: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The nested language model's config when ``raw`` is a wrapper's (a ``text_config`` with its own
    ``model_type``), else None."""
    for key in _TEXT_KEYS:
        inner = raw.get(key)
        if isinstance(inner, dict) and isinstance(inner.get("model_type"), str) and inner.get("num_hidden_layers"):
            return inner
    return None


def causal_lm_config(path: str) -> Any:
    """The transformers config of the target's language model: the checkpoint's own, or its wrapper's
    ``text_config`` built by transformers' class for that ``model_type``."""
    from transformers import AutoConfig

    inner = text_config_of(read_config(path))
    if inner is None:
        return AutoConfig.from_pretrained(path)
    fields = {k: v for k, v in inner.items() if k != "model_type"}
    return AutoConfig.for_model(inner["model_type"], **fields)


def load_causal_lm(path: str, dtype: Any) -> Any:
    """The target's language model, in eval mode; a wrapper's from its ``language_model.`` tensors."""
    from transformers import AutoModelForCausalLM

    inner = text_config_of(read_config(path))
    if inner is None:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    return AutoModelForCausalLM.from_pretrained(path, config=causal_lm_config(path), dtype=dtype,
                                                key_mapping={"^" + WRAPPED_PREFIX.replace(".", r"\."): ""}).eval()
