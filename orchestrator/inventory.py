"""Inventory: which hosts exist, how to reach them, and their variables.

```yaml
hosts:
  gpu1: {address: 10.0.0.5, user: ubuntu, port: 22, key: ~/.ssh/id_ed25519, python: /opt/venv/bin/python}
  gpu2: {}                      # an ~/.ssh/config alias: Hostname/User/Port/IdentityFile/ProxyJump apply
  localhost: {}                 # always the local transport
groups:
  gpu: {hosts: [gpu1, gpu2], vars: {model: /models/kimi}}
vars: {port: 30000}             # for every host
```
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.errors import UserInputError

if TYPE_CHECKING:
    pass

LOCAL_NAMES = {"localhost", "local", "127.0.0.1"}


class HostSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = ""
    transport: Literal["local", "ssh"] | None = None  # default: local for localhost names, else ssh
    address: str | None = None  # default: the name (may be an ~/.ssh/config alias)
    user: str | None = None
    port: int | None = None
    key: str | None = None
    python: str = "python3"
    state_dir: str = "$HOME/.orchestrator"
    known_hosts: str | None = None  # default ~/.ssh/known_hosts (or the ssh_config's UserKnownHostsFile)
    ssh_config: str | None = None  # OpenSSH client config to read; default ~/.ssh/config
    connect_timeout: float = 15.0
    keepalive_interval: float = 15.0
    max_channels: int = Field(default=8, ge=1, le=64)
    agent: bool = True  # probe calls through the per-session remote agent; false: one Python start per call
    env: dict[str, str] = {}  # exported for every command on this host (e.g. PYTHONPATH for the lab)
    vars: dict[str, Any] = {}

    @property
    def kind(self) -> str:
        if self.transport:
            return self.transport
        return "local" if self.name in LOCAL_NAMES else "ssh"


class GroupSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hosts: list[str] = []
    vars: dict[str, Any] = {}


class Inventory(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hosts: dict[str, HostSpec] = {}
    groups: dict[str, GroupSpec] = {}
    vars: dict[str, Any] = {}
    default_hosts: str | list[str] | None = None  # what a playbook without `hosts:` targets
    source: str | None = Field(default=None, exclude=True)

    @field_validator("hosts", mode="before")
    @classmethod
    def _name_hosts(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {name: {**(spec or {}), "name": name} for name, spec in value.items()}
        return value

    def resolve(self, pattern: str | list[str] | None) -> list[str]:
        """Host names for a `hosts:` value: a host, a group, `all`, or a list of those. Unknown -> error."""
        if pattern is None:
            pattern = self.default_hosts or (["localhost"] if not self.hosts else list(self.hosts)[:1])
        items = [pattern] if isinstance(pattern, str) else list(pattern)
        names: list[str] = []
        for item in items:
            for part in [p.strip() for p in item.split(",") if p.strip()]:
                if part == "all":
                    found = list(self.hosts)
                elif part in self.groups:
                    found = self.groups[part].hosts
                elif part in self.hosts or part in LOCAL_NAMES:
                    found = [part]
                else:
                    known = ", ".join(sorted([*self.hosts, *self.groups])) or "none"
                    raise UserInputError(f"unknown host or group {part!r} (inventory has: {known})")
                names.extend(n for n in found if n not in names)
        return names

    def host(self, name: str) -> HostSpec:
        if name in self.hosts:
            return self.hosts[name]
        if name in LOCAL_NAMES:
            return HostSpec(name=name, transport="local")
        raise UserInputError(f"unknown host {name!r}")

    def host_vars(self, name: str) -> dict[str, Any]:
        """Variables for one host: inventory vars < group vars < host vars."""
        merged = dict(self.vars)
        for group in self.groups.values():
            if name in group.hosts:
                merged.update(group.vars)
        if name in self.hosts:
            merged.update(self.hosts[name].vars)
        return merged

    def with_host(self, name: str, **spec: Any) -> Inventory:
        """A copy with one more host (the `--host` one-off)."""
        hosts = dict(self.hosts)
        hosts[name] = HostSpec(name=name, **spec)
        return self.model_copy(update={"hosts": hosts})


def load_inventory(path: str | Path) -> Inventory:
    """Load and validate an inventory file; errors name the file, line and column."""
    from orchestrator.playbook.yamlio import load_yaml, validation_errors

    path = Path(path)
    data, locate = load_yaml(path)
    try:
        inventory = Inventory.model_validate(data or {})
    except Exception as exc:  # pydantic ValidationError -> located messages
        raise validation_errors(exc, locate, str(path)) from None
    for gname, group in inventory.groups.items():
        for h in group.hosts:
            if h not in inventory.hosts and h not in LOCAL_NAMES:
                raise UserInputError(f"{path}: group {gname!r} lists unknown host {h!r}")
    inventory.source = str(path)
    return inventory
