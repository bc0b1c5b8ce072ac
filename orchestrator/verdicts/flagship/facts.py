"""Values the flagship's steps and rules share, defined once: which engine family the host speaks, when the
counterfactual runs, which servers the reconcile predicts, and the weighing of the fix (``fact('weighing')``)."""

from __future__ import annotations

from typing import Any

from orchestrator.verdicts.context import RuleContext
from orchestrator.verdicts.registry import fact
from orchestrator.verdicts.results import has_interval

ENGINE_FAMILIES = ("sglang", "vllm")


@fact("engine_family")
def engine_family(ctx: RuleContext) -> str:
    """sglang | vllm: the host's ``engine_family`` where it gives one, else ``vllm`` for an ``engine`` among the
    playbook's ``vllm_engines`` and ``sglang`` for the rest (SGLang, the lab)."""
    given = ctx.var("engine_family")
    if given in ENGINE_FAMILIES:
        return str(given)
    vllm_engines = ctx.var("vllm_engines") or ("vllm", "lab-vllm")
    return "vllm" if ctx.var("engine", "sglang") in vllm_engines else "sglang"


def _spec_beats_baseline(ctx: RuleContext) -> bool:
    spec, base = ctx.bench("spec"), ctx.bench("base")
    return bool(has_interval(spec.tok_s_ci) and has_interval(base.tok_s_ci)
                and spec.tok_s_ci[0] > base.tok_s_ci[1])  # type: ignore[index,operator]


@fact("counterfactual_wanted")
def counterfactual_wanted(ctx: RuleContext) -> bool:
    """The counterfactual served parts run when the wiring test explains nothing and speculation does not clearly
    beat the baseline, when the draft accepts almost nothing on any wiring, or when the field reading names config
    values to score (the healthy path pays nothing)."""
    dt = ctx.draft_test("dt")
    if not dt.usable or dt.decision == "mismatch":
        return False
    # config values the field reading names as candidates (remote_probes/draft_reading/) are scored even when
    # speculation pays: a served acceptance the draft's own best configuration beats is not "nothing to fix"
    fields = ctx.inspect().finding("draft_fields")
    candidates = bool(fields and fields.severity == "warning" and fields.details.get("fields"))
    return dt.decision == "no_signal" or not _spec_beats_baseline(ctx) or candidates


@fact("counterfactual_after_reconcile")
def counterfactual_after_reconcile(ctx: RuleContext) -> bool:
    """A reconcile that failed (prediction and measurement disjoint) runs the counterfactual where it did not run."""
    cf, dt, rc = ctx.draft_test("cf"), ctx.draft_test("dt"), ctx.reconcile("rc")
    return (cf.status in (None, "skipped") and dt.usable and rc.registered and not rc.failed
            and rc.decision == "discrepancy")


@fact("fix_to_serve")
def fix_to_serve(ctx: RuleContext) -> bool:
    """Restart with the fix: the host's ``fixed_flags`` (after a failed start only when they differ from the
    candidate's: the same flags teach nothing), else the derived fix when there is one to serve."""
    if ctx.defined("fixed_flags"):
        return ctx.server("spec_srv").ok or ctx.var("fixed_flags") != ctx.var("candidate_flags")
    return ctx.draft_fix("fix").fix_status in ("fix", "partial")


@fact("reconciled_servers")
def reconciled_servers(ctx: RuleContext) -> list[dict[str, Any]]:
    """Every speculative server that served, with its benchmark, flags, effective flags and start-up decisions."""
    out = []
    for name, server, bench in (("spec", "spec_srv", "spec"), ("fixed", "fixed_srv", "fixed")):
        srv = ctx.server(server)
        if srv.ok:
            out.append({"name": name, "bench": ctx.var(bench), "flags": srv.flags, "effective": srv.raw.get("effective"),
                        "decisions": srv.raw.get("decisions")})
    return out


@fact("reconciled_traffic_servers")
def reconciled_traffic_servers(ctx: RuleContext) -> list[dict[str, Any]]:
    """Every speculative server whose traffic replay (issue 40) measured, with that replay as its benchmark."""
    out = []
    for name, server, bench in (("spec", "spec_srv", "spec_traffic"), ("fixed", "fixed_srv", "fixed_traffic")):
        srv, replay = ctx.server(server), ctx.bench(bench)
        table = replay.raw.get("traffic") if replay.ok else None
        if srv.ok and isinstance(table, dict) and not table.get("unmeasured"):
            out.append({"name": name, "bench": replay.raw, "flags": srv.flags, "effective": srv.raw.get("effective"),
                        "decisions": srv.raw.get("decisions")})
    return out


@fact("states_from")
def states_from(ctx: RuleContext) -> dict[str, Any]:
    """Where the draft test, the counterfactuals and the reconcile read the target's hidden states: the capture
    server's ``states_from`` while it serves (the engine computes them), else nothing (a transformers copy of the
    target in the test's own process)."""
    srv = ctx.server("cap_srv")
    return dict(srv.states_from) if srv.ok and srv.states_from else {}


@fact("weighing")
def weighing(ctx: RuleContext) -> dict[str, Any]:
    """The weighing of the fix against the candidate and the baseline, each on 95% intervals ("clearly": they do not
    overlap; no interval decides nothing):

    - ``accept_recovered``: the fix's accept length clearly above the candidate's;
    - ``fix_verified``: that (or a candidate that served nothing) and the fix's tok/s clearly above the baseline's;
    - ``draft_ok``: the draft test found the served wiring fine;
    - ``draft_fix_recovered``: the fix served another draft than the candidate and recovered (a candidate that
      served nothing is recovered by a fix clearly above 1 + margin);
    - ``fix_left``: what the served derived fix left blocked (draft_fix's blockers) when the fixed server served the
      derived fix's flags (the host's own fixed_flags address what they serve);
    - ``served_accepts``: the candidate clearly accepts more than 1 + margin (contradicting a head or map that
      accepts almost nothing)."""
    spec, fixed, base = ctx.bench("spec"), ctx.bench("fixed"), ctx.bench("base")
    spec_srv, fixed_srv, fix = ctx.server("spec_srv"), ctx.server("fixed_srv"), ctx.draft_fix("fix")
    dt, rc = ctx.draft_test("dt"), ctx.reconcile("rc")
    fixed_ci, spec_ci = fixed.accept_length_ci, spec.accept_length_ci
    accept_recovered = bool(has_interval(fixed_ci) and has_interval(spec_ci)
                            and fixed_ci[0] > spec_ci[1])  # type: ignore[index,operator]
    candidate_served_nothing = not spec_srv.ok or spec.status == "failed"
    fix_verified = bool((accept_recovered or candidate_served_nothing)
                        and has_interval(fixed.tok_s_ci) and has_interval(base.tok_s_ci)
                        and fixed.tok_s_ci[0] > base.tok_s_ci[1])  # type: ignore[index,operator]
    recovered = False
    if has_interval(fixed_ci):
        bar = spec_ci[1] if has_interval(spec_ci) else 1 + ctx.margin  # type: ignore[index]
        recovered = fixed_ci[0] > bar  # type: ignore[index,operator]
    spec_rc, fixed_rc = rc.by_name.get("spec"), rc.by_name.get("fixed")
    draft_fix_recovered = bool(recovered and rc.registered and spec_rc is not None and fixed_rc is not None
                               and fixed_rc.draft != spec_rc.draft)
    served_fix = fixed_srv.flags is not None and fixed_srv.flags == fix.flags
    return {
        "accept_recovered": accept_recovered,
        "fix_verified": fix_verified,
        "draft_ok": dt.usable and dt.decision == "fine",
        "draft_fix_recovered": draft_fix_recovered,
        "fix_left": [b.what for b in fix.blockers] if served_fix else [],
        "served_accepts": bool(has_interval(spec_ci) and spec_ci[0] > 1 + ctx.margin),  # type: ignore[index,operator]
    }
