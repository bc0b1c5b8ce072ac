"""Host-key trust: resolving where a host really is, reading and writing OpenSSH known_hosts files.

Verification is strict: a host whose key is not recorded is refused, never trusted on first use.
``orchestrator hosts trust HOST`` is the one way in — it shows the fingerprint and writes the entry
only when the user agrees. This module holds that logic so the CLI stays a thin shell over it.

Matching is asyncssh's own (``SSHKnownHosts``): wildcards (``*``, ``?``), negation (``!host``), hashed
hosts (``|1|...``), ``[host]:port`` entries, ``@cert-authority`` and ``@revoked``. There is ONE path:
the files are parsed here, line by line so a bad line is named (file and line), into a
:class:`KnownHosts`; that object is what ``asyncssh.connect`` checks the server against (including
host certificates signed by a ``@cert-authority`` key), and the same object explains a refusal and
answers ``hosts trust``.
"""

from __future__ import annotations

import asyncio
import base64
import getpass
import hashlib
import hmac
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asyncssh.public_key import get_certificate_algs, get_public_key_algs

from orchestrator.errors import HostKeyError, HostUnreachable
from orchestrator.transport.asyncssh_quiet import asyncssh
from orchestrator.transport.spec import ConnectionSpec

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
MARKERS = ("cert-authority", "revoked")


@dataclass
class Target:
    """Where a host name leads once ``~/.ssh/config`` has been applied."""

    name: str  # the inventory name or alias the user typed
    host: str  # the Hostname after ssh_config
    port: int
    user: str
    known_hosts: Path  # the file we record into (the first of ``files``)
    files: list[Path] = field(default_factory=list)  # every file checked (ssh_config may name several)

    def __post_init__(self) -> None:
        if not self.files:
            self.files = [self.known_hosts]

    @property
    def pattern(self) -> str:
        """The known_hosts host field OpenSSH and asyncssh both match: ``host`` or ``[host]:port``."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    def __str__(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"


@dataclass
class HostKeys:
    """What known_hosts says about one host: the result of one asyncssh match."""

    host: str
    addr: str
    port: int | None
    trusted: list[asyncssh.SSHKey]  # plain entries
    authorities: list[asyncssh.SSHKey]  # @cert-authority entries: host certificates they signed are trusted
    revoked: list[asyncssh.SSHKey]  # @revoked entries: refused even when also listed as trusted

    def verdict(self, key: asyncssh.SSHKey) -> str:
        """``revoked``, ``trusted``, ``changed`` (other keys are recorded) or ``unknown``, for a plain key."""
        if key in self.revoked:
            return "revoked"
        if key in self.trusted:
            return "trusted"
        return "changed" if self.trusted or self.authorities else "unknown"


class KnownHosts(asyncssh.SSHKnownHosts):
    """known_hosts files parsed by asyncssh, remembering where each key came from and what was last matched.

    Passed as ``known_hosts=`` to ``asyncssh.connect``, which calls :meth:`match` with the host, the
    peer's address and the port; the result is kept in ``last`` so a refusal can say why.
    """

    def __init__(self, files: Sequence[Path] = ()) -> None:
        super().__init__()
        self.files = list(files)
        self.last: HostKeys | None = None
        self._where: dict[tuple[str | None, asyncssh.SSHKey], list[str]] = {}
        for path in self.files:
            self._load_file(path)

    def _load_file(self, path: Path) -> None:
        try:
            text = path.read_text(errors="replace")
        except FileNotFoundError:
            return  # a missing file means "nothing trusted yet" (strict), not "checking off"
        except OSError as exc:
            raise HostKeyError(f"cannot read the known_hosts file {path}: {exc.strerror or exc}",
                               title="Invalid known_hosts file") from None
        for number, line in enumerate(text.splitlines(), 1):
            self._load_line(path, number, line.strip())

    def _load_line(self, path: Path, number: int, line: str) -> None:
        if not line or line.startswith("#"):
            return
        where = f"{path}:{number}"

        def bad(problem: str) -> HostKeyError:
            return HostKeyError(
                f"{where}: {problem}. A known_hosts line is `[@cert-authority|@revoked] HOSTS KEYTYPE BASE64 "
                f"[COMMENT]`; fix or delete the line (`orchestrator hosts trust HOST` writes correct ones).\n"
                f"  {line[:200]}", title="Invalid known_hosts file",
            )

        fields = line.split()
        marker = fields[0][1:] if fields[0].startswith("@") else None
        if marker is not None and marker not in MARKERS:
            raise bad(f"unknown marker @{marker} (OpenSSH knows @cert-authority and @revoked)")
        rest = fields[1:] if marker is not None else fields
        if len(rest) < 2:
            raise bad("no key after the host names" if rest else "no host names and no key")
        keytype = rest[1]
        if keytype.startswith("x509v3-"):
            pass  # X.509 certificates and subject names: asyncssh's own format, left to it
        elif keytype.encode() in get_certificate_algs():
            raise bad("this is a host certificate, not a key; to trust host certificates, record the key of the "
                      "CA that signs them as `@cert-authority HOSTS KEYTYPE BASE64`")
        elif keytype.encode() not in get_public_key_algs():
            return  # a key type this asyncssh does not know: never offered by a server we talk to (OpenSSH skips these too)
        elif len(rest) < 3:
            raise bad(f"no base64 key data after {keytype}")
        else:
            try:
                key = asyncssh.import_public_key(f"{rest[1]} {rest[2]}")
            except (asyncssh.KeyImportError, ValueError) as exc:
                raise bad(f"the {keytype} key does not parse ({exc})") from None
            if key.get_algorithm() != keytype:
                raise bad(f"the key type says {keytype} but the key data is {key.get_algorithm()}")
            self._where.setdefault((marker, key), []).append(where)
        try:
            self.load(line)
        except ValueError as exc:  # bad hashed host (|1|salt|hash), bad pattern
            raise bad(str(exc).rstrip(".")) from None

    def match(self, host: str, addr: str, port: int | None) -> Any:
        """asyncssh's match, with hostnames lowercased (as OpenSSH does) and no @revoked entry lost.

        asyncssh retries a non-22 port without the port when ``[host]:port`` trusts nothing; its
        retry then drops the revoked keys found for ``[host]:port``. Those are kept here.
        """
        host = host.lower()
        trusted, authorities, revoked, *x509 = super().match(host, addr, port)
        revoked = list(revoked)
        if port:
            revoked += [k for k in self._match(host, addr, port)[2] if k not in revoked]
        self.last = HostKeys(host, addr, port, _unique(trusted), _unique(authorities), _unique(revoked))
        return (trusted, authorities, revoked, *x509)

    def lookup(self, host: str, port: int, addr: str = "") -> HostKeys:
        """What the files say about ``host`` (and ``addr``, when known) on ``port``."""
        if not addr:
            try:
                addr = str(ipaddress.ip_address(host))
            except ValueError:
                addr = ""
        self.match(host, addr, port if port != 22 else None)
        assert self.last is not None
        return self.last

    def where(self, key: asyncssh.SSHKey, marker: str | None = None) -> list[str]:
        """``file:line`` of each entry of ``key`` under ``marker`` (None: plain entries)."""
        return list(self._where.get((marker, key), []))


def _unique(keys: Sequence[asyncssh.SSHKey]) -> list[asyncssh.SSHKey]:
    """Keys once each (asyncssh lists a key twice when both the name and the address match)."""
    return list(dict.fromkeys(keys))


def load_known_hosts(files: Sequence[Path]) -> KnownHosts:
    """Parse the files (missing ones are empty). Raises HostKeyError naming the file and line of a bad entry."""
    return KnownHosts(files)


def connect_kwargs(spec: ConnectionSpec) -> dict[str, Any]:
    """asyncssh connect options for a host; anything unset is left to ssh_config / asyncssh defaults.

    ``known_hosts`` is not among them: the transport passes the :class:`KnownHosts` it loaded.
    """
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
    if spec.ssh_config:
        kwargs["config"] = [os.path.expanduser(spec.ssh_config)]
    return kwargs


def target_address(spec: ConnectionSpec) -> tuple[str, int | tuple[()]]:
    """Host and port to hand to asyncssh: the address (or the name, which may be an ssh_config alias)."""
    return spec.address or spec.name, spec.port if spec.port else ()


async def resolve_target(spec: ConnectionSpec) -> Target:
    """Apply ssh_config (Hostname, Port, User, UserKnownHostsFile) the way asyncssh will when connecting."""
    host, port = target_address(spec)
    kwargs = {k: v for k, v in connect_kwargs(spec).items() if k in ("username", "config")}
    try:
        options = await asyncssh.SSHClientConnectionOptions.construct(host=host, port=port, **kwargs)
    except (OSError, ValueError, asyncssh.Error) as exc:
        raise HostUnreachable(f"{spec.name}: cannot read the SSH settings: {exc}") from None
    files = known_hosts_files(spec, options.known_hosts)
    return Target(
        name=spec.name, host=options.host or host, port=int(options.port or 22),
        user=str(options.username or getpass.getuser()), known_hosts=files[0], files=files,
    )


def known_hosts_files(spec: ConnectionSpec, configured: Any = None) -> list[Path]:
    """The files to check, the first also the one to record into: the inventory's, else ssh_config's
    UserKnownHostsFile (+ GlobalKnownHostsFile), else ~/.ssh/known_hosts.

    ``UserKnownHostsFile none`` does not turn checking off here (asyncssh alone would): the default file is used.
    """
    if spec.known_hosts:
        return [Path(spec.known_hosts).expanduser()]
    if isinstance(configured, (list, tuple)) and configured and all(isinstance(c, str) for c in configured):
        return [Path(c).expanduser() for c in configured]
    return [Path(DEFAULT_KNOWN_HOSTS).expanduser()]


def _hashed_host_is(field: str, pattern: str) -> bool:
    """Whether a hashed host field ``|1|salt|hmac`` hashes ``pattern`` (used to replace our own entries)."""
    try:
        _, _, salt, digest = field.split("|", 3)
        mac = hmac.new(base64.b64decode(salt), pattern.encode(), hashlib.sha1).digest()
        return hmac.compare_digest(mac, base64.b64decode(digest))
    except (ValueError, TypeError):
        return False


def _is_entry_for(line: str, pattern: str) -> bool:
    """A plain (unmarked, non-wildcard) line recorded for exactly ``pattern``: what ``record_key`` replaces.

    Marked lines (@revoked, @cert-authority) and wildcard or negated patterns are the user's policy: kept.
    """
    parts = line.split()
    if not parts or line.lstrip().startswith(("#", "@")):
        return False
    if parts[0].startswith("|"):
        return _hashed_host_is(parts[0], pattern)
    names = parts[0].split(",")
    return pattern in names and not any(c in parts[0] for c in "*?!")


def recorded_keys(path: Path, pattern: str) -> list[asyncssh.SSHKey]:
    """Keys trusted for this host pattern in ``path`` (asyncssh's matching, @revoked ones left out)."""
    found = load_known_hosts([path]).lookup(*_split_pattern(pattern))
    return [k for k in found.trusted if k not in found.revoked]


def _split_pattern(pattern: str) -> tuple[str, int]:
    if pattern.startswith("[") and "]:" in pattern:
        host, port = pattern[1:].rsplit("]:", 1)
        return host, int(port)
    return pattern, 22


def fingerprint(key: asyncssh.SSHKey) -> str:
    return key.get_fingerprint("sha256")


def record_key(path: Path, pattern: str, key: asyncssh.SSHKey) -> None:
    """Write ``pattern keytype base64`` to the file, replacing older plain lines for the same pattern."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    kept: list[str] = []
    if path.is_file():
        kept = [line for line in path.read_text(errors="replace").splitlines() if not _is_entry_for(line, pattern)]
    public = key.export_public_key("openssh").decode().split()
    kept.append(f"{pattern} {public[0]} {public[1]}")
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write("\n".join(kept) + "\n")
    os.replace(tmp, path)


async def fetch_host_key(spec: ConnectionSpec) -> tuple[Target, asyncssh.SSHKey]:
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


def _prints(keys: Sequence[asyncssh.SSHKey]) -> str:
    return ", ".join(fingerprint(k) for k in keys)


def _places(known: KnownHosts, keys: Sequence[asyncssh.SSHKey], marker: str | None) -> str:
    places = [w for k in keys for w in known.where(k, marker)]
    return ", ".join(places) if places else "the known_hosts files"


def revoked_message(spec: ConnectionSpec, target: Target, known: KnownHosts, keys: Sequence[asyncssh.SSHKey],
                    what: str = "host key", refusing: str = "Refusing to connect") -> str:
    return (
        f"{spec.name}: the {what} of {target.host}:{target.port} is REVOKED: it is listed under @revoked in "
        f"{_places(known, keys, 'revoked')} ({_prints(keys)}). {refusing}, even where the same key is "
        f"also listed as trusted. The server must get a new key; remove the @revoked line only if it was "
        f"written by mistake."
    )


def refusal(spec: ConnectionSpec, target: Target, detail: str, known: KnownHosts | None = None) -> HostKeyError:
    """The error for a key asyncssh refused: says whether it is revoked, changed or unknown, and what to do."""
    if known is None:
        known = load_known_hosts(target.files)
    found = known.last if known.last is not None else known.lookup(target.host, target.port)
    trust = f"orchestrator hosts trust {spec.name}"
    files = ", ".join(str(f) for f in target.files)
    if "revoked" in detail.lower():
        what = "certificate authority that signed its host certificate" if "CA key" in detail else "host key"
        return HostKeyError(f"{revoked_message(spec, target, known, found.revoked, what)} ({detail})",
                            title="Host key revoked")
    if found.trusted or found.authorities:
        recorded = []
        if found.trusted:
            recorded.append(f"host key {_prints(found.trusted)} at {_places(known, found.trusted, None)}")
        if found.authorities:
            recorded.append(f"@cert-authority {_prints(found.authorities)} at "
                            f"{_places(known, found.authorities, 'cert-authority')}")
        return HostKeyError(
            f"{spec.name}: the host key of {target.host}:{target.port} does not match what is recorded in "
            f"{files} ({'; '.join(recorded)}). It CHANGED: the server was reinstalled, or someone is "
            f"intercepting the connection. If you expected this, check the new fingerprint with the server's "
            f"admin and run `{trust}` to replace the entry. ({detail})"
        )
    return HostKeyError(
        f"{spec.name}: the host key of {target.host}:{target.port} is not known (not in {files}). "
        f"Run `{trust}` to see its fingerprint and record it after checking it. ({detail})"
    )
