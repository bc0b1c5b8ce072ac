"""Rules over the decisive experiments: the standalone draft test over candidate wirings, its counterfactual served
parts, the reconcile of each served configuration with the test's prediction, and the fix derived from them."""

from __future__ import annotations

from orchestrator.verdicts.context import RuleContext
from orchestrator.verdicts.flagship.text import ci, num
from orchestrator.verdicts.registry import Verdict, verdict_rule

_WIRING_DECISION = {"mismatch": "supported", "fine": "refuted", "inconclusive": "inconclusive",
                    "no_signal": "inconclusive"}


@verdict_rule("wiring_by_draft_test", decides=("wiring",), reads=("dt",))
def wiring_by_draft_test(ctx: RuleContext) -> Verdict | None:
    """The draft test's decision on 95% intervals over prompts (remote_probes/evaluation/draft_test.py): mismatch supports (only
    a fix that recovers confirms), fine refutes, inconclusive and no_signal decide nothing."""
    dt = ctx.draft_test(ctx.step_register or "dt")
    state = _WIRING_DECISION.get(dt.decision or "")
    return Verdict(state, dt.verdict or "") if state else None  # type: ignore[arg-type]


@verdict_rule("other_engine_reading", decides=("layer_id_convention",), reads=("dt", "inspect"))
def other_engine_reading(ctx: RuleContext) -> Verdict | None:
    """The OTHER engine's reading of the stored layer ids, scored by the draft test against the wiring this engine
    serves: supported when it beats the served wiring on intervals, refuted when the engines read alike, when the other
    reading is unknown, or when the served wiring is fine."""
    dt, inspect = ctx.draft_test(ctx.step_register or "dt"), ctx.inspect()
    vllm = ctx.fact("engine_family") == "vllm"
    feeds = inspect.feeds
    other = feeds.sglang if vllm else feeds.vllm
    rows = [w for w in dt.wirings if w.wiring == other]
    if other is not None and feeds.sglang != feeds.vllm and any(w.beats_server for w in rows):
        state = "supported"
    elif other is None or feeds.sglang == feeds.vllm or dt.decision == "fine":
        state = "refuted"
    else:
        return None
    because = f"{'SGLang' if vllm else 'vLLM'}'s reading {other} vs the served {dt.server_wiring}: "
    for w in rows:
        because += f"tau {num(w.tau_serving)} {ci(w.tau_serving_ci)}"
        if dt.server is not None:
            vs = w.vs_server or {}
            because += (f" vs {num(dt.server.tau_serving)} {ci(dt.server.tau_serving_ci)}, paired gain "
                        f"{num(vs.get('ratio'))}x {ci(vs.get('ratio_ci'))}")
        else:
            because += " vs nothing served (the served ids cannot be fed)"
    return Verdict(state, f"{because}; {dt.verdict}")  # type: ignore[arg-type]


@verdict_rule("served_part_by_counterfactual", decides=("served_part",), reads=("cf",))
def served_part_by_counterfactual(ctx: RuleContext) -> Verdict | None:
    """Each part the engine serves swapped for the other source and scored on the served wiring: a swap that passes
    the wiring test's own mismatch rule supports served_part (naming the part and the engine's file:line); swaps that
    all fail to recover refute it."""
    cf = ctx.draft_test(ctx.step_register or "cf")
    c = cf.counterfactual
    because = (c.verdict if c else None) or cf.error or ""
    if cf.recovering:
        return Verdict("supported", because)
    if c is not None and c.swaps:
        return Verdict("refuted", because)
    return None


@verdict_rule("served_part_after_reconcile", decides=("served_part",), reads=("cf_rc", "rc"))
def served_part_after_reconcile(ctx: RuleContext) -> Verdict | None:
    """After a failed reconcile, the counterfactual run on the same terms: a recovering swap supports served_part
    (unverified until a fix addressing it is served)."""
    cf = ctx.draft_test(ctx.step_register or "cf_rc")
    if not cf.recovering:
        return None
    verdict = (cf.counterfactual.verdict if cf.counterfactual else None) or cf.error
    return Verdict("supported", f"the reconcile failed ({ctx.reconcile().verdict}); {verdict}; not verified: no fix "
                                "addressing it was served after the reconcile")


_RECONCILE_DECISION = {"discrepancy": "supported", "reconciled": "refuted", "undecided": "inconclusive"}


#: the head of a serving difference the fix accounts for (report_sections.py says it so, not "not explained yet")
ACCOUNTED_FOR = "accounted for by the fix"


@verdict_rule("serving_difference_by_reconcile", decides=("serving_difference",), reads=("rc",))
def serving_difference_by_reconcile(ctx: RuleContext) -> Verdict | None:
    """Each speculative benchmark against the draft test's prediction for exactly its configuration: disjoint 95%
    intervals support a serving difference, overlapping ones refute it. A candidate the offline model mispredicts
    whose fixed draft then reconciles has its difference accounted for: what the offline model did not apply (a
    limit of the engine, a value it serves otherwise) is what the fix changed, said with the fix."""
    rc = ctx.reconcile(ctx.step_register or "rc")
    state = _RECONCILE_DECISION.get(rc.decision or "")
    spec_rc, fixed_rc = rc.by_name.get("spec"), rc.by_name.get("fixed")
    if (state == "supported" and spec_rc is not None and fixed_rc is not None and spec_rc.decision == "discrepancy"
            and fixed_rc.decision == "reconciled" and fixed_rc.draft != spec_rc.draft):
        fix = ctx.draft_fix("fix")
        changed = f": {fix.summary}" if fix.registered and fix.summary else ""
        return Verdict("supported", f"{ACCOUNTED_FOR}: {spec_rc.verdict or 'the candidate is disjoint'}; the server "
                                    f"with the fixed draft ({fixed_rc.draft}) reconciles with its prediction, so what "
                                    f"the offline model does not apply is what the fix changed{changed}")
    return Verdict(state, rc.verdict or "") if state else None  # type: ignore[arg-type]


@verdict_rule("wiring_fix_blocked", decides=("wiring",), reads=("fix",))
def wiring_fix_blocked(ctx: RuleContext) -> Verdict | None:
    """The fix derivation found that this engine cannot serve the trained wiring (a blocker): wiring supported, with
    draft_fix's summary of what would serve it."""
    fix = ctx.draft_fix(ctx.step_register or "fix")
    if any(b.what == "wiring" for b in fix.blockers):
        return Verdict("supported", fix.summary or "")
    return None
