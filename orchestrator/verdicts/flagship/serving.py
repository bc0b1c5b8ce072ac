"""Rules over the servers and their benchmarks: whether the candidate serves, what the server changed at start-up,
and whether the served fix recovers the accept length and removes the symptom."""

from __future__ import annotations

from orchestrator.bench_compare import accept_recovers, paired_gain, speed_against
from orchestrator.verdicts.context import RuleContext
from orchestrator.verdicts.flagship.text import ci, num
from orchestrator.verdicts.registry import Verdict, verdict_rule
from orchestrator.verdicts.results import has_interval


@verdict_rule("flags_override_at_start", decides=("flags_override",), reads=("spec_srv",))
def flags_override_at_start(ctx: RuleContext) -> Verdict | None:
    """Supported when the server reports a requested flag with another effective value (SGLang's /server_info and its
    "is adjusted to" lines; vLLM's resolved config), refuted when every requested flag took effect."""
    srv = ctx.server("spec_srv")
    if not srv.overrides:
        return Verdict("refuted", "every requested flag took effect")
    return Verdict("supported", "; ".join(f"{o.flag}: requested {o.requested}, effective {o.effective} ({o.source})"
                                          for o in srv.overrides))


@verdict_rule("flags_override_before_refusal", decides=("flags_override",), reads=("spec_srv",))
def flags_override_before_refusal(ctx: RuleContext) -> Verdict | None:
    """A speculative server that did not start may still have changed a requested flag first, and said so in its log
    (SGLang 0.5.15.post1 logs the seed's 16 -> 2 draft tokens before a CPU backend refuses EAGLE): supported then,
    the line quoted. Nothing to say of a server that started (flags_override_at_start judges it) or whose log says
    no change (nothing was resolved to compare with)."""
    srv = ctx.server("spec_srv")
    if srv.ok or not srv.overrides:
        return None
    return Verdict("supported", "before it failed to start, the server changed "
                   + "; ".join(f"{o.flag}: requested {o.requested}, effective {o.effective} ({o.source})"
                               for o in srv.overrides)
                   + ": the flags it would have served are not the ones asked")


@verdict_rule("lm_head_sharing_at_start", decides=("lm_head_sharing",), reads=("spec_srv",))
def lm_head_sharing_at_start(ctx: RuleContext) -> Verdict | None:
    """vLLM logs its lm_head decision at start-up (servers/vllm_startup.py): an unconditional share is the hypothesis
    itself, a draft that keeps its own head shares nothing; SGLang says nothing here."""
    decisions = ctx.server("spec_srv").decisions
    head = decisions.lm_head if decisions else None
    if head is None:
        return None
    because = f"vLLM at start-up: {head.line}"
    if head.why == "unconditional":
        return Verdict("supported", because)
    if head.state == "own":
        return Verdict("refuted", because)
    return None


@verdict_rule("wrong_algorithm_at_start", decides=("wrong_algorithm",), reads=("spec_srv",))
def wrong_algorithm_at_start(ctx: RuleContext) -> Verdict | None:
    """Refuted when the server runs EAGLE3 (SGLang's speculative_algorithm, vLLM's speculative_config.method)."""
    srv = ctx.server("spec_srv")
    if (srv.algorithm or "EAGLE3").upper() != "EAGLE3":
        return None
    if "speculative_config.method" in srv.effective:
        return Verdict("refuted", f"effective speculative_config.method = {srv.effective['speculative_config.method']}")
    return Verdict("refuted", f"effective speculative_algorithm = {srv.effective.get('speculative_algorithm', '?')}")


@verdict_rule("server_start_served", decides=("server_start",), reads=("spec_srv", "spec"))
def server_start_served(ctx: RuleContext) -> Verdict | None:
    """Confirmed when the speculative server did not start, or started and failed every request (HTTP 500): either
    way it cannot serve the configuration; refuted when it served. The reason quotes the server's own error."""
    srv, spec = ctx.server("spec_srv"), ctx.bench("spec")
    if srv.ok and spec.served_nothing:
        error = spec.server_error.summary if spec.server_error else spec.error
        return Verdict("confirmed", f"the speculative server started in {srv.ready_s}s but failed while serving: {error}")
    if srv.ok:
        return Verdict("refuted", f"the speculative server started in {srv.ready_s}s")
    f = srv.failure
    if f is not None:
        code = f", exit code {f.exit_code}" if f.exit_code is not None else ""
        because = f"the speculative server did not start ({f.reason}{code}): {f.label} — {f.summary}"
        if f.cause == "no_accelerator":
            because += (". This host cannot run the candidate's speculation; what it could run (the draft test, the "
                        "static checks, the engine's source) is above. A GPU host would add the speculative "
                        "benchmark (the symptom itself), its reconcile with the draft test, and the fix verified by "
                        "a restart")
        return Verdict("confirmed", because)
    return Verdict("confirmed", f"the speculative server did not start: {srv.error}")


def _lab_simulated(ctx: RuleContext) -> list[str]:
    """The lab-only flags (lab-*) the fix used: an engine change the lab simulates, which no engine flag does."""
    used = ctx.var("fixed_flags") if ctx.defined("fixed_flags") else (ctx.draft_fix("fix").flags or {})
    return [f"{k} {v}" for k, v in (used or {}).items() if k.startswith(("lab-", "lab_"))]


@verdict_rule("wiring_fix_recovers", decides=("wiring",), reads=("dt", "spec_srv", "spec", "fixed", "base", "fix"))
def wiring_fix_recovers(ctx: RuleContext) -> Verdict | None:
    """Where the draft test found the wiring wrong: confirmed when the fix's accept length is clearly above the
    candidate's; or, where the candidate served nothing for a reason the draft test accounts for (the served ids
    cannot be fed, or a d2t of target ids read through the offsets the fix writes), clearly above the 1 + margin that
    a server accepting nothing cannot reach. A fix that does not recover leaves wiring unverified, said so."""
    dt, spec, fixed, base = ctx.draft_test("dt"), ctx.bench("spec"), ctx.bench("fixed"), ctx.bench("base")
    if not (dt.usable and dt.decision == "mismatch"):
        return None
    bar = 1 + ctx.margin
    fixed_ci, spec_ci = fixed.accept_length_ci, spec.accept_length_ci
    up = bool(has_interval(fixed_ci) and has_interval(spec_ci) and fixed_ci[0] > spec_ci[1])  # type: ignore[index,operator]
    above_nothing = bool(has_interval(fixed_ci) and fixed_ci[0] > bar)  # type: ignore[index,operator]
    candidate_served_nothing = not ctx.server("spec_srv").ok or spec.served_nothing
    accounted = dt.served_unfeedable or dt.d2t_derived
    if spec.ok:
        state = "confirmed" if up else "inconclusive"
    elif candidate_served_nothing and accounted:
        state = "confirmed" if above_nothing else "inconclusive"
    else:
        return None
    simulated = _lab_simulated(ctx)
    if spec.ok and not up:
        because = "fix not verified: the fix did not recover the accept length on intervals"
        if simulated:
            because += f" (with {', '.join(simulated)}, an engine change the lab simulates)"
    elif spec.ok:
        if simulated:
            because = (f"root cause verified with an engine change the lab simulates ({', '.join(simulated)}: no engine "
                       "flag does this; not a servable fix)")
        else:
            summary = ctx.draft_fix("fix").summary
            because = "fix verified" + (f" ({summary})" if not ctx.defined("fixed_flags") and summary else "")
        because += (f": accept length {num(spec.accept_length)} {ci(spec_ci)} -> {num(fixed.accept_length)} "
                    f"{ci(fixed_ci)} (95% CIs over {fixed.completed} requests), tok/s {num(spec.tok_s, 1)} -> "
                    f"{num(fixed.tok_s, 1)} {ci(fixed.tok_s_ci)} (baseline "
                    f"{num(base.tok_s, 1, missing='not measured')} {ci(base.tok_s_ci)})")
    elif fixed.status != "failed" and fixed.accept_length is not None:
        because = (f"the candidate flags never served; the fix serves: accept length {num(fixed.accept_length)} "
                   f"{ci(fixed_ci)} ({fixed.completed} requests), tok/s {num(fixed.tok_s, 1)} {ci(fixed.tok_s_ci)} vs "
                   f"baseline {num(base.tok_s, 1, missing='not measured')} {ci(base.tok_s_ci)}")
        if accounted:
            because += ("; " + (f"fix verified: above the {bar} a server that accepts nothing cannot reach"
                                if above_nothing else
                                f"fix not verified: not clearly above the {bar} of a server that accepts nothing"))
            if dt.d2t_derived and dt.server is not None and dt.best is not None:
                because += (" (the fix serves the d2t offsets and the wiring together; offline, with the d2t mended, "
                            f"the served wiring accepts {num(dt.server.tau_serving)} {ci(dt.server.tau_serving_ci)} "
                            f"against {num(dt.best.tau_serving)} {ci(dt.best.tau_serving_ci)} on {dt.best.wiring})")
    else:
        because = "the candidate flags never served, so there is nothing to compare the fix with"
    return Verdict(state, because)  # type: ignore[arg-type]


@verdict_rule("served_part_fix_recovers", decides=("served_part",), reads=("cf", "spec", "fixed"))
def served_part_fix_recovers(ctx: RuleContext) -> Verdict | None:
    """The part the counterfactual named, verified by serving the fix that addresses it: the accept length recovers
    on intervals, marginal or paired by request (both benchmarks send the same prompts in the same order, greedy)."""
    cf, spec, fixed = ctx.draft_test("cf"), ctx.bench("spec"), ctx.bench("fixed")
    if not cf.recovering:
        return None
    recovers = accept_recovers(fixed.raw, spec.raw)
    verdict = (cf.counterfactual.verdict if cf.counterfactual else None)
    because = f"offline, {verdict}; "
    if spec.ok:
        g = paired_gain(fixed.raw, spec.raw)
        because += (f"served with the fix accept length {num(spec.accept_length)} {ci(spec.accept_length_ci)} -> "
                    f"{num(fixed.accept_length)} {ci(fixed.accept_length_ci)}"
                    + (f", paired by request {num(g['ratio'])}x {ci(g['ci'])} over {g['n']}" if g else "")
                    + f" ({'fix verified' if recovers else 'fix not verified'})")
    else:
        because += "the candidate flags never served"
    return Verdict("confirmed" if recovers else "inconclusive", because)


@verdict_rule("rope_fix_recovers", decides=("rope_mismatch",), reads=("inspect", "cf", "spec", "fixed"))
def rope_fix_recovers(ctx: RuleContext) -> Verdict | None:
    """The static RoPE finding, confirmed only as served_part is: the counterfactual named RoPE as a part whose swap
    for the target's recovers offline, the fix served the corrected RoPE, and the accept length recovered."""
    if ctx.inspect().severity.get("rope") != "warning" or "rope" not in ctx.draft_test("cf").recovering:
        return None
    spec, fixed = ctx.bench("spec"), ctx.bench("fixed")
    up = accept_recovers(fixed.raw, spec.raw)
    because = ("the RoPE the draft's config gives is the part whose swap for the target's recovers offline "
               "(served_part), and the fix serves the draft with the target's RoPE: "
               + ("fix verified" if up else "fix not verified"))
    if spec.ok and spec.accept_length is not None and fixed.accept_length is not None:
        g = paired_gain(fixed.raw, spec.raw)
        because += (f" (accept length {num(spec.accept_length)} -> {num(fixed.accept_length)}"
                    + (f", paired {num(g['ratio'])}x {ci(g['ci'])}" if g else "") + ")")
    return Verdict("confirmed" if up else "inconclusive", because)


_SYMPTOM_AFTER_FIX = {
    "slower": "supported",
    "faster": "refuted",
    "undecided": "inconclusive",
}


@verdict_rule("residual_symptom_against_baseline", decides=("residual_symptom",), reads=("fixed", "base", "fix"))
def residual_symptom_against_baseline(ctx: RuleContext) -> Verdict | None:
    """The symptom after the fix, on its own terms: the fix's tok/s against the baseline's, paired by request where
    the two pair, else the marginal 95% intervals. Supported when still slower, refuted when faster, inconclusive when
    the interval includes no change."""
    fixed = ctx.bench("fixed")
    r = speed_against(fixed.raw, ctx.bench("base").raw)
    decision = r["decision"]
    because = (f"with the fix {num(r['tok_s'], 1, missing='no')} tok/s {ci(r['tok_s_ci'])} (accept length "
               f"{num(fixed.accept_length, missing='not measured')}) against the baseline's "
               f"{num(r['base_tok_s'], 1, missing='no')} {ci(r['base_tok_s_ci'])}")
    if r["how"] == "paired":
        because += f", paired by request {num(r['ratio'])}x {ci(r['ci'])} over {r['n']}"
    if decision == "slower":
        draft = ctx.draft_fix("fix").draft
        because += (": still slower than no speculation, so something else keeps it slow (another fault, or drafts "
                    "that cost more than they save: -e tune_after_fix=true tunes the chain); investigate the fixed "
                    "configuration next" + (f" (its draft: {draft})" if not ctx.defined("fixed_flags") and draft else ""))
    elif decision == "faster":
        because += ": faster than no speculation: the fix removes the symptom"
    elif decision == "undecided":
        because += ": the interval includes no change, so this sample cannot say whether the fix removes the symptom"
    state = _SYMPTOM_AFTER_FIX.get(decision or "")
    return Verdict(state, because) if state else None  # type: ignore[arg-type]


@verdict_rule("wiring_served_by_fix", decides=("wiring",), reads=("dt", "fixed_srv"))
def wiring_served_by_fix(ctx: RuleContext) -> Verdict | None:
    """vLLM says which layers it captures ("Using auxiliary layers from speculative config: ..."): supported when the
    fixed server feeds the wiring the draft test found best, where it found the served one wrong."""
    dt, decisions = ctx.draft_test("dt"), ctx.server("fixed_srv").decisions
    aux = decisions.aux_layers if decisions else None
    if dt.decision != "mismatch" or aux is None or aux.layers is None or dt.best is None or aux.layers != dt.best.wiring:
        return None
    return Verdict("supported", f"the fixed server at start-up: {aux.line}")
