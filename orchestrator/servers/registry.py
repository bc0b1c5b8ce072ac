"""Engine adapters by name (the per-session ServerManager is built with the other services: session/compose.py)."""

from __future__ import annotations

import importlib
from functools import cache

from orchestrator.errors import UserInputError
from orchestrator.servers.base import EngineAdapter

# name -> "module:Class" (servers/vllm.py says what vLLM overrides)
ADAPTERS: dict[str, str] = {
    "sglang": "orchestrator.servers.sglang:SglangAdapter",
    "vllm": "orchestrator.servers.vllm:VllmAdapter",
    "lab": "orchestrator.servers.lab:LabAdapter",
    "lab-vllm": "orchestrator.servers.lab:LabVllmAdapter",
}


def get_adapter(name: str) -> EngineAdapter:
    """:raises UserInputError: for an unknown engine name."""
    target = ADAPTERS.get(name)
    if target is None:
        raise UserInputError(f"unknown engine {name!r} (known: {', '.join(sorted(ADAPTERS))})")
    module_name, class_name = target.split(":")
    adapter: EngineAdapter = getattr(importlib.import_module(module_name), class_name)()  # ADAPTERS name adapters
    return adapter


@cache
def all_key_flags() -> frozenset[str]:
    """Every engine's API-key flags (flag_key form): a step's flags may name its engine only once rendered, and a
    key is a secret whichever engine it is for."""
    return frozenset(name for engine in ADAPTERS for name in get_adapter(engine).key_flags)
