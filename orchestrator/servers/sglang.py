"""SGLang (0.5.12 - 0.5.23): ``python -m sglang.launch_server`` (or ``launcher: "sglang serve"``).

Everything SGLang-specific lives here (research/sglang-interface.md), beside its sibling servers/vllm.py, which
says the same for vLLM: the launcher (``vllm serve``), readiness, the resolved-config source (the startup log) and
where acceptance lives (``/metrics`` counters). The lab's SGLang-mode server (servers/lab.py) speaks this interface.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from orchestrator.servers.base import EngineAdapter, LaunchSpec
from orchestrator.servers.flags import flag_key, flags_to_argv

#: flag names SGLang's CLI accepts -> the name ``/server_info`` reports
ALIASES: dict[str, str] = {
    "model": "model_path",
    "speculative_draft_model": "speculative_draft_model_path",
    "tensor_parallel_size": "tp_size",
    "tp": "tp_size",
}


class SglangAdapter(EngineAdapter):
    """SGLang's interface (research/sglang-interface.md): ``/health``, ``/server_info`` (resolved args and the
    speculative accept length), ``/generate`` with ``meta_info``, ``/flush_cache``, its own parser as pre-flight."""

    name: ClassVar[str] = "sglang"
    default_ready_timeout: ClassVar[float] = 600.0
    #: SGLang 0.5.23 drains for up to 15 s
    stop_grace: ClassVar[float] = 20.0
    #: SGLang derives its gRPC port as --port + 10000 and refuses the start when that passes 65535 (server_args.py,
    #: "SGLANG_GRPC_PORT (68841) must be between 1 and 65535" in 0.5.12.post1 and 0.5.15.post1): an automatic port
    #: above 55535, which the kernel's ephemeral range often gives, would fail the pre-flight
    max_auto_port: ClassVar[int] = 65535 - 10000
    ready_line: ClassVar[str | None] = "The server is fired up and ready to roll!"
    health_path: ClassVar[str] = "/health"
    info_paths: ClassVar[tuple[str, ...]] = ("/server_info", "/get_server_info")
    generate_path: ClassVar[str] = "/generate"
    #: also resets the speculative counters
    flush_path: ClassVar[str | None] = "/flush_cache"
    request_stat_keys: ClassVar[dict[str, str]] = {"accept_length": "spec_accept_length",
                                                   "verify_ct": "spec_verify_ct"}
    reserved: ClassVar[tuple[str, ...]] = ("model_path", "model", "host", "port")
    aliases: ClassVar[dict[str, str]] = ALIASES
    multinode_flags: ClassVar[tuple[str, ...]] = ("nnodes", "node_rank", "dist_init_addr")
    preflight: ClassVar[bool] = True
    key_flags: ClassVar[dict[str, str]] = {"api_key": "api_key", "admin_api_key": "admin_api_key"}

    def default_launcher(self, python: str) -> list[str]:
        return [python, "-m", "sglang.launch_server"]

    def server_argv(self, spec: LaunchSpec) -> list[str]:
        self.check_flags(spec.flags)
        argv = ["--model-path", spec.model] if spec.model else []
        argv += ["--host", spec.bind, "--port", str(spec.port)]
        return argv + flags_to_argv(spec.flags, list_style=self.list_style)

    def rank_argv(self, spec: LaunchSpec, *, nnodes: int, rank: int, dist_init_addr: str) -> list[str]:
        """SGLang's ``--nnodes N --node-rank R --dist-init-addr HOST:PORT`` after the usual argv. Every rank gets the
        same model, flags and port (SGLang serves HTTP on rank 0 only)."""
        return self.build_argv(spec) + ["--nnodes", str(nnodes), "--node-rank", str(rank),
                                        "--dist-init-addr", dist_init_addr]

    def read_bench(self, result: dict[str, Any]) -> dict[str, Any]:
        """``server_info``'s accept length as the server-side figure."""
        from orchestrator.servers.vllm import per_position_intervals

        info = result.pop("server_info", None)
        result["server_accept_length"] = self.server_accept_length(info) if isinstance(info, dict) else None
        # per-request accept histograms (SGLang's meta_info) give the per-position acceptance vLLM's counters give
        per_position = per_position_intervals(result.get("per_request") or [])
        if per_position:
            result["spec_decode"] = {**(result.get("spec_decode") or {}), **per_position}
        return result

    def requested_args(self, spec: LaunchSpec) -> dict[str, Any]:
        requested = dict(spec.flags)
        if spec.model:
            requested["model_path"] = spec.model
        return requested

    def resolved_args(self, info: Mapping[str, Any] | None, log_text: str) -> dict[str, Any]:
        """SGLang's resolved args are ``/server_info``'s."""
        return self.effective_args(info) if info else {}

    def effective_args(self, info: Mapping[str, Any]) -> dict[str, Any]:
        """The resolved server args from /server_info: the top level, minus runtime fields."""
        skip = {"internal_states", "status", "version", "kv_events", "launch_command"}
        return {k: v for k, v in info.items() if k not in skip and not isinstance(v, Mapping)}

    def server_accept_length(self, info: Mapping[str, Any]) -> float | None:
        states = info.get("internal_states") or []
        values = [s.get("avg_spec_accept_length") for s in states if isinstance(s, Mapping)]
        numbers = [float(v) for v in values if isinstance(v, (int, float))]
        return round(sum(numbers) / len(numbers), 4) if numbers else None

    def invalid_reason(self, flags: Mapping[str, Any]) -> str | None:
        """SGLang's bench_speculative skips steps*topk+1 < draft tokens."""
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
