"""A real memory cap on a host's probes (tests only): a memory cgroup beside this process's own, and a host
``python`` that runs the probes in it while the engine's server runs outside it.

This is what a GPU full of its server is to the draft test (the weights must fit the memory left), on a CPU host:
the probes (the per-session agent, its warm interpreters and every probe they fork, or a one-shot
``python -m remote_probes...``) may take ``limit`` bytes in all, enforced by the kernel, which kills a process of
the cgroup that goes past it (``oom_kills``); anything else the host's python starts (vLLM's API server and, by
inheritance, its engine processes) leaves the cgroup first. The page cache is charged to whichever process reads a
file first, so libraries the capture server read before the run count outside.

cgroup v1's memory controller, or v2 where this process is in the root cgroup (v2 forbids processes in a cgroup
whose children have controllers); elsewhere ``memory_cgroups()`` says why not.

Public API: ``memory_cgroups() -> tuple[Path, int] | str``, ``probe_memory_cap(limit, python, directory)``
(a context manager giving a ``ProbeMemoryCap``).
"""

from __future__ import annotations

import os
import shlex
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.waiting import wait_until

ROOT = Path("/sys/fs/cgroup")
#: what a probe's python is asked to run: the agent's script, or a one-shot probe module
PROBE_PATTERNS = ('"-u "*/remote_probes/agent/agent.py', '"-m remote_probes."*')


def memory_cgroups() -> tuple[Path, int] | str:
    """This process's own memory cgroup and its version (1, 2), or why a capped one cannot be made beside it."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError as exc:
        return f"no /proc/self/cgroup: {exc}"
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            own = ROOT / "memory" / path.lstrip("/")
            return (own, 1) if os.access(own, os.W_OK) else f"cannot write the memory cgroup {own}"
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and path == "/" and "memory" in (ROOT / "cgroup.controllers").read_text().split():
            return (ROOT, 2) if os.access(ROOT, os.W_OK) else f"cannot write {ROOT}"
    return "no memory cgroup this process can make a child beside itself in (cgroup v1, or v2 from its root)"


@dataclass
class ProbeMemoryCap:
    cgroup: Path
    version: int
    limit: int
    python: Path  # the host's python: set it as the inventory host's `python`

    def _read(self, name: str) -> str:
        return (self.cgroup / name).read_text()

    def _counter(self, name: str, key: str) -> int:
        for line in self._read(name).splitlines():
            k, _, value = line.partition(" ")
            if k == key:
                return int(value)
        return 0

    @property
    def peak(self) -> int:
        """The most the probes held at once (page cache charged to them included)."""
        return int(self._read("memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"))

    @property
    def oom_kills(self) -> int:
        """Processes the kernel killed for going past the limit."""
        return self._counter("memory.oom_control" if self.version == 1 else "memory.events", "oom_kill")

    def pids(self) -> list[int]:
        return [int(p) for p in self._read("cgroup.procs").split()]


@contextmanager
def probe_memory_cap(limit: int, python: Path | str, directory: Path) -> Iterator[ProbeMemoryCap]:
    """A cgroup limited to ``limit`` bytes and a wrapper of ``python`` (in ``directory``) that puts the probes in
    it. On exit every process left in it is killed and the cgroup removed. :raises RuntimeError: no cgroup here."""
    found = memory_cgroups()
    if isinstance(found, str):
        raise RuntimeError(found)
    own, version = found
    cgroup = own / f"orch-probe-cap-{os.getpid()}-{time.monotonic_ns()}"
    cgroup.mkdir()
    try:
        (cgroup / ("memory.limit_in_bytes" if version == 1 else "memory.max")).write_text(str(limit))
        if version == 1:  # no swap to spill into: past the limit is past the limit
            swap = cgroup / "memory.memsw.limit_in_bytes"
            if swap.exists():
                swap.write_text(str(limit))
        else:
            (cgroup / "memory.swap.max").write_text("0")
        wrapper = directory / "python"
        wrapper.write_text(
            "#!/bin/sh\n# the probes run in the capped cgroup; anything else (the engine's server) outside it\n"
            f'case "$1 $2" in\n  {"|".join(PROBE_PATTERNS)}) echo $$ > {shlex.quote(str(cgroup / "cgroup.procs"))} ;;\n'
            f'  *) echo $$ > {shlex.quote(str(own / "cgroup.procs"))} ;;\nesac\n'
            f'exec {shlex.quote(str(python))} "$@"\n')
        wrapper.chmod(0o755)
        yield ProbeMemoryCap(cgroup, version, limit, wrapper)
    finally:
        _empty(cgroup)


def _empty(cgroup: Path) -> None:
    """Kill what is left in ``cgroup`` (a session's agent ends with the session: normally nothing), wait until the
    kernel has reaped it, and remove the cgroup."""
    procs = cgroup / "cgroup.procs"

    def left() -> list[int]:
        return [int(p) for p in procs.read_text().split()]

    for pid in left():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if not wait_until(lambda: not left(), timeout=30):
        raise RuntimeError(f"processes {left()} outlived SIGKILL in {cgroup}")
    cgroup.rmdir()
