"""Tensor names of EAGLE-3 draft checkpoints, normalised to one layout (standard library only).

The layouts real drafts use: SpecForge / EAGLE ``midlayer.*``, vLLM-style / speculators ``layers.0.*``, either under
a ``model.`` prefix, and SGLang's legacy ``aux_norm_{low,mid,high}`` for the per-aux norms. ``canonical_name`` maps
each to SpecForge's; a name of no known layout (``_orig_mod.midlayer.*`` from a torch.compile'd module) is left as it
is, so that what an engine's loader does with it is decided by draft_reading/tensor_placement.py, not guessed here.

Public API: ``canonical_name(name)``, ``apply_renames(state, renames)``, ``LEGACY_NORMS``.
"""

from __future__ import annotations

from typing import Any, Dict

LEGACY_NORMS = {"aux_norm_low.": "fc_norm.0.", "aux_norm_mid.": "fc_norm.1.", "aux_norm_high.": "fc_norm.2."}


def canonical_name(name: str) -> str:
    """Map a tensor name of any known layout to SpecForge's (``midlayer.*``, no ``model.`` prefix).

    The variant norms keep speculators' / SGLang's names (``fc_norm.N``, ``input_norm``); SGLang's legacy
    ``aux_norm_{low,mid,high}`` become ``fc_norm.{0,1,2}`` as its loader renames them.
    """
    if name.startswith("model."):
        name = name[len("model."):]
    if name.startswith("layers.0."):
        name = "midlayer." + name[len("layers.0."):]
    for old, new in LEGACY_NORMS.items():
        if name.startswith(old):
            name = new + name[len(old):]
    return name


def apply_renames(state: Dict[str, Any], renames: Dict[str, str]) -> Dict[str, Any]:
    """A canonical state dict with the tensors saved as ``old`` under the name the loader places (``renames``: saved
    name -> placeable name, draft_reading/tensor_placement.place), canonicalised again."""
    moved = {canonical_name(old): canonical_name(new) for old, new in renames.items()}
    return {moved.get(k, k): v for k, v in state.items()}
