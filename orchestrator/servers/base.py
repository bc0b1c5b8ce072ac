"""The engine adapter: everything that differs between inference servers (SGLang, vLLM, the lab).

An adapter is pure: it turns a ``LaunchSpec`` into an argv, says how readiness looks, where the resolved
arguments and speculative-decoding statistics live in the server's answers, and which flag sets are
invalid. It never runs anything; ``ServerManager`` does, through the host's transport.
"""

from __future__ import annotations

import shlex
from abc import ABC
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from orchestrator.errors import UserInputError
from orchestrator.servers.flags import flag_key, flags_to_argv, requested_vs_effective


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


class EngineAdapter(ABC):  # noqa: B024 - every method has a working SGLang-shaped default
    """Defaults follow SGLang's interface (research/sglang-interface.md); subclasses override what differs."""

    name: ClassVar[str]
    #: a real model load takes minutes; the lab starts in seconds
    default_ready_timeout: ClassVar[float] = 600.0
    #: SIGTERM -> SIGKILL grace; SGLang 0.5.23 drains for up to 15 s
    stop_grace: ClassVar[float] = 20.0
    ready_line: ClassVar[str | None] = "The server is fired up and ready to roll!"
    health_path: ClassVar[str] = "/health"
    #: tried in order; the first that answers 200 with a JSON object is the server's info document
    info_paths: ClassVar[tuple[str, ...]] = ("/server_info", "/get_server_info")
    generate_path: ClassVar[str] = "/generate"
    #: POSTed before a benchmark (SGLang: also resets the speculative counters); None: no flush
    flush_path: ClassVar[str | None] = "/flush_cache"
    #: per-request statistics in a /generate answer's ``meta_info``: the bench's name -> the engine's key
    request_stat_keys: ClassVar[dict[str, str]] = {"accept_length": "spec_accept_length",
                                                   "verify_ct": "spec_verify_ct"}
    #: how list values become argv: "nargs" (``--x 1 2``) or "repeat" (``--x 1 --x 2``)
    list_style: ClassVar[str] = "nargs"
    #: flags the manager sets itself (from the step's model/port), never from ``flags``
    reserved: ClassVar[tuple[str, ...]] = ("model_path", "model", "host", "port")
    #: flag names the CLI accepts -> the name the server reports in its resolved args
    aliases: ClassVar[dict[str, str]] = {
        "model": "model_path",
        "speculative_draft_model": "speculative_draft_model_path",
        "tensor_parallel_size": "tp_size",
        "tp": "tp_size",
    }
    spec_prefix: ClassVar[str] = "speculative"

    # -- launching ---------------------------------------------------------------------------
    def default_launcher(self, python: str) -> list[str]:
        return [python, "-m", "sglang.launch_server"]

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

    def server_argv(self, spec: LaunchSpec) -> list[str]:
        """The command line after the program: what the server's argument parser gets."""
        self.check_flags(spec.flags)
        argv = ["--model-path", spec.model] if spec.model else []
        argv += ["--host", spec.bind, "--port", str(spec.port)]
        return argv + flags_to_argv(spec.flags, list_style=self.list_style)

    # -- multi-node (``nodes: N``): one logical server, a process per node ----------------------
    #: the engine's own multi-node flags, set per rank by the manager (never from ``flags``)
    multinode_flags: ClassVar[tuple[str, ...]] = ("nnodes", "node_rank", "dist_init_addr")

    def rank_argv(self, spec: LaunchSpec, *, nnodes: int, rank: int, dist_init_addr: str) -> list[str]:
        """Rank ``rank``'s command line: SGLang's ``--nnodes N --node-rank R --dist-init-addr HOST:PORT`` after the
        usual argv. Every rank gets the same model, flags and port (SGLang serves HTTP on rank 0 only).

        :raises UserInputError: when the engine has no multi-node mode this tool can drive."""
        return self.build_argv(spec) + ["--nnodes", str(nnodes), "--node-rank", str(rank),
                                        "--dist-init-addr", dist_init_addr]

    #: whether a start is first checked by the installed SGLang's own parser (servers/preflight.py)
    preflight: ClassVar[bool] = True

    def preflight_argv(self, spec: LaunchSpec) -> list[str]:
        """What the pre-flight check hands SGLang's parser (the lab leaves its own ``--lab-*`` flags out)."""
        return self.server_argv(spec)

    # -- talking to the server (remote_probes/server_client.py runs it next to the server) -----
    #: flags whose values are the server's API keys (``--api-key``, ``--admin-api-key``): the client sends them
    #: as bearer tokens, and they are secrets wherever the flags are shown
    key_flags: ClassVar[dict[str, str]] = {"api_key": "api_key", "admin_api_key": "admin_api_key"}

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

    def read_bench(self, result: dict[str, Any]) -> dict[str, Any]:
        """The bench result with the server-side figures read (SGLang: ``server_info``'s accept length)."""
        from orchestrator.servers.vllm import per_position_intervals

        info = result.pop("server_info", None)
        result["server_accept_length"] = self.server_accept_length(info) if isinstance(info, dict) else None
        # per-request accept histograms (SGLang's meta_info) give the per-position acceptance vLLM's counters give
        per_position = per_position_intervals(result.get("per_request") or [])
        if per_position:
            result["spec_decode"] = {**(result.get("spec_decode") or {}), **per_position}
        return result

    def requested_args(self, spec: LaunchSpec) -> dict[str, Any]:
        """What was asked for, keyed as ``resolved_args`` reports it (compared by flags.requested_vs_effective)."""
        requested = dict(spec.flags)
        if spec.model:
            requested["model_path"] = spec.model
        return requested

    def compare_args(self, spec: LaunchSpec, effective: Mapping[str, Any], log_text: str) -> dict[str, Any]:
        """Requested vs effective (flags.requested_vs_effective): SGLang's resolved args are ``/server_info``'s."""
        return requested_vs_effective(self.requested_args(spec), effective, log_text=log_text, aliases=self.aliases)

    def start_decisions(self, log_text: str, effective: Mapping[str, Any]) -> dict[str, Any] | None:
        """What the engine decided at start-up that bears on the diagnosis (vLLM: servers/vllm_startup.py); None
        where the engine says it elsewhere (SGLang: /server_info and the adjustment lines)."""
        return None

    def resolved_args(self, info: Mapping[str, Any] | None, log_text: str) -> dict[str, Any]:
        """What the server says it uses: SGLang's info document (``/server_info``); the log is for engines without one."""
        return self.effective_args(info) if info else {}

    # -- reading answers ---------------------------------------------------------------------
    def effective_args(self, info: Mapping[str, Any]) -> dict[str, Any]:
        """The resolved server args from /server_info (SGLang: the top level, minus runtime fields)."""
        skip = {"internal_states", "status", "version", "kv_events", "launch_command"}
        return {k: v for k, v in info.items() if k not in skip and not isinstance(v, Mapping)}

    def server_accept_length(self, info: Mapping[str, Any]) -> float | None:
        states = info.get("internal_states") or []
        values = [s.get("avg_spec_accept_length") for s in states if isinstance(s, Mapping)]
        numbers = [float(v) for v in values if isinstance(v, (int, float))]
        return round(sum(numbers) / len(numbers), 4) if numbers else None

    # -- flag sets ---------------------------------------------------------------------------
    def is_spec_flag(self, name: str) -> bool:
        return flag_key(name).startswith(self.spec_prefix)

    def baseline_flags(self, flags: Mapping[str, Any]) -> dict[str, Any]:
        """The same server without speculative decoding."""
        return {k: v for k, v in flags.items() if not self.is_spec_flag(k)}

    def invalid_reason(self, flags: Mapping[str, Any]) -> str | None:
        """Why a flag set is not worth running (SGLang's bench_speculative skips steps*topk+1 < draft tokens)."""
        values = {flag_key(k): v for k, v in flags.items()}
        try:
            steps = int(values["speculative_num_steps"])
            topk = int(values["speculative_eagle_topk"])
            draft = int(values["speculative_num_draft_tokens"])
        except (KeyError, TypeError, ValueError):
            return None
        if steps * topk + 1 < draft:
            return f"steps*topk+1 = {steps * topk + 1} < num_draft_tokens = {draft}"
        return None
