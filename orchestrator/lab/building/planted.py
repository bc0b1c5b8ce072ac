"""Faults planted one at a time in a copy of the lab's healthy draft, as a user meets them: a checkpoint handed over
by a training pipeline, served by a real engine through `orchestrator run eagle3 -i FILE`. Unlike the lab's scenarios
(build.py), these are not calibrated or shipped: each is a copy and one edit, so a test or a bench plants it in a
second. Each says where such a fault comes from and what the right answer is on each engine.

Public API: ``PLANTED`` (name -> PlantedFault), ``plant(name, src, dst) -> Path``, ``serving(inventory, draft) ->
Inventory`` (the lab host serving that draft instead), ``write_inventory(inventory, path)``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from orchestrator.inventory import Inventory


@dataclass(frozen=True)
class PlantedFault:
    title: str
    source: str  # where the fault comes from in public reports
    #: the hypothesis whose verified fix is the right answer (None: nothing is wrong, the engine ignores the edit)
    answer: str | None
    #: whether a copy this engine can serve mends it (False: the answer is "found, no servable fix": re-export)
    servable: bool = True
    tensors: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    config: Callable[[dict[str, Any]], dict[str, Any]] | None = None


def _nan_fc(w: dict[str, Any]) -> dict[str, Any]:
    flat = w["fc.weight"].view(-1)
    flat[[3, 99]] = float("nan")
    flat[[1000, 2001]] = float("inf")
    return w


def _d2t_plus1(w: dict[str, Any]) -> dict[str, Any]:
    return {**w, "d2t": w["d2t"] + 1}


def _zero_norm(w: dict[str, Any]) -> dict[str, Any]:
    name = next(k for k in sorted(w) if k.endswith("hidden_norm.weight"))
    return {**w, name: w[name] * 0}


PLANTED: dict[str, PlantedFault] = {
    "nan-fc": PlantedFault(
        "four NaN/Inf values in fc.weight", "a bf16 export of a diverged or overflowed training step "
        "(SpecForge and speculators users report NaN losses that end in the saved weights)", "draft_field",
        tensors=_nan_fc),
    "d2t-plus1": PlantedFault(
        "every d2t offset one too high (each drafted token read as the next target id)", "an off-by-one in a "
        "hand-written vocabulary-map export (the d2t/t2d conventions differ between trainers: SpecForge saves "
        "offsets, some converters ids)", "d2t_mapping", tensors=_d2t_plus1),
    "zero-norm": PlantedFault(
        "midlayer.hidden_norm.weight all zeros", "a parameter an FSDP/ZeRO-3 export never gathered (saved as its "
        "empty local shard or its init): nothing trained is left to serve, so re-export", "draft_field", servable=False,
        tensors=_zero_norm),
    "initializer-range": PlantedFault(
        "initializer_range 0.5 in the draft's config", "a config field copied from another run; no engine reads it "
        "when loading trained weights: nothing is wrong", None,
        config=lambda c: {**c, "initializer_range": 0.5}),
    "use-cache-false": PlantedFault(
        "use_cache false in the draft's config", "saved by a trainer with gradient checkpointing on; the engines "
        "keep their own KV cache whatever it says: nothing is wrong", None, config=lambda c: {**c, "use_cache": False}),
}


def plant(name: str, src: Path, dst: Path) -> Path:
    """A copy of the draft ``src`` at ``dst`` with the fault ``name`` planted (the weights rewritten by safetensors,
    the config by JSON); returns ``dst``."""
    fault = PLANTED[name]
    shutil.copytree(src, dst)
    if fault.tensors is not None:
        from safetensors.torch import load_file, save_file

        for path in sorted(dst.glob("*.safetensors")):
            weights = {k: v.clone() for k, v in load_file(str(path)).items()}
            save_file(fault.tensors(weights), str(path), metadata={"format": "pt"})
    if fault.config is not None:
        config = json.loads((dst / "config.json").read_text())
        (dst / "config.json").write_text(json.dumps(fault.config(config), indent=2))
    return dst


def serving(inventory: Inventory, draft: Path) -> Inventory:
    """``inventory`` with its lab host serving ``draft``: the ``draft`` var and the candidate flags' draft path
    (SGLang's ``speculative-draft-model-path``, vLLM's ``speculative-config`` model)."""
    host = inventory.hosts["lab"]
    flags = dict(host.vars.get("candidate_flags") or {})
    if "speculative-config" in flags:
        flags["speculative-config"] = {**flags["speculative-config"], "model": str(draft)}
    else:
        flags["speculative-draft-model-path"] = str(draft)
    variables = {**host.vars, "draft": str(draft), "candidate_flags": flags,
                 "scenario_title": f"planted in a copy of the healthy draft: {draft.name}"}
    return inventory.model_copy(update={"hosts": {**inventory.hosts, "lab": host.model_copy(update={"vars": variables})}})


def write_inventory(inventory: Inventory, path: Path) -> Path:
    """The inventory as the YAML file a user passes with ``-i``."""
    hosts = {name: spec.model_dump(mode="json", exclude_none=True, exclude={"name"})
             for name, spec in inventory.hosts.items()}
    with path.open("w", encoding="utf-8") as fh:
        YAML().dump({"hosts": hosts, "default_hosts": "lab"}, fh)
    return path
