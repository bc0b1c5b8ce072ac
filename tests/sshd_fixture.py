"""A real OpenSSH sshd on loopback, for tests and benchmarks.

One sshd listens on several loopback addresses (127.0.0.2, .3, ...) on one free port, so each
address acts as a separate host. Host and client keys are generated per run in a temporary
directory; only 127.0.0.0/8 is ever contacted, or, with ``netns=``, the addresses of a network
namespace the caller made (tests/netns.py), where sshd then runs.

Use from any test directory: ``from sshd_fixture import sshd_server`` (put ``tests/`` on sys.path, as
tests/ssh/conftest.py does), or call ``start_sshd(directory)`` directly (the benchmark does).
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh
import pytest

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def sshd_missing_reason() -> str | None:
    if not os.path.exists(SSHD):
        return f"OpenSSH sshd not found at {SSHD} (apt-get install openssh-server)"
    return None


def free_port(address: str = "127.0.0.2") -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def _write_key(path: Path, key: asyncssh.SSHKey) -> None:
    path.write_bytes(key.export_private_key("openssh"))
    path.chmod(0o600)
    path.with_name(path.name + ".pub").write_bytes(key.export_public_key("openssh"))


@dataclass
class SshdServer:
    directory: Path
    port: int
    addresses: list[str]
    host_key: asyncssh.SSHKey
    client_key_path: Path
    known_hosts: Path
    ssh_config: Path  # an empty client config, so the user's ~/.ssh/config never leaks into tests
    user: str = field(default_factory=getpass.getuser)
    process: subprocess.Popen[bytes] | None = None
    config_path: Path | None = None
    netns: str | None = None  # the network namespace sshd runs in (its addresses are that namespace's)
    # sshd listens on at most 16 sockets: more addresses are served by extra sshd processes, same port
    extra_configs: list[Path] = field(default_factory=list)
    extra_processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def trust(self, address: str, port: int) -> None:
        """Accept this server's host key at another address (a proxy in front of it)."""
        public = self.host_key.export_public_key("openssh").decode().split()
        with self.known_hosts.open("a") as known:
            known.write(f"[{address}]:{port} {public[0]} {public[1]}\n")

    @property
    def down_address(self) -> str:
        """A loopback address on which nothing listens (a host that is down)."""
        last = int(self.addresses[-1].rsplit(".", 1)[1])
        return f"127.0.0.{last + 1}"

    def host_spec(self, name: str, address: str | None = None, **extra: object) -> dict[str, object]:
        """Inventory fields for one of the addresses (a dict, so callers can build HostSpec or YAML)."""
        spec: dict[str, object] = {
            "transport": "ssh", "address": address or self.addresses[0], "port": self.port, "user": self.user,
            "key": str(self.client_key_path), "known_hosts": str(self.known_hosts),
            "ssh_config": str(self.ssh_config), "state_dir": str(self.directory / "state"), "connect_timeout": 5.0,
        }
        spec.update(extra)
        spec["name"] = name
        return spec

    def start(self) -> None:
        assert self.config_path is not None
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege-separation dir sshd insists on
        log = open(self.directory / "sshd.log", "ab")  # noqa: SIM115 - lives as long as the process
        # `ip netns exec` execs sshd in the namespace: the PID we hold is sshd's own
        inside = ["ip", "netns", "exec", self.netns] if self.netns else []
        self.process = subprocess.Popen([*inside, SSHD, "-D", "-e", "-f", str(self.config_path)], stdout=log,
                                        stderr=log, stdin=subprocess.DEVNULL)
        self.extra_processes = [
            subprocess.Popen([*inside, SSHD, "-D", "-e", "-f", str(c)], stdout=log, stderr=log,
                             stdin=subprocess.DEVNULL)
            for c in self.extra_configs
        ]
        deadline = time.monotonic() + 10
        for address in self.addresses:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"sshd exited: {(self.directory / 'sshd.log').read_text()[-2000:]}")
                try:
                    with socket.create_connection((address, self.port), timeout=0.5):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"sshd did not listen on {address}:{self.port}") from None
                    time.sleep(0.02)

    def descendants(self) -> list[int]:
        """PIDs below the listening sshd (per-connection sshd processes and the shells they run)."""
        if self.process is None:
            return []
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
        found, todo = [], [self.process.pid]
        while todo:
            for child in children.get(todo.pop(), []):
                found.append(child)
                todo.append(child)
        return found

    def kill_hard(self) -> None:
        """SIGKILL the listener and every per-connection sshd: to clients it looks like the host died.

        The user's shells are left alone on purpose: whatever survives is an orphan we must not leave.
        """
        sshd_pids = [p for p in self.descendants() if _comm(p) == "sshd" or _comm(p).startswith("sshd")]
        if self.process is not None:
            sshd_pids.append(self.process.pid)
        for pid in sshd_pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.process is not None:
            self.process.wait(timeout=10)

    def stop(self) -> None:
        for extra in self.extra_processes:
            extra.terminate()
            extra.wait(timeout=10)
        self.extra_processes = []
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process = None


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def start_sshd(directory: Path, *, hosts: int = 4, port: int | None = None, max_sessions: int = 100,
               addresses: list[str] | None = None, netns: str | None = None) -> SshdServer:
    """Generate keys and config in ``directory`` and start sshd on 127.0.0.2 .. 127.0.0.(1+hosts).

    ``max_sessions=10`` gives OpenSSH's default channel limit, the one real servers have. ``netns`` runs sshd
    in that network namespace, listening on ``addresses`` (which must be the namespace's own).
    """
    directory.mkdir(parents=True, exist_ok=True)
    if addresses is None:
        addresses = [f"127.0.0.{2 + i}" for i in range(hosts)]
    port = port or free_port()  # any free one: a namespace has all its ports free
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    _write_key(directory / "ssh_host_ed25519_key", host_key)
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    _write_key(directory / "id_ed25519", client_key)
    (directory / "authorized_keys").write_bytes(client_key.export_public_key("openssh"))
    public = host_key.export_public_key("openssh").decode().split()
    known = directory / "known_hosts"
    known.write_text("".join(f"[{a}]:{port} {public[0]} {public[1]}\n" for a in addresses))
    (directory / "ssh_config").write_text("# empty on purpose\n")
    configs = []
    for start in range(0, len(addresses), 16):
        config = directory / f"sshd_config{start // 16 or ''}"
        listen = "".join(f"ListenAddress {a}:{port}\n" for a in addresses[start:start + 16])
        _write_sshd_config(config, listen, directory, max_sessions, start)
        configs.append(config)
    server = SshdServer(
        directory=directory, port=port, addresses=addresses, host_key=host_key,
        client_key_path=directory / "id_ed25519", known_hosts=known, ssh_config=directory / "ssh_config",
        config_path=configs[0], extra_configs=configs[1:], netns=netns,
    )
    server.start()
    return server


def _write_sshd_config(config: Path, listen: str, directory: Path, max_sessions: int, index: int) -> None:
    config.write_text(
        f"{listen}HostKey {directory / 'ssh_host_ed25519_key'}\nPidFile {directory / f'sshd{index}.pid'}\n"
        f"AuthorizedKeysFile {directory / 'authorized_keys'}\nStrictModes no\nUsePAM no\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        f"MaxSessions {max_sessions}\nMaxStartups 200:30:400\nSetEnv SHLVL=1\nAllowTcpForwarding yes\n"
        "Subsystem sftp internal-sftp\nLogLevel ERROR\n"
    )


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdServer]:
    """A running sshd on 127.0.0.2-5 shared by the whole test session; skipped when sshd is missing."""
    reason = sshd_missing_reason()
    if reason:
        from tests.realparts import missing  # only when skipping: bench/ imports this file too

        missing(reason)
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    try:
        yield server
    finally:
        server.stop()
