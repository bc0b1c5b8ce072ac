"""Engine adapters by name (the per-session ServerManager is built with the other services: engine/services.py)."""

from __future__ import annotations

import importlib

from orchestrator.engines.base import EngineAdapter
from orchestrator.errors import UserInputError

# name -> "module:Class"; a vLLM adapter is one more line (see engines/sglang.py for what it overrides).
ADAPTERS: dict[str, str] = {
    "sglang": "orchestrator.engines.sglang:SglangAdapter",
    "lab": "orchestrator.engines.lab:LabAdapter",
}


def get_adapter(name: str) -> EngineAdapter:
    """:raises UserInputError: for an unknown engine name."""
    target = ADAPTERS.get(name)
    if target is None:
        raise UserInputError(f"unknown engine {name!r} (known: {', '.join(sorted(ADAPTERS))})")
    module_name, class_name = target.split(":")
    adapter: EngineAdapter = getattr(importlib.import_module(module_name), class_name)()  # ADAPTERS name adapters
    return adapter
