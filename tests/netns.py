"""Hosts behind a real network link: a network namespace per host, joined to this one by a veth pair.

Each :class:`NamespacedHost` is a namespace ``orchnf<N>`` holding one end of a veth pair (``onf<N>n``,
10.231.N.2/30) and an OpenSSH sshd listening there; the other end (``onf<N>h``, 10.231.N.1/30) stays here. Only
those two addresses are ever used, and both exist only while the test holds the pair. ``cut()`` takes the
host-side end down (the route goes with it: packets are dropped, nothing is refused, exactly as when a cable or
a switch port dies), ``restore()`` brings it back.

``N`` is taken by ``ip netns add`` itself, which fails when the name exists: parallel test workers (and other
users of this machine) never share a namespace. Everything is torn down in ``close()``, processes in the
namespace first.

Needs root (CAP_NET_ADMIN) and iproute2; :func:`netns_missing_reason` says why not when it cannot work.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from sshd_fixture import SshdServer, sshd_missing_reason, start_sshd

SUBNET = "10.231"  # 10.231.N.0/30 per host; N in 0..255


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def netns_missing_reason() -> str | None:
    """None when this process may make namespaces and veth pairs; else why not (for the skip message)."""
    reason = sshd_missing_reason()
    if reason:
        return reason
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN): run as root, as CI does"
    probe = f"orchnfprobe{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` is not permitted here: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclass
class NamespacedHost:
    index: int
    sshd: SshdServer | None = None

    @property
    def namespace(self) -> str:
        return f"orchnf{self.index}"

    @property
    def host_side(self) -> str:
        return f"onf{self.index}h"

    @property
    def address(self) -> str:
        """The sshd's address, inside the namespace."""
        return f"{SUBNET}.{self.index}.2"

    @property
    def near_address(self) -> str:
        """This side's end of the pair (where a proxy in front of the host listens)."""
        return f"{SUBNET}.{self.index}.1"

    def cut(self) -> None:
        _ip("link", "set", self.host_side, "down")

    def restore(self) -> None:
        _ip("link", "set", self.host_side, "up")
        # The route comes back with the link; wait until the far side answers again (the peer's carrier).
        deadline = time.monotonic() + 10
        while "LOWER_UP" not in _ip("link", "show", self.host_side).stdout and time.monotonic() < deadline:
            time.sleep(0.05)

    def pids(self) -> list[int]:
        """Processes running in the namespace (sshd and whatever its sessions started)."""
        done = _ip("netns", "pids", self.namespace, check=False)
        return [int(p) for p in done.stdout.split() if p.isdigit()]

    def close(self) -> None:
        if self.sshd is not None:
            self.sshd.stop()
        for pid in self.pids():  # anything a session left: never leave it running
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _ip("link", "del", self.host_side, check=False)  # the peer in the namespace goes with it
        _ip("netns", "del", self.namespace, check=False)


def _claim_index() -> int:
    for index in random.sample(range(256), 256):
        if _ip("netns", "add", f"orchnf{index}", check=False).returncode == 0:
            return index
    raise RuntimeError("no free orchnf<N> namespace name (256 in use?)")


def make_host(directory: Path) -> NamespacedHost:
    """A namespace with a veth pair and a running sshd at ``host.address`` (port ``host.sshd.port``)."""
    host = NamespacedHost(_claim_index())
    try:
        ns, near, far = host.namespace, host.host_side, f"onf{host.index}n"
        _ip("link", "del", near, check=False)  # a pair a killed run left behind
        _ip("link", "add", near, "type", "veth", "peer", "name", far)
        _ip("link", "set", far, "netns", ns)
        _ip("addr", "add", f"{host.near_address}/30", "dev", near)
        _ip("link", "set", near, "up")
        _ip("-n", ns, "addr", "add", f"{host.address}/30", "dev", far)
        _ip("-n", ns, "link", "set", far, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        host.sshd = start_sshd(directory, addresses=[host.address], netns=ns)
    except BaseException:
        host.close()
        raise
    return host
