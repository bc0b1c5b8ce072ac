"""Pydantic models of each probe's arguments and result (the boundary between orchestrator and remote scripts).

Args models forbid unknown keys so a playbook typo is caught before anything is pushed; result models allow extra
keys so a newer probe does not break an older orchestrator.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Result(BaseModel):
    model_config = ConfigDict(extra="allow")


# ---------------------------------------------------------------- sglang_source


class Expect(_Args):
    contains: str | None = None
    regex: str | None = None
    not_contains: str | None = None

    @model_validator(mode="after")
    def _one_check(self) -> Expect:
        if self.contains is None and self.regex is None and self.not_contains is None:
            raise ValueError("expect needs at least one of contains, regex, not_contains")
        return self


_MODES = ("lines", "symbol", "pattern")


class SourceAlternative(_Args):
    """One address among a read's ``any_of``: its keys replace the read's own (unset ones are inherited)."""

    file: str | None = Field(default=None, description="file relative to the package root")
    under: str | None = Field(default=None, description="directory (relative to the package root) to search in")
    lines: str | None = Field(default=None, description="sed-style range: 155,200 | 155,+45 | /re/,/re/ | $")
    symbol: str | None = Field(default=None, description="class or function, e.g. EagleDraftWorker.init_lm_head")
    pattern: str | None = Field(default=None, description="regex, grep-style")
    context: int | None = Field(default=None, ge=0, le=200)
    max_matches: int | None = Field(default=None, ge=1, le=10000)


def _check_address(address: dict[str, Any], where: str) -> None:
    modes = [m for m in _MODES if address.get(m) is not None]
    if len(modes) != 1:
        raise ValueError(f"{where} needs exactly one of 'lines', 'symbol' or 'pattern'")
    if address.get("lines") is not None and not address.get("file"):
        raise ValueError(f"{where}: a 'lines' read needs a 'file'")
    if address.get("file") and address.get("under"):
        raise ValueError(f"{where}: give 'file' or 'under', not both")


def merge_alternative(shared: dict[str, Any], alternative: dict[str, Any]) -> dict[str, Any]:
    """An ``any_of`` entry over the read's own keys, as the probe merges them: a file replaces a shared
    directory (and the reverse), a mode replaces the shared mode."""
    merged = dict(shared, **alternative)
    if "file" in alternative and "under" not in alternative:
        merged.pop("under", None)
    if "under" in alternative and "file" not in alternative:
        merged.pop("file", None)
    if any(m in alternative for m in _MODES):
        for mode in _MODES:
            if mode not in alternative:
                merged.pop(mode, None)
    return merged


class SourceRead(_Args):
    """One address: ``lines`` (needs ``file``), ``symbol`` or ``pattern``; file relative to the package root.
    ``under`` limits a symbol/pattern search to a directory; ``any_of`` lists ordered alternative addresses, the
    first that finds something wins (the result says which: ``alternative``)."""

    id: str | None = None
    file: str | None = Field(default=None, description="file relative to the package root")
    under: str | None = Field(default=None, description="directory (relative to the package root) to search in")
    lines: str | None = Field(default=None, description="sed-style range: 155,200 | 155,+45 | /re/,/re/ | $")
    symbol: str | None = Field(default=None, description="class or function, e.g. EagleDraftWorker.init_lm_head")
    pattern: str | None = Field(default=None, description="regex, grep-style")
    context: int = Field(default=3, ge=0, le=200)
    max_matches: int = Field(default=20, ge=1, le=10000)
    max_lines: int = Field(default=2000, ge=1, le=200000)
    expect: Expect | None = None
    any_of: list[SourceAlternative] | None = Field(
        default=None, min_length=1,
        description="ordered alternatives (newest layout first): the first that finds something is the result")

    @model_validator(mode="after")
    def _one_mode(self) -> SourceRead:
        own = self.model_dump(exclude_none=True, include=set(SourceAlternative.model_fields))
        if not self.any_of:
            _check_address(own, "a read")
        for n, alternative in enumerate(self.any_of or []):
            _check_address(merge_alternative(own, alternative.model_dump(exclude_none=True)), f"any_of[{n}]")
        return self

    def to_probe(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class SglangSourceArgs(_Args):
    package: str = "sglang"
    sys_path: list[str] = Field(default_factory=list)
    reads: list[SourceRead] = Field(default_factory=list)


class ExpectCheck(_Result):
    kind: Literal["contains", "regex", "not_contains"]
    value: str
    passed: bool
    error: str | None = None


class ExpectResult(_Result):
    passed: bool
    checks: list[ExpectCheck] = Field(default_factory=list)
    error: str | None = None


class ReadErrorInfo(_Result):
    """As ``error`` (a mistake in the read, or I/O): bad_regex, bad_lines, bad_read, io_error.
    As ``not_found`` (this version lacks it; message "not found in <package> <version>: ..."): file_not_found (with
    successors, same_name_elsewhere), dir_not_found, symbol_not_found (with similar), no_match, out_of_range,
    not_found (every alternative of an ``any_of`` missed; each miss is in ``tried``)."""

    kind: str
    message: str


class SourceSpan(_Result):
    file: str
    abs_path: str
    start: int
    end: int
    total_lines: int
    lines: list[tuple[int, str]] = Field(default_factory=list)
    symbol: str | None = None  # qualified name, for symbol reads
    match_lines: list[int] | None = None  # line numbers that matched, for pattern reads


class SourceMiss(_Result):
    """An ``any_of`` alternative that found nothing (0-based ``alternative``)."""

    alternative: int
    kind: str
    message: str


class SourceReadResult(_Result):
    index: int
    found: bool = False
    id: str | None = None
    file: str | None = None
    under: str | None = None
    lines_spec: str | None = None
    symbol: str | None = None
    pattern: str | None = None
    abs_path: str | None = None
    start: int | None = None
    end: int | None = None
    total_lines: int | None = None
    lines: list[tuple[int, str]] = Field(default_factory=list)
    matches: list[SourceSpan] | None = None
    truncated: bool = False
    expect: ExpectResult | None = None
    alternative: int | None = None  # which any_of entry found it (0-based)
    tried: list[SourceMiss] | None = None  # the any_of entries tried before it (or all of them, when none found)
    not_found: ReadErrorInfo | None = None
    error: ReadErrorInfo | None = None


class SglangSourceResult(_Result):
    package: str
    version: str | None = None
    dist: str | None = None
    root: str
    python: str
    reads: list[SourceReadResult]


# ---------------------------------------------------------------- env_info


class EnvInfoArgs(_Args):
    disk_paths: list[str] | None = None
    packages: list[str] = Field(default_factory=list)
    sys_path: list[str] = Field(default_factory=list)
    torch: bool = True
    torch_timeout_s: float = Field(default=60.0, gt=0)
    nvidia_smi_timeout_s: float = Field(default=20.0, gt=0)


class GpuInfo(_Result):
    index: int | str
    name: str
    memory_total_mib: float | None = None
    memory_used_mib: float | None = None
    driver_version: str | None = None


class DiskInfo(_Result):
    path: str
    total_bytes: int | None = None
    free_bytes: int | None = None
    error: str | None = None


class PortInfo(_Result):
    family: Literal["ipv4", "ipv6"]
    address: str
    port: int


class TorchInfo(_Result):
    importable: bool
    version: str | None = None
    cuda_available: bool | None = None
    cuda_version: str | None = None
    device_count: int | None = None
    devices: list[str] = Field(default_factory=list)
    error: str | None = None


class EnvInfoResult(_Result):
    hostname: str
    python: dict[str, Any]
    os: dict[str, Any]
    cpu_count: int | None
    memory: dict[str, int] | None
    disk: list[DiskInfo]
    gpus: list[GpuInfo]
    nvidia_smi: dict[str, Any]
    cuda: dict[str, Any]
    torch: TorchInfo | None
    packages: dict[str, str | None]
    listening_ports: list[PortInfo]


# ---------------------------------------------------------------- draft_inspect


class DraftInspectArgs(_Args):
    path: str
    target_path: str | None = None
    target_num_layers: int | None = Field(default=None, gt=0)
    target_hidden_size: int | None = Field(default=None, gt=0)
    target_vocab_size: int | None = Field(default=None, gt=0)
    engine_sys_path: list[str] | None = None  # where the sglang package is, when not importable by the probe's python
    # the engine this host serves with: its model registry decides the architecture check (vLLM: the installed vllm's)
    engine: Literal["sglang", "vllm"] | None = None
    method: Literal["eagle3", "eagle"] | None = None  # vLLM: the speculative method the draft is renamed for
    vllm_sys_path: list[str] | None = None
    vllm_runner: Literal["v1", "v2"] | None = None


Severity = Literal["info", "warning", "error"]


class Finding(_Result):
    """ids: weights, architecture, variant_flags, fc_width, lm_head, d2t, t2d, tied_embeddings, aux_layer_ids,
    aux_count, rope, naming, embed_tokens; draft <-> target agreement (remote_probes/checks/agreement.py):
    agree_hidden_size, agree_vocab_size, agree_draft_vocab_size, agree_attention, agree_max_position_embeddings,
    agree_torch_dtype, served_parts (EAGLE3), served_parts_eagle (EAGLE); their details name ``read_by``."""

    id: str
    severity: Severity
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class TensorInfo(_Result):
    dtype: str | None
    shape: list[int]


class Feeds(_Result):
    """HF ``hidden_states`` indices each engine feeds the draft; None when it depends on an unknown layer count."""

    sglang: list[int] | None
    vllm: list[int] | None


class Naming(_Result):
    variant: Literal["midlayer", "layers", "unknown"]
    model_prefix: bool
    speculators_config: bool
    decoder_layers: list[int]
    label: str


class DraftInspectResult(_Result):
    path: str
    config: dict[str, Any]
    target: dict[str, Any]
    weights: dict[str, Any]
    naming: Naming
    tensors: dict[str, TensorInfo]
    feeds: Feeds
    findings: list[Finding]
    engine: dict[str, Any] | None = None  # the engine whose model registry was scanned (None: none found)

    def finding(self, fid: str) -> Finding | None:
        return next((f for f in self.findings if f.id == fid), None)

    @property
    def worst(self) -> Severity:
        order = {"info": 0, "warning": 1, "error": 2}
        return max((f.severity for f in self.findings), key=order.__getitem__, default="info")


# ---------------------------------------------------------------- sglang_flags


class SglangFlagsArgs(_Args):
    argv: list[str] = Field(description="the flags the server would get, model path included")
    package: str = "sglang"
    sys_path: list[str] = Field(default_factory=list)
    runtime: bool = Field(default=True, description="try SGLang's own prepare_server_args first (a GPU host)")
    timeout: float = Field(default=60, gt=0, le=600)


class FlagError(_Result):
    kind: str  # unknown_flag | ambiguous_flag | invalid_flag | unknown_algorithm | topk_without_steps | ...
    exception: str
    message: str
    where: str = ""
    detail: str = ""


class FlagAdjustment(_Result):
    field: str
    requested: Any = None
    effective: Any = None
    message: str = ""
    where: str = ""


class SglangFlagsResult(_Result):
    package: str
    version: str | None = None
    root: str
    layout: Literal["add_argument", "annotated", "fields"]
    route: Literal["static", "runtime"]
    runtime_note: str | None = None
    ok: bool
    exit_code: int
    errors: list[FlagError] = Field(default_factory=list)
    adjustments: list[FlagAdjustment] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    parser: dict[str, Any] = Field(default_factory=dict)
    seconds: float = 0.0


# ---------------------------------------------------------------- draft_fix


class WiringEvidence(_Args):
    """The draft test's decision, its best wiring and the wiring the engine fed (HF hidden_states indices)."""

    decision: str | None = None
    best: list[int] | None = None
    served: list[int] | None = None


class DraftFixArgs(_Args):
    draft: str
    target: str
    candidate_flags: dict[str, Any] = Field(default_factory=dict)
    engine: Literal["sglang", "vllm"] = "sglang"
    engine_sys_path: list[str] | None = None
    effective: dict[str, Any] | None = None
    overrides: list[dict[str, Any]] | None = None
    findings: list[dict[str, Any]] | None = None
    wiring: WiringEvidence | None = None
    # the counterfactual draft test's recovering swaps ({part, served, swapped, refs, ...}): draft_fix_parts.py
    parts: list[dict[str, Any]] | None = None
    out_dir: str | None = None


class FixChange(_Result):
    what: str
    from_: Any = Field(default=None, alias="from")
    to: Any
    why: str


class FixBlocker(_Result):
    what: str
    why: str
    remedies: list[str]


FixStatus = Literal["fix", "partial", "blocked", "nothing_to_fix"]


class DraftFixResult(_Result):
    fix_status: FixStatus
    flags: dict[str, Any]
    draft: str | None
    changes: list[FixChange]
    blockers: list[FixBlocker]
    notes: list[str] = Field(default_factory=list)
    capture: dict[str, Any]
    engine: dict[str, Any]
    summary: str


# ---------------------------------------------------------------- server_client (one result model per command)


class ServerRequestResult(_Result):
    status: int  # 0: the connection itself failed (text says why)
    text: str
    json_doc: Any = Field(default=None, alias="json")


class ServerWaitResult(_Result):
    ready: bool
    reason: Literal["ready", "exited", "timeout"]
    waited: float
    ready_line_seen: bool | None = None
    health: int | None = None  # the last health status when not ready


class ServerPortResult(_Result):
    free: bool
    port: int


class SpecCounts(_Result):
    drafts: int
    accepted: list[int]  # per draft position


class BenchRequestRow(_Result):
    latency: float
    ttft: float | None = None
    completion_tokens: int
    prompt_tokens: int
    accept_length: float | None = None
    verify_ct: int | None = None
    finish: str | None = None
    spec_counts: SpecCounts | None = None  # vLLM at concurrency 1: this request's drafts and per-position accepts
    index: int | None = None  # which request of the run (a traffic file's: its place in the replay)


class ServerBenchResult(_Result):
    n: int
    completed: int
    errors: list[str]
    concurrency: int
    stream: bool
    flush_status: int | None = None
    wall_s: float | None = None
    completion_tokens: int
    tok_s: float | None = None
    latency_mean: float | None = None
    latency_p50: float | None = None
    latency_p99: float | None = None
    ttft_p50: float | None = None
    ttft_p99: float | None = None
    accept_length: float | None = None
    verify_ct: int | None = None
    server_info: dict[str, Any] | None = None  # read by the engine adapter (server_accept_length), then dropped
    server_info_path: str | None = None
    per_request: list[BenchRequestRow]
    failed: list[dict[str, Any]] = []  # {index, error} per request that got no answer


SERVER_CLIENT_RESULTS: dict[str, type[_Result]] = {
    "request": ServerRequestResult, "wait": ServerWaitResult, "port": ServerPortResult, "bench": ServerBenchResult,
}


# ---------------------------------------------------------------- target_capture


class TargetCaptureArgs(_Args):
    """Which class of the installed engine runs the target, and where it captures aux hidden states."""

    target_path: str | None = Field(default=None, description="the target model directory (its config.json)")
    config: dict[str, Any] | None = Field(default=None, description="the target's config, instead of target_path")
    engine: Literal["sglang", "vllm"] = "sglang"
    sys_path: list[str] | None = Field(default=None, description="where the engine package is, if not importable")

    @model_validator(mode="after")
    def _one_source(self) -> TargetCaptureArgs:
        if (self.target_path is None) == (self.config is None):
            raise ValueError("give exactly one of target_path, config")
        return self


class CaptureLink(_Result):
    """One class on the way from the target's architecture to the capture method that runs."""

    class_: str = Field(alias="class")
    class_file: str                    # the class's module, relative to the package (srt/models/kimi_k25.py)
    method: str
    defined_in: str                    # the class (itself or a base) whose body defines the method
    file: str                          # that method's module, relative to the package, as read_source takes it
    where: str                         # package/file:line
    line: int
    end_line: int
    symbol: str                        # Class.method, as read_source takes it
    delegates_to: str | None = None    # the attribute it forwards to (language_model)
    registry: str | None = None        # vLLM: the registry entry that named the class


class TargetCaptureResult(_Result):
    engine: Literal["sglang", "vllm"]
    found: bool
    installed: bool = True
    architecture: str | None = None
    text_architecture: str | None = None
    chain: list[CaptureLink] = Field(default_factory=list)
    followed: str = ""
    capture: CaptureLink | None = None
    default_ids: list[int] | None = None
    default_wiring: list[int] | None = None
    default_rule: str | None = None
    num_layers: int | None = None
    num_layers_source: str | None = None
    id_offset: int | None = None
    version: str | None = None
    why: str | None = None


# ---------------------------------------------------------------- draft_test


class PassThroughArgs(BaseModel):
    """The args model of a probe whose step kind validates the arguments itself (draft_test: DraftTestArgs in
    orchestrator/actions/draft_test.py): passed through as given, so a field added there needs no second model."""

    model_config = ConfigDict(extra="allow")


class StatesFrom(_Args):
    """Where the draft test takes the target's hidden states from: a server started with ``capture:`` (its
    ``states_from``), which computes them as it serves (remote_probes/engine/engine_states.py)."""

    url: str = Field(pattern=r"^https?://", description="the capture server's address, as its host reaches it")
    layers: list[Annotated[int, Field(ge=0)]] = Field(min_length=1, description="the layer ids the server captures")
    model: str | None = Field(default=None, description="the name it serves (default: the target path)")
    engine: str | None = None
    version: str | None = None
    tensor_parallel: int | None = Field(default=None, ge=1)
    nodes: int | None = Field(default=None, ge=1)
    check: bool = Field(default=False, description="also load the target here and compare the engine's states with "
                                                   "transformers' on the first prompt (a target that fits)")
    concurrency: int = Field(default=4, ge=1, le=64, description="requests in flight (the server batches them)")


class StatesPlanArgs(_Args):
    """Where the draft test gets the target's hidden states (remote_probes/evaluation/states_plan.py)."""

    target: str
    draft: str
    engine: Literal["sglang", "vllm"] = "sglang"
    server_engine: str | None = Field(default=None, description="the host's engine (vllm, sglang: a real engine, "
                                                                                   "which captures)")
    choice: Literal["auto", "engine", "transformers"] = "auto"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"


class StatesPlanResult(_Result):
    source: Literal["engine", "transformers"]
    why: str
    layers: list[int]
    num_layers: int
    fits: bool
    needed_bytes: int | None = None
    available_bytes: int | None = None
    where: str
    engine_can_capture: bool
    embedding_note: str | None = None  # id 0 not asked of an engine that cannot capture it, and why


def no_states_source(value: Any) -> Any:
    """A playbook's "no engine" (an empty mapping or string, null) is the transformers path."""
    return None if value in ({}, "", None) else value


def ceiling_line(bound: Any, served: Any = None) -> str | None:
    """One line on the acceptance ceiling (evaluation/ceiling.py): the share of the target's greedy tokens the
    served head can name, and the accept length a draft perfect within that vocabulary would reach, beside the
    served figure when given (console, report, TUI, MCP alike)."""
    if not isinstance(bound, dict) or bound.get("coverage") is None:
        return None
    cov_ci = bound.get("coverage_ci")
    ceil_ci = bound.get("tau_ceiling_ci")
    line = (f"acceptance ceiling: the served vocabulary ({bound.get('vocabulary')} target ids) names "
            f"{100 * bound['coverage']:.1f}%"
            + (f" [{100 * cov_ci[0]:.1f}, {100 * cov_ci[1]:.1f}]" if cov_ci else "")
            + f" of the target's {bound.get('tokens')} greedy tokens; a draft perfect within it reaches tau "
            + (f"{bound['tau_ceiling']:.2f}" if isinstance(bound.get("tau_ceiling"), (int, float)) else "n/a")
            + (f" [{ceil_ci[0]:.2f}, {ceil_ci[1]:.2f}]" if ceil_ci else ""))
    if isinstance(served, (int, float)):
        line += f" (served {served:.2f})"
    missing = bound.get("missing") or []
    if missing:
        line += "; most frequent it cannot name: " + ", ".join(f"id {m['id']} x{m['count']}" for m in missing[:4])
    return line


def states_source_line(states: Any) -> str | None:
    """One line on where a draft test's hidden states came from (console, report, TUI, MCP alike)."""
    if not isinstance(states, dict) or not states.get("source"):
        return None
    if states["source"] != "engine":
        return f"hidden states: transformers, the target loaded in the test's process (layers {states.get('layers')})"
    line = (f"hidden states: the serving engine, {states.get('engine') or 'vllm'} {states.get('version') or ''} "
            f"at {states.get('url')}, tensor parallel {states.get('tensor_parallel') or 1}, "
            f"{states.get('nodes') or 1} node(s), layers {states.get('layers')}")
    if states.get("looked_up"):
        line += f"; {states['looked_up']} looked up from the target's embedding"
    skipped = states.get("skipped_wirings") or []
    if skipped:
        line += f"; {len(skipped)} wiring(s) skipped (layers the server does not capture)"
    check = states.get("check")
    if isinstance(check, dict):
        worst = max((check.get("relative_max_diff") or {}).values(), default=0.0)
        line += ("; checked against transformers on prompt 1: "
                 + ("agree" if check.get("agree") else "THEY DIFFER")
                 + f" (max relative difference {worst:.1e}, same greedy tokens: {check.get('same_greedy_tokens')})")
    return line


class WiringScore(_Result):
    """One candidate wiring's figures, each with its interval over prompts (remote_probes/evaluation/draft_test.py)."""

    name: str
    wiring: list[int]
    tau_serving: float | None = None
    tau_serving_ci: list[float] | None = None
    tau: float | None = None
    acc: list[float | None] = Field(default_factory=list)
    tier: int | None = None
    vs_server: dict[str, Any] | None = None  # {ratio, ratio_ci, se_log}: paired over prompts
    beats_server: bool = False
    as_trained: dict[str, Any] | None = None  # the same figures with the draft's own parts, where served ones differ


DraftTestDecision = Literal["mismatch", "fine", "no_signal", "inconclusive"]


class ReconcileConfig(_Result):
    """One served configuration scored for the reconcile (remote_probes/evaluation/draft_reconcile.py): the draft, its
    algorithm and draft steps, the wiring and parts the engine serves, and the prediction (``row``)."""

    draft: str
    algorithm: str
    steps: int
    wiring: list[int] | None = None
    parts: dict[str, Any] | None = None
    row: dict[str, Any] | None = None  # tau_serving (+ _ci), per-position and per-length figures, as the draft test's
    error: str | None = None  # why the test cannot build this server's draft (then nothing else is set)


class DraftReconcileResult(_Result):
    """The draft test's prediction for exactly the configurations the servers served, on the bench's prompts."""

    configs: list[ReconcileConfig]
    prompts: int
    ladder_prompts: int = 0  # the benchmarks' context-ladder prompts, scored into by_length only
    engine: str
    seconds: float
    skipped: list[dict[str, Any]] | None = None  # a traffic replay's requests not replayed offline ({index, reason})


class DraftTestResult(_Result):
    """The draft test's evidence: every wiring scored, the best against the served one, and the decision."""

    wirings: list[WiringScore]
    best: WiringScore
    server_wiring: list[int] | None = None  # what the engine feeds (None: outside the target)
    server: WiringScore | None = None
    engine: str
    algorithm: str
    parts: dict[str, Any]  # the parts the engine serves vs the draft's own (eagle3_served.served_parts)
    verdict: str
    decision: DraftTestDecision
    prompts_to_decide: int | None = None
    margin: float
    confidence: float
    gain: dict[str, Any] | None = None
    steps: int
    best_tier: list[list[int]] = Field(default_factory=list)
    target: dict[str, Any]
    draft: dict[str, Any]
    prompts: int
