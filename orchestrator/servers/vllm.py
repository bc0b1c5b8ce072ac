"""vLLM (read from the 0.11.0 and 0.33.0 wheels): ``vllm serve MODEL --speculative-config '{...}'``.

Where vLLM differs from SGLang, each item checked in both installed trees (paths under ``vllm/``; tests pin them in
tests/servers/test_vllm_source.py):

- the command: ``vllm serve [model_tag] [options]`` (entrypoints/cli/serve.py; ``python -m vllm.entrypoints.cli.main
  serve`` is the same program with the host's python); the model is positional; speculative decoding is ONE flag,
  ``--speculative-config`` (engine/arg_utils.py), a JSON object: ``method`` (``eagle3``), ``model`` (the draft),
  ``num_speculative_tokens``;
- readiness: ``/health`` answers 200 once the engine is up, and ``/v1/models`` lists the served model; uvicorn's
  "Application startup complete." is the ready line (vLLM itself logs "Starting vLLM API server" / "Starting vLLM
  server on" before the routes answer, so neither is used);
- no ``/server_info``: the resolved configuration is the startup log's ``Initializing a V1 LLM engine (vX) with
  config: model='...', speculative_config=SpeculativeConfig(method='eagle3', model='...', num_spec_tokens=3), ...``
  (v1/engine/core.py; VllmConfig.__str__ and SpeculativeConfig.__repr__);
- no per-request speculative stats and no ``/flush_cache``: acceptance is the change of the Prometheus counters on
  ``/metrics`` across a benchmark: ``vllm:spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``,
  ``..._num_accepted_tokens_total`` and ``..._num_accepted_tokens_per_pos_total{position="k"}`` (one series per
  engine, labels ``model_name``, ``engine``; v1/spec_decode/metrics.py). Mean acceptance length =
  1 + accepted / drafts, as vLLM's own "SpecDecoding metrics: Mean acceptance length" log line computes it (bonus
  token included, comparable with SGLang's accept length). Per request (concurrency 1) the client scrapes the
  counters around each request: exact, because AsyncLLM's output handler pushes a step's outputs and records that
  step's stats (``logger.record``, v1/engine/async_llm.py) with no await between them, so a request's final answer
  cannot be written before its last step is counted (one API server process; several share counters).
- the pre-flight check runs SGLang's parser, so it is off here (vLLM's own parser needs vLLM importable).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from orchestrator.errors import UserInputError
from orchestrator.servers.base import EngineAdapter, LaunchSpec
from orchestrator.servers.flags import flag_key, flags_to_argv

SPEC_FLAG = "speculative_config"
#: the counters' names as /metrics exposes them (prometheus_client adds ``_total`` to a Counter's name)
METRIC_PREFIX = "vllm:spec_decode"
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
CONFIG_LINE = re.compile(r"Initializing a V1 LLM engine \(v(?P<version>[^)]*)\) with config: (?P<config>.*)$")
#: SpeculativeConfig.__repr__ says ``num_spec_tokens``; the JSON key users write is ``num_speculative_tokens``
_REPR_KEYS = {"num_spec_tokens": "num_speculative_tokens"}


class VllmAdapter(EngineAdapter):
    name: ClassVar[str] = "vllm"
    default_ready_timeout: ClassVar[float] = 900.0
    stop_grace: ClassVar[float] = 20.0
    ready_line: ClassVar[str | None] = "Application startup complete."
    health_path: ClassVar[str] = "/health"
    models_path: ClassVar[str] = "/v1/models"
    info_paths: ClassVar[tuple[str, ...]] = ()
    generate_path: ClassVar[str] = "/v1/completions"
    flush_path: ClassVar[str | None] = None
    request_stat_keys: ClassVar[dict[str, str]] = {}
    metrics_path: ClassVar[str] = "/metrics"
    reserved: ClassVar[tuple[str, ...]] = ("model", "model_tag", "host", "port")
    aliases: ClassVar[dict[str, str]] = {"tp": "tensor_parallel_size", "tp_size": "tensor_parallel_size",
                                         "max_model_len": "max_seq_len"}
    preflight: ClassVar[bool] = False
    key_flags: ClassVar[dict[str, str]] = {"api_key": "api_key"}

    def default_launcher(self, python: str) -> list[str]:
        return [python, "-m", "vllm.entrypoints.cli.main", "serve"]

    # vLLM's multi-node serving runs through a Ray cluster that must exist before `vllm serve` (ray start on each
    # node, then one `vllm serve` with --pipeline/--tensor-parallel-size spanning them): not a per-rank argv.
    multinode_flags: ClassVar[tuple[str, ...]] = ()

    def rank_argv(self, spec: LaunchSpec, *, nnodes: int, rank: int, dist_init_addr: str) -> list[str]:
        raise UserInputError(
            f"nodes: {nnodes}: engine {self.name!r} cannot be started across nodes by this tool (vLLM's multi-node "
            "serving runs on a Ray cluster started beforehand, not on per-rank flags); start it with nodes: 1 on "
            "the Ray head node")

    def check_flags(self, flags: Mapping[str, Any]) -> None:
        super().check_flags(flags)
        for name, value in flags.items():
            if flag_key(str(name)) == SPEC_FLAG:
                speculative_config(value)

    def server_argv(self, spec: LaunchSpec) -> list[str]:
        self.check_flags(spec.flags)
        flags = {k: (speculative_config(v) if flag_key(str(k)) == SPEC_FLAG else v) for k, v in spec.flags.items()}
        argv = [spec.model] if spec.model else []
        argv += ["--host", spec.bind, "--port", str(spec.port)]
        return argv + flags_to_argv(flags, list_style=self.list_style)

    def client_args(self, command: str) -> dict[str, Any]:
        if command == "wait":
            return {**super().client_args(command), "models_path": self.models_path}
        if command == "bench":
            return {**super().client_args(command), "api": "openai", "models_path": self.models_path,
                    "metrics_path": self.metrics_path, "metric_prefix": METRIC_PREFIX,
                    "metric_names": {"drafts": DRAFTS, "accepted": ACCEPTED}}
        return super().client_args(command)

    # -- reading answers ---------------------------------------------------------------------
    def requested_args(self, spec: LaunchSpec) -> dict[str, Any]:
        requested: dict[str, Any] = {}
        for name, value in spec.flags.items():
            if flag_key(str(name)) == SPEC_FLAG:
                config = speculative_config(value) or {}
                requested.update({f"{SPEC_FLAG}.{k}": v for k, v in config.items()})
            else:
                requested[name] = value
        if spec.model:
            requested["model"] = spec.model
        return requested

    def resolved_args(self, info: Mapping[str, Any] | None, log_text: str) -> dict[str, Any]:
        """The last ``Initializing a V1 LLM engine ... with config:`` line of the startup log, flattened."""
        for line in reversed(log_text.splitlines()):
            match = CONFIG_LINE.search(line)
            if match:
                resolved = parse_config_line(match.group("config"))
                resolved["vllm_version"] = match.group("version")
                return resolved
        return {}

    def read_bench(self, result: dict[str, Any]) -> dict[str, Any]:
        result.pop("server_info", None)
        stats = spec_decode_delta(result.pop("metrics_before", None), result.pop("metrics_after", None))
        result["spec_decode"] = stats
        result["server_accept_length"] = stats["accept_length"] if stats else None
        return result

    def invalid_reason(self, flags: Mapping[str, Any]) -> str | None:
        for name, value in flags.items():
            if flag_key(str(name)) == SPEC_FLAG:
                config = speculative_config(value) or {}
                k = config.get("num_speculative_tokens")
                if isinstance(k, int) and k < 1:
                    return f"num_speculative_tokens = {k} < 1"
        return None


def speculative_config(value: Any) -> dict[str, Any] | None:
    """``--speculative-config`` as a mapping (a mapping, or its JSON text). :raises UserInputError:"""
    if value is None or value is False:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise UserInputError(f"flags: speculative-config must be a JSON object: {exc}") from None
    if not isinstance(value, Mapping):
        raise UserInputError("flags: speculative-config must be a mapping, e.g. {method: eagle3, model: /draft, "
                             f"num_speculative_tokens: 3}}, got {value!r}")
    return dict(value)


def _split_top(text: str) -> list[str]:
    """``a=1, b=X(c=2, d='e,f'), g={...}`` -> the top-level ``key=value`` items."""
    items: list[str] = []
    cur: list[str] = []
    depth, quote = 0, ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0 and not quote:
            items.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if "".join(cur).strip():
        items.append("".join(cur).strip())
    return items


def _value(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # torch.bfloat16, auto, a config object's repr: kept as written


def parse_config_line(text: str) -> dict[str, Any]:
    """VllmConfig.__str__ -> ``{key: value}``; ``speculative_config=SpeculativeConfig(method=..., ...)`` becomes
    ``speculative_config.method`` etc. (``speculative_config: None`` without speculative decoding)."""
    out: dict[str, Any] = {}
    for item in _split_top(text):
        key, sep, raw = item.partition("=")
        if not sep or not key.strip().isidentifier():
            continue
        key = key.strip()
        if key == SPEC_FLAG and raw.startswith("SpeculativeConfig(") and raw.endswith(")"):
            for sub in _split_top(raw[len("SpeculativeConfig("):-1]):
                name, _, val = sub.partition("=")
                out[f"{SPEC_FLAG}.{_REPR_KEYS.get(name.strip(), name.strip())}"] = _value(val)
            continue
        out[key] = _value(raw)
    return out


def _total(samples: list[dict[str, Any]], name: str) -> float:
    return sum(float(s["value"]) for s in samples if s.get("name") == name)


def spec_decode_delta(before: Any, after: Any) -> dict[str, Any] | None:
    """The spec_decode counters' change across a run (summed over engines) and what vLLM derives from them:
    ``accept_length`` = 1 + accepted/drafts, ``acceptance_rate`` = accepted/draft_tokens, ``per_position`` =
    accepted at position k / drafts. None when /metrics was not read or has no spec_decode counters."""
    if not isinstance(before, list) or not isinstance(after, list):
        return None
    if not any(s.get("name") == DRAFTS for s in after):
        return None  # no speculative decoding on this server: vLLM registers the counters only with a config
    drafts = _total(after, DRAFTS) - _total(before, DRAFTS)
    draft_tokens = _total(after, DRAFT_TOKENS) - _total(before, DRAFT_TOKENS)
    accepted = _total(after, ACCEPTED) - _total(before, ACCEPTED)
    positions: dict[int, float] = {}
    for sign, samples in ((-1.0, before), (1.0, after)):
        for s in samples:
            if s.get("name") == PER_POSITION and str(s.get("labels", {}).get("position", "")).isdigit():
                k = int(s["labels"]["position"])
                positions[k] = positions.get(k, 0.0) + sign * float(s["value"])
    per_position = [round(positions[k] / drafts, 4) if drafts > 0 else None for k in sorted(positions)]
    return {"drafts": int(drafts), "draft_tokens": int(draft_tokens), "accepted_tokens": int(accepted),
            "accept_length": round(1.0 + accepted / drafts, 4) if drafts > 0 else None,
            "acceptance_rate": round(accepted / draft_tokens, 4) if draft_tokens > 0 else None,
            "per_position": per_position}
