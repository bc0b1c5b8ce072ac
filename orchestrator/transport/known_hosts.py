"""Host-key trust: resolving where a host really is, reading and writing OpenSSH known_hosts files.

Verification is strict: a host whose key is not recorded is refused, never trusted on first use.
``orchestrator hosts trust HOST`` is the one way in — it shows the fingerprint and writes the entry
only when the user agrees. This module holds that logic so the CLI stays a thin shell over it.
"""

from __future__ import annotations

import asyncio
import base64
import getpass
import hashlib
import hmac
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

from orchestrator.errors import HostKeyError, HostUnreachable
from orchestrator.inventory import HostSpec

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


@dataclass
class Target:
    """Where a host name leads once ``~/.ssh/config`` has been applied."""

    name: str  # the inventory name or alias the user typed
    host: str  # the Hostname after ssh_config
    port: int
    user: str
    known_hosts: Path  # the file we check and record into

    @property
    def pattern(self) -> str:
        """The known_hosts host field OpenSSH and asyncssh both match: ``host`` or ``[host]:port``."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    def __str__(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"


def connect_kwargs(spec: HostSpec) -> dict[str, Any]:
    """asyncssh connect options for a host; anything unset is left to ssh_config / asyncssh defaults."""
    kwargs: dict[str, Any] = {
        "connect_timeout": spec.connect_timeout,
        "login_timeout": spec.connect_timeout,
        "keepalive_interval": spec.keepalive_interval,
        "keepalive_count_max": 3,
    }
    if spec.user:
        kwargs["username"] = spec.user
    if spec.key:
        kwargs["client_keys"] = [os.path.expanduser(spec.key)]
    if spec.known_hosts:
        path = Path(spec.known_hosts).expanduser()
        # A missing file means "nothing trusted yet" (strict), not "checking off".
        kwargs["known_hosts"] = str(path) if path.is_file() else b""
    if spec.ssh_config:
        kwargs["config"] = [os.path.expanduser(spec.ssh_config)]
    return kwargs


def target_address(spec: HostSpec) -> tuple[str, int | tuple[()]]:
    """Host and port to hand to asyncssh: the address (or the name, which may be an ssh_config alias)."""
    return spec.address or spec.name, spec.port if spec.port else ()


async def resolve_target(spec: HostSpec) -> Target:
    """Apply ssh_config (Hostname, Port, User, UserKnownHostsFile) the way asyncssh will when connecting."""
    host, port = target_address(spec)
    kwargs = {k: v for k, v in connect_kwargs(spec).items() if k in ("username", "config", "known_hosts")}
    try:
        options = await asyncssh.SSHClientConnectionOptions.construct(host=host, port=port, **kwargs)
    except (OSError, ValueError, asyncssh.Error) as exc:
        raise HostUnreachable(f"{spec.name}: cannot read the SSH settings: {exc}") from None
    return Target(
        name=spec.name, host=options.host or host, port=int(options.port or 22),
        user=str(options.username or getpass.getuser()), known_hosts=known_hosts_file(spec, options.known_hosts),
    )


def known_hosts_file(spec: HostSpec, configured: Any = None) -> Path:
    """The file to check and record into: the inventory's, else ssh_config's UserKnownHostsFile, else ~/.ssh."""
    if spec.known_hosts:
        return Path(spec.known_hosts).expanduser()
    if isinstance(configured, (list, tuple)) and configured and isinstance(configured[0], str):
        return Path(configured[0]).expanduser()
    return Path(DEFAULT_KNOWN_HOSTS).expanduser()


def _host_field_matches(field: str, pattern: str) -> bool:
    if field.startswith("|1|"):  # hashed entry: |1|base64(salt)|base64(hmac-sha1(salt, host))
        try:
            _, _, salt, digest = field.split("|", 3)
            mac = hmac.new(base64.b64decode(salt), pattern.encode(), hashlib.sha1).digest()
            return hmac.compare_digest(mac, base64.b64decode(digest))
        except (ValueError, TypeError):
            return False
    return pattern in field.split(",")


def recorded_keys(path: Path, pattern: str) -> list[asyncssh.SSHKey]:
    """Keys recorded for exactly this host pattern (plain or hashed lines; markers like @revoked skipped)."""
    if not path.is_file():
        return []
    keys = []
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split()
        if len(parts) < 3 or line.lstrip().startswith(("#", "@")):
            continue
        if _host_field_matches(parts[0], pattern):
            try:
                keys.append(asyncssh.import_public_key(f"{parts[1]} {parts[2]}"))
            except (asyncssh.KeyImportError, ValueError):
                continue
    return keys


def fingerprint(key: asyncssh.SSHKey) -> str:
    return key.get_fingerprint("sha256")


def record_key(path: Path, pattern: str, key: asyncssh.SSHKey) -> None:
    """Write ``pattern keytype base64`` to the file, replacing older lines for the same pattern."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    kept: list[str] = []
    if path.is_file():
        for line in path.read_text(errors="replace").splitlines():
            parts = line.split()
            if parts and not line.lstrip().startswith(("#", "@")) and _host_field_matches(parts[0], pattern):
                continue
            kept.append(line)
    public = key.export_public_key("openssh").decode().split()
    kept.append(f"{pattern} {public[0]} {public[1]}")
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write("\n".join(kept) + "\n")
    os.replace(tmp, path)


async def fetch_host_key(spec: HostSpec) -> tuple[Target, asyncssh.SSHKey]:
    """Connect just far enough to read the server's host key (no authentication, nothing trusted)."""
    target = await resolve_target(spec)
    host, port = target_address(spec)
    kwargs: dict[str, Any] = {}
    if spec.ssh_config:
        kwargs["config"] = [os.path.expanduser(spec.ssh_config)]
    try:
        key = await asyncio.wait_for(asyncssh.get_server_host_key(host, port, **kwargs), spec.connect_timeout)
    except (OSError, TimeoutError, asyncssh.Error) as exc:
        raise HostUnreachable(f"{spec.name}: cannot reach {target.host}:{target.port}: {exc or type(exc).__name__}") from None
    if key is None:
        raise HostUnreachable(f"{spec.name}: {target.host}:{target.port} presented no host key")
    return target, key


def refusal(spec: HostSpec, target: Target, detail: str) -> HostKeyError:
    """The error for a key asyncssh refused: says whether it is unknown or changed, and what to do."""
    known = recorded_keys(target.known_hosts, target.pattern)
    trust = f"orchestrator hosts trust {spec.name}"
    if known:
        return HostKeyError(
            f"{spec.name}: the host key of {target.host}:{target.port} does not match the one recorded in "
            f"{target.known_hosts} ({', '.join(fingerprint(k) for k in known)}). It CHANGED: the server was "
            f"reinstalled, or someone is intercepting the connection. If you expected this, check the new "
            f"fingerprint with the server's admin and run `{trust}` to replace the entry. ({detail})"
        )
    return HostKeyError(
        f"{spec.name}: the host key of {target.host}:{target.port} is not known (not in {target.known_hosts}). "
        f"Run `{trust}` to see its fingerprint and record it after checking it. ({detail})"
    )
