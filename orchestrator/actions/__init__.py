"""The registry of step kinds. Adding a kind = one module + one line here; the playbook runner never changes."""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

from orchestrator.actions.base import Action, ActionArgs, ActionContext, StepFailed, StepServices

# kind -> "module:Class". Modules must be cheap to import (heavy imports go inside run()).
BUILTIN_ACTIONS: dict[str, str] = {
    "shell": "orchestrator.actions.shell:ShellAction",
    "set": "orchestrator.actions.set_vars:SetAction",
    "server": "orchestrator.actions.server:ServerAction",
    "bench": "orchestrator.actions.bench:BenchAction",
    "sweep": "orchestrator.actions.sweep:SweepAction",
    "tune": "orchestrator.actions.tune:TuneAction",
    "probe": "orchestrator.actions.probe:ProbeAction",
    "read_source": "orchestrator.actions.read_source:ReadSourceAction",
    "draft_test": "orchestrator.actions.draft_test:DraftTestAction",
    "reconcile": "orchestrator.actions.reconcile:ReconcileAction",
    "env_diff": "orchestrator.actions.env_diff:EnvDiffAction",
}


@cache
def registry() -> dict[str, type[Action[Any]]]:
    kinds: dict[str, type[Action[Any]]] = {}
    for kind, target in BUILTIN_ACTIONS.items():
        module_name, class_name = target.split(":")
        cls = getattr(importlib.import_module(module_name), class_name)
        kinds[kind] = cls
    return kinds


def get_action(kind: str) -> type[Action[Any]] | None:
    return registry().get(kind)


__all__ = ["Action", "ActionArgs", "ActionContext", "StepFailed", "StepServices", "registry", "get_action", "BUILTIN_ACTIONS"]
