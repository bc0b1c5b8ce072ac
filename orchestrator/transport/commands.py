"""What a transport runs and what comes back: the command type, output capture, a run's result, the handle of a
detached process group, and the shell pieces (TERM -> KILL, quoting, env exports) every transport and the agent
share. Apart from ``base`` so the agent (which the base builds on) imports these without a cycle."""

from __future__ import annotations

import json
import shlex
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from orchestrator.errors import TransportError
from orchestrator.events import OutputStream

Command = str | Sequence[str]
"""A shell script (run by ``bash -c``) or an argv list (quoted with ``shlex.join``; no shell)."""

OutputCallback = Callable[[OutputStream, str], None]
"""Called with ``(stream, text)`` for each chunk of output as it arrives; stream is stdout|stderr."""

# Captured output kept in memory per stream; the session log keeps the full text on disk.
MAX_CAPTURE = 4 * 1024 * 1024


class OutputCapture:
    """One stream of a command, for both transports: forwards each chunk to the callback and keeps at most
    MAX_CAPTURE characters."""

    def __init__(self, name: OutputStream, on_output: OutputCallback | None) -> None:
        self.name = name
        self.on_output = on_output
        self.parts: list[str] = []
        self.size = 0
        self.truncated = False

    def feed(self, text: str) -> None:
        if self.on_output is not None:
            self.on_output(self.name, text)
        if self.size < MAX_CAPTURE:
            self.parts.append(text)
            self.size += len(text)
        else:
            self.truncated = True

    def text(self) -> str:
        return "".join(self.parts)


@dataclass
class RunResult:
    exit_code: int | None
    stdout: str
    stderr: str
    duration: float
    truncated: bool = False
    #: a probe the agent ran in its own process answers with the probe protocol's document itself (what the result
    #: markers on stdout would carry), not with stdout to parse; ``stdout`` is then empty and ``exit_code`` 0
    document: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass
class ProcessHandle:
    """A detached process group we started and must be able to stop, even from another session."""

    host: str
    name: str
    pid: int
    pgid: int
    log_path: str
    pidfile: str
    exit_file: str
    command: str
    session_id: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ProcessHandle:
        data = json.loads(text)
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


# The one TERM -> KILL sequence for process groups (kill_group, SSH cancel/timeout, the SSH guardian):
# ``term_kill SIG TICKS PGID...`` sends SIG to every group, polls every 0.05 s for up to TICKS ticks, SIGKILLs
# what is left, and returns 0 when every group is gone, 1 otherwise.
TERM_KILL = r"""
term_kill() {
  local sig=$1 ticks=$2 id alive i; shift 2
  for id in "$@"; do kill -"$sig" -- "-$id" 2>/dev/null; done
  for i in $(seq 1 "$ticks"); do
    alive=0; for id in "$@"; do kill -0 -- "-$id" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && return 0; sleep 0.05
  done
  for id in "$@"; do kill -KILL -- "-$id" 2>/dev/null; done
  sleep 0.1
  for id in "$@"; do kill -0 -- "-$id" 2>/dev/null && return 1; done
  return 0
}
"""


def term_kill_script(pgids: Sequence[int] | str, grace: float, *, sig: int = signal.SIGTERM) -> str:
    """A bash script that stops process groups with TERM_KILL; ``pgids`` may be a shell word list such as
    ``"${!live[@]}"``. Refuses PGIDs <= 1 (0 and 1 would signal our own group or every process)."""
    if not isinstance(pgids, str):
        if any(int(p) <= 1 for p in pgids):
            raise TransportError(f"refusing to signal process group(s) {list(pgids)}")
        pgids = " ".join(str(int(p)) for p in pgids)
    ticks = max(1, int(grace / 0.05))
    return f"{TERM_KILL}term_kill {int(sig)} {ticks} {pgids}"


def to_shell(command: Command) -> str:
    """Render a command as one shell string: scripts pass through, argv lists are quoted word by word."""
    if isinstance(command, str):
        return command
    return shlex.join([str(part) for part in command])


def env_prefix(env: Mapping[str, Any] | None) -> str:
    """``export K=V;`` lines, every value quoted (names are validated, values may be anything)."""
    if not env:
        return ""
    parts = []
    for name, value in env.items():
        if not name.isidentifier():
            raise TransportError(f"invalid environment variable name {name!r}")
        parts.append(f"export {name}={shlex.quote(str(value))};")
    return " ".join(parts) + " "
