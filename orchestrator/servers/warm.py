"""Warm starts: a process the manager keeps per host and environment that starts an engine's servers by fork
(the lab's: orchestrator/lab/stand_in/warm_start.py; servers/lab.py asks for it). The constants here are the
protocol both sides share; the manager (servers/manager.py) starts, reuses and stops the warm interpreter.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: tells a server where its warm interpreter listens: "NAME:PID", NAME a Unix socket in the abstract namespace
#: (no file: nothing is left behind whatever kills it, and no path length limit from a deep workdir); the warm
#: interpreter serves only its own user (SO_PEERCRED)
ENV_VAR = "ORCHESTRATOR_LAB_WARM_START"
#: a server's log says in a line with this prefix whether it was forked warm or started cold, and why
LOG_PREFIX = "warm start:"


@dataclass(frozen=True)
class WarmStart:
    """How to start an engine's warm interpreter: ``program`` + the socket path + ``modules`` (imported once;
    a trailing ``?``: optional)."""

    program: tuple[str, ...]
    modules: tuple[str, ...]

    def argv(self, socket_name: str) -> list[str]:
        return [*self.program, socket_name, *self.modules]


def warm_starts_enabled() -> bool:
    """``ORCHESTRATOR_WARM_STARTS=0`` turns off both warm starts: the lab's servers start as their own processes,
    and a session does not warm its torch probes' zygote before their first call (bench/flagship_warm_starts.py
    compares the two)."""
    return os.environ.get("ORCHESTRATOR_WARM_STARTS", "1") != "0"


def said_in_log(log_text: str) -> str | None:
    """What the server's log said about its start (``forked from the warm interpreter ...`` or why it started
    cold), None when it said nothing (no warm interpreter was offered)."""
    for line in log_text.splitlines():
        at = line.find(LOG_PREFIX)
        if at >= 0:
            return line[at + len(LOG_PREFIX):].strip()
    return None
