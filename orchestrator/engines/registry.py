"""Engine adapters by name, and the per-session server service the session runner installs."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from orchestrator.engines.base import EngineAdapter
from orchestrator.errors import UserInputError

if TYPE_CHECKING:
    from orchestrator.engine.runner import Engine
    from orchestrator.engines.manager import ServerManager

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


def attach_servers(engine: Engine) -> ServerManager:
    """Register a ServerManager as ``engine.services["servers"]`` and stop its servers at session end
    (after success, failure or cancel) unless a step said ``keep: true``."""
    from orchestrator.engines.manager import ServerManager

    manager = ServerManager(emit=engine.emit, session_id=engine.options.session_id)
    engine.services["servers"] = manager

    async def stop_servers() -> None:
        await manager.stop_all(include_kept=False)

    engine.finalizers.append(stop_servers)
    return manager


def servers_of(services: dict[str, Any]) -> ServerManager:
    """The session's ServerManager, created on first use when nobody attached one (an engine built by hand)."""
    from orchestrator.engines.manager import ServerManager

    manager: ServerManager | None = services.get("servers")
    if manager is None:
        engine = services.get("engine")
        manager = attach_servers(engine) if engine is not None else ServerManager()
        services["servers"] = manager
    return manager
