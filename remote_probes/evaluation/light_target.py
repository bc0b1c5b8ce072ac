"""The parts of a target that a draft test needs when the engine computes its hidden states: the tokenizer, the
config, the token embedding, the output head and the final norm, read from the checkpoint's safetensors without
building the model (a trillion-parameter target's three matrices, not its layers). torch + transformers + safetensors.

``LightTarget`` answers what draft_test.py asks of a transformers model (``config``, ``get_input_embeddings()``,
``get_output_embeddings()``, ``model.norm``, ``device``), so the draft is built, served parts resolved and the
counterfactuals scored exactly as with the whole model loaded. Tensor names are found by suffix, so a wrapper that
nests its language model (``language_model.model.embed_tokens.weight``) is read as a plain causal LM is.

Public API: ``load_light_target(path, device, dtype) -> LightTarget``, ``final_norm(target, x)``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional

from remote_probes.agent.protocol import ProbeFailure

EMBED = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight")
HEAD = ("lm_head.weight",)
NORM = ("model.norm.weight", "norm.weight", "final_layernorm.weight", "ln_f.weight")


def _weight_files(path: str) -> Dict[str, str]:
    """tensor name -> safetensors file, from the index when the checkpoint is sharded."""
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            mapping = json.load(f).get("weight_map") or {}
        return {name: os.path.join(path, file) for name, file in mapping.items()}
    single = os.path.join(path, "model.safetensors")
    if not os.path.isfile(single):
        raise ProbeFailure("target_load", "%s has neither model.safetensors nor model.safetensors.index.json: the "
                           "engine path reads the target's embedding, head and norm from safetensors" % path,
                           field="target")
    from safetensors import safe_open
    with safe_open(single, framework="pt") as f:
        return {name: single for name in f.keys()}


#: a wrapper's other towers, whose norms and embeddings are not the language model's
OTHER_TOWERS = ("vision", "visual", "audio", "mm_projector", "multi_modal_projector")


def _pick(names: List[str], suffixes: tuple, skip: tuple = ()) -> Optional[str]:
    """The first suffix (in order of preference) that some name ends in, and of those names the shortest: the
    outermost language model's, not another tower's, a draft head's or an MTP layer's."""
    for suffix in suffixes:
        found = [n for n in names if (n == suffix or n.endswith("." + suffix))
                 and not any(s in n for s in skip + OTHER_TOWERS)]
        if found:
            return min(found, key=lambda n: (n.count("."), len(n)))
    return None


class _Norm:
    def __init__(self, weight: Any, eps: float) -> None:
        self.weight = weight
        self.variance_epsilon = eps


class LightTarget:
    def __init__(self, path: str, config: Any, tensors: Dict[str, Any], device: str, norm_eps: float) -> None:
        import torch
        self.path = path
        self.config = config
        self.device = torch.device(device)
        embed = tensors["embed"]
        self._embed = torch.nn.Embedding(embed.shape[0], embed.shape[1], _weight=embed)
        head = tensors.get("head")
        self._head: Optional[Any] = None
        if head is not None:
            self._head = torch.nn.Linear(head.shape[1], head.shape[0], bias=False)
            self._head.weight = torch.nn.Parameter(head, requires_grad=False)
        norm = tensors.get("norm")
        self.model = type("Inner", (), {"norm": None if norm is None else _Norm(norm, norm_eps)})()

    def get_input_embeddings(self) -> Any:
        return self._embed

    def get_output_embeddings(self) -> Any:
        return self._head


def load_light_target(path: str, device: str, dtype: Any) -> LightTarget:
    try:
        from safetensors import safe_open

        from remote_probes.evaluation.target_model import causal_lm_config
    except ImportError as exc:
        raise ProbeFailure("missing_dependency", "the engine path needs transformers and safetensors: %s" % exc
                           ) from None
    try:
        config = causal_lm_config(path)  # a wrapper's language model config (target_model.py)
    except Exception as exc:  # transformers raises many types for a bad config
        raise ProbeFailure("target_load", "cannot read the target's config in %s: %s: %s"
                           % (path, type(exc).__name__, str(exc)[:300]), field="target") from None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    files = _weight_files(path)
    names = sorted(files)
    mtp = ("mtp", "layers.%d." % getattr(text, "num_hidden_layers", -1))  # DeepSeek's MTP layer has its own
    wanted = {"embed": _pick(names, EMBED, mtp), "head": _pick(names, HEAD, mtp), "norm": _pick(names, NORM, mtp)}
    if wanted["embed"] is None:
        raise ProbeFailure("target_load", "no token embedding (%s) among the target's tensors" % "/".join(EMBED),
                           field="target")
    tensors: Dict[str, Any] = {}
    for role, name in wanted.items():
        if name is None:
            continue
        with safe_open(files[name], framework="pt") as f:
            tensors[role] = f.get_tensor(name).to(device=device, dtype=dtype)
    if "head" not in tensors and getattr(text, "tie_word_embeddings", getattr(config, "tie_word_embeddings", False)):
        tensors["head"] = tensors["embed"]
    eps = float(getattr(text, "rms_norm_eps", None) or getattr(text, "layer_norm_epsilon", None) or 1e-6)
    return LightTarget(path, config, tensors, device, eps)


def final_norm(target: Any, x: Any) -> Any:
    """The target's final RMSNorm applied to ``x`` (what transformers' last ``hidden_states`` entry holds and the
    engine's last id does not), computed in float32 as transformers' Llama/Qwen/DeepSeek norms do."""
    import torch
    norm = getattr(getattr(target, "model", None), "norm", None)
    if norm is None or getattr(norm, "weight", None) is None:
        raise ProbeFailure("engine_capture", "the target has no final norm weight to apply to the last layer's "
                           "output (id N): a wiring that feeds it cannot be scored from the engine's states")
    eps = getattr(norm, "variance_epsilon", None) or getattr(norm, "eps", 1e-6)
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return norm.weight * h.to(dtype)
