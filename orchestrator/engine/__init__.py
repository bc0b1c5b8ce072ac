"""The engine: runs a playbook against hosts and emits events. It prints nothing."""

from orchestrator.engine.runner import Engine, EngineOptions, SessionOutcome

__all__ = ["Engine", "EngineOptions", "SessionOutcome"]
