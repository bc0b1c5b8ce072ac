"""How the variables a template sees are layered, lowest first:

playbook ``vars`` (defaults) < inventory vars (all < group < host) < results and ``set`` values
(shared by every host) < this host's own registered results < ``-e`` extra vars < built-ins.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from orchestrator.inventory import Inventory
from orchestrator.playbook.models import Playbook
from orchestrator.verdicts.in_templates import TEMPLATE_FUNCTIONS


@dataclass
class VariableState:
    playbook: Playbook
    inventory: Inventory
    extra: dict[str, Any] = field(default_factory=dict)
    secrets: dict[str, Any] = field(default_factory=dict)
    shared: dict[str, Any] = field(default_factory=dict)  # registered results, `set` values
    per_host: dict[str, dict[str, Any]] = field(default_factory=dict)
    session: dict[str, Any] = field(default_factory=dict)
    # What does not change during a session, built on first use instead of on every lookup (a step looks its
    # variables up several times): the orchestrator's environment (copying os.environ decodes every entry), and
    # each inventory host's merged vars, kept with the inventory they came from.
    _environ: dict[str, str] | None = field(default=None, init=False, repr=False)
    _host_vars: tuple[Inventory, dict[str, dict[str, Any]]] | None = field(default=None, init=False, repr=False)

    def _inventory_vars(self) -> dict[str, dict[str, Any]]:
        if self._host_vars is None or self._host_vars[0] is not self.inventory:
            self._host_vars = (self.inventory, {h: self.inventory.host_vars(h) for h in self.inventory.hosts})
        return self._host_vars[1]

    def for_host(self, host: str | None) -> dict[str, Any]:
        """Every variable a template on ``host`` sees (None: the controller), as a new dict the caller may keep."""
        if self._environ is None:
            self._environ = dict(os.environ)
        inventory_vars = self._inventory_vars()
        merged: dict[str, Any] = dict(self.playbook.vars)
        merged.update(self.secrets)
        if host is not None:
            merged.update(inventory_vars[host] if host in inventory_vars else self.inventory.host_vars(host))
        merged.update(self.shared)
        if host is not None:
            merged.update(self.per_host.get(host, {}))
        merged.update(self.extra)
        spec = self.inventory.host(host) if host and (host in self.inventory.hosts or host == "localhost") else None
        merged.update(
            inventory_hostname=host,
            host={"name": host, "python": spec.python if spec else "python3", "transport": spec.kind if spec else None},
            env=dict(self._environ),
            session=self.session,
            playbook={"name": self.playbook.name, "path": self.playbook.path},
            hostvars={h: dict(v) for h, v in inventory_vars.items()},
            **TEMPLATE_FUNCTIONS,
        )
        return merged

    def register(self, name: str, host_results: dict[str, dict[str, Any]]) -> None:
        """Record a step's result: per host, and shared (the single result, or an aggregate)."""
        for host, result in host_results.items():
            self.per_host.setdefault(host, {})[name] = result
        if len(host_results) == 1:
            self.shared[name] = next(iter(host_results.values()))
        else:
            results = list(host_results.values())
            self.shared[name] = {
                "results": results,
                "hosts": host_results,
                "failed": any(r.get("failed") for r in results),
                "status": "ok" if all(r.get("status") == "ok" for r in results) else "failed",
            }
