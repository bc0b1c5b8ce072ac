"""The engine adapter: everything that differs between inference servers (SGLang, vLLM, the lab).

An adapter is pure: it turns a ``LaunchSpec`` into an argv, says how readiness looks, where the resolved
arguments and speculative-decoding statistics live in the server's answers, and which flag sets are
invalid. It never runs anything; ``ServerManager`` does, through the host's transport.
"""

from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from orchestrator.errors import UserInputError
from orchestrator.servers.flags import flag_key, requested_vs_effective
from orchestrator.servers.warm import WarmStart


@dataclass
class LaunchSpec:
    """What to start. ``flags`` are the user's (``speculative-num-steps: 3``); model/host/port are set here."""

    model: str | None
    flags: dict[str, Any]
    port: int
    bind: str = "127.0.0.1"
    python: str = "python3"
    launcher: str | list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Launcher:
    """Which program started a server and why (``launcher`` in the server's result, its ``server_started`` event and
    the report): ``name`` (``vllm-cli``, ``api-server``, ``given``, ``default``), its argv, the reason."""

    name: str
    argv: list[str]
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "argv": list(self.argv), "reason": self.reason}


class EngineAdapter(ABC):
    """What every inference engine's adapter says; siblings implement it (servers/sglang.py, servers/vllm.py, and
    the lab's in servers/lab.py). Here only what is engine-neutral has a body: the launcher's program part, the
    flag checks against the engine's own reserved and multi-node names, the client's arguments and keys, flag sets.
    docs/adding-an-engine.md lists every file an engine touches."""

    name: ClassVar[str]
    #: seconds a start may take to be ready when the step does not say (a real model load takes minutes)
    default_ready_timeout: ClassVar[float]
    #: SIGTERM -> SIGKILL grace when stopping
    stop_grace: ClassVar[float]
    #: the highest port ``port: auto`` may pick (an engine that derives another port from it needs room above)
    max_auto_port: ClassVar[int] = 65535
    #: a line of the server's log that means ready (None: only the health path says)
    ready_line: ClassVar[str | None]
    health_path: ClassVar[str]
    #: tried in order; the first that answers 200 with a JSON object is the server's info document (empty: none)
    info_paths: ClassVar[tuple[str, ...]]
    generate_path: ClassVar[str]
    #: POSTed before a benchmark; None: no flush
    flush_path: ClassVar[str | None]
    #: per-request statistics in a generate answer: the bench's name -> the engine's key
    request_stat_keys: ClassVar[dict[str, str]]
    #: flags the manager sets itself (from the step's model/port), never from ``flags``
    reserved: ClassVar[tuple[str, ...]]
    #: flag names the CLI accepts -> the name the server reports in its resolved args
    aliases: ClassVar[dict[str, str]]
    #: the engine's own multi-node flags, set per rank by the manager (never from ``flags``)
    multinode_flags: ClassVar[tuple[str, ...]]
    #: whether a start is first checked by the installed engine's own parser (servers/preflight.py: SGLang's)
    preflight: ClassVar[bool]
    #: flags whose values are the server's API keys -> the client's key role (``api_key``, ``admin_api_key``): the
    #: client sends them as bearer tokens, and they are secrets wherever the flags are shown
    key_flags: ClassVar[dict[str, str]]
    #: how list values become argv: "nargs" (``--x 1 2``) or "repeat" (``--x 1 --x 2``)
    list_style: ClassVar[str] = "nargs"
    #: flags with this prefix (flag_key form) are speculative-decoding flags: the baseline drops them
    spec_prefix: ClassVar[str] = "speculative"

    # -- launching ---------------------------------------------------------------------------
    @abstractmethod
    def default_launcher(self, python: str) -> list[str]:
        """The program that starts this engine's server when the step names no launcher."""

    def launcher_argv(self, spec: LaunchSpec) -> list[str]:
        """The program part. A launcher whose first word is ``python``/``python3`` runs with the host's python."""
        if spec.launcher is None:
            return self.default_launcher(spec.python)
        words = shlex.split(spec.launcher) if isinstance(spec.launcher, str) else [str(w) for w in spec.launcher]
        if not words:
            raise UserInputError("launcher: must not be empty")
        if words[0] in ("python", "python3"):
            words[0] = spec.python
        return words

    async def detect_launcher(self, transport: Any, spec: LaunchSpec) -> Launcher | None:
        """What can start on the host when the step names no launcher (a cheap check with the host's python, never a
        full import of the engine); None: the default launcher, unchecked. vLLM: servers/vllm.py."""
        return None

    def warm_start(self, spec: LaunchSpec) -> WarmStart | None:
        """A warm interpreter that starts this engine's servers by fork (servers/warm.py); None (the default): each
        server starts as its own process. Only the lab has one: its start is all import, a real engine's is not."""
        return None

    def check_flags(self, flags: Mapping[str, Any]) -> None:
        for name in flags:
            if flag_key(str(name)) in self.reserved:
                raise UserInputError(
                    f"flags: {name!r} is set by the step itself; use the step's 'model'/'port' instead")
            if flag_key(str(name)) in self.multinode_flags:
                raise UserInputError(
                    f"flags: {name!r} is set per rank by the step itself; use the step's 'nodes: N' instead")

    def build_argv(self, spec: LaunchSpec) -> list[str]:
        return self.launcher_argv(spec) + self.server_argv(spec)

    @abstractmethod
    def server_argv(self, spec: LaunchSpec) -> list[str]:
        """The command line after the program: what the server's argument parser gets (``check_flags`` first)."""

    # -- multi-node (``nodes: N``): one logical server, a process per node ----------------------
    def rank_argv(self, spec: LaunchSpec, *, nnodes: int, rank: int, dist_init_addr: str) -> list[str]:
        """Rank ``rank``'s command line.

        :raises UserInputError: when the engine has no multi-node mode this tool can drive (the default)."""
        raise UserInputError(f"engine {self.name}: nodes > 1 is not supported (no multi-node mode this tool drives)")

    def preflight_argv(self, spec: LaunchSpec) -> list[str]:
        """What the pre-flight check hands the engine's parser (the lab leaves its own ``--lab-*`` flags out)."""
        return self.server_argv(spec)

    # -- talking to the server (remote_probes/engine/server_client.py runs it next to the server) -----
    def client_keys(self, flags: Mapping[str, Any]) -> dict[str, str]:
        """The client's keys from a launch's flags: ``{"api_key": ..., "admin_api_key": ...}`` (set ones only)."""
        keys: dict[str, str] = {}
        for name, value in flags.items():
            role = self.key_flags.get(flag_key(str(name)))
            if role is not None and value not in (None, False, True, ""):
                keys[role] = str(value)
        return keys

    def client_args(self, command: str) -> dict[str, Any]:
        """What the server client needs to know about this engine for ``command`` (sent as its arguments)."""
        if command == "wait":
            return {"health_path": self.health_path, "ready_line": self.ready_line}
        if command == "bench":
            return {"info_paths": list(self.info_paths), "generate_path": self.generate_path,
                    "flush_path": self.flush_path, "request_stat_keys": dict(self.request_stat_keys)}
        return {}

    @abstractmethod
    def read_bench(self, result: dict[str, Any]) -> dict[str, Any]:
        """The bench result with the server-side figures read (``server_accept_length`` at least)."""

    @abstractmethod
    def requested_args(self, spec: LaunchSpec) -> dict[str, Any]:
        """What was asked for, keyed as ``resolved_args`` reports it (compared by flags.requested_vs_effective)."""

    def compare_args(self, spec: LaunchSpec, effective: Mapping[str, Any], log_text: str) -> dict[str, Any]:
        """Requested vs effective (flags.requested_vs_effective), through the engine's aliases."""
        return requested_vs_effective(self.requested_args(spec), effective, log_text=log_text, aliases=self.aliases)

    def start_decisions(self, log_text: str, effective: Mapping[str, Any]) -> dict[str, Any] | None:
        """What the engine decided at start-up that bears on the diagnosis (vLLM: servers/vllm_startup.py); None
        where the engine says it elsewhere (SGLang: /server_info and the adjustment lines)."""
        return None

    @abstractmethod
    def resolved_args(self, info: Mapping[str, Any] | None, log_text: str) -> dict[str, Any]:
        """What the server says it uses: its info document (``info_paths``) or, for engines without one, its log."""

    # -- flag sets ---------------------------------------------------------------------------
    def is_spec_flag(self, name: str) -> bool:
        return flag_key(name).startswith(self.spec_prefix)

    def baseline_flags(self, flags: Mapping[str, Any]) -> dict[str, Any]:
        """The same server without speculative decoding."""
        return {k: v for k, v in flags.items() if not self.is_spec_flag(k)}

    def invalid_reason(self, flags: Mapping[str, Any]) -> str | None:
        """Why a flag set is not worth running (None: it is)."""
        return None
