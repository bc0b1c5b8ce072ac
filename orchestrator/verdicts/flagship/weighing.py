"""Rules of the final weighing: a static finding is a root cause only when the fix that addresses it recovers, the
draft is blamed only when nothing else stands, and a flag override or an algorithm is confirmed by its fix
(the weighing itself is the fact ``weighing``, orchestrator/verdicts/flagship/facts.py)."""

from __future__ import annotations

import json

from orchestrator.verdicts.context import RuleContext
from orchestrator.verdicts.flagship.text import ci, num
from orchestrator.verdicts.registry import Verdict, verdict_rule
from orchestrator.verdicts.results import InspectFinding, has_interval

#: the part of the checkpoint each finding is about, as draft_fix names its blockers
CHECKPOINT_PARTS = {"lm_head_missing": "lm_head", "d2t_mapping": "d2t", "architecture": "architecture"}
#: the checkpoint findings that, standing, leave something other than the draft's training to blame
CHECKPOINT_FAULTS = ("lm_head_missing", "d2t_mapping", "architecture", "draft_field")
POSITIVE = ("supported", "confirmed")


@verdict_rule("checkpoint_finding_fix_recovers", decides=tuple(CHECKPOINT_PARTS),
              reads=("spec", "fixed", "dt", "rc", "fix", "fixed_srv"))
def checkpoint_finding_fix_recovers(ctx: RuleContext) -> Verdict | None:
    """A supported checkpoint finding (random head, wrong d2t, base architecture) leaves a draft that accepts almost
    nothing: refuted when the server clearly accepts more; confirmed by a served fix that addresses it (its part is
    not among the fix's blockers) and recovers; otherwise inconclusive, the reason says what the fix did."""
    if ctx.own_state != "supported":
        return None
    w = ctx.fact("weighing")
    part = CHECKPOINT_PARTS[ctx.hypothesis_id]
    spec, fixed, dt, rc = ctx.bench("spec"), ctx.bench("fixed"), ctx.draft_test("dt"), ctx.reconcile()
    finding = ctx.inspect().finding("d2t") if part == "d2t" else None
    # a d2t lost on export leaves draft id i read as target id i: wrong only where the map was not the identity, so
    # a server that still accepts contradicts nothing (the lab's small vocabulary is mostly identity)
    partial = finding is not None and finding.details.get("verdict") == "missing"
    blocker = next((b for b in ctx.draft_fix("fix").blockers if b.what == part), None)
    if w["served_accepts"] and not partial and blocker is not None:
        # the fix derivation still names this part: the finding stands (never ruled out beside it), and the server
        # accepting something says only that the engine serves some other head, map or loader in its place
        return Verdict("inconclusive", (
            f"the finding stands (the fix derivation names {part}: {blocker.why}), though the server accepts "
            f"{num(spec.accept_length)} {ci(spec.accept_length_ci)}, clearly above the {1 + ctx.margin} of a draft "
            f"that accepts nothing: the engine serves something in its place, and what the fault costs is not measured "
            f"(no copy with {part} mended could be served)"))
    if w["served_accepts"] and not partial:
        because = (f"contradicted by the server's measurement: served accept length {num(spec.accept_length)} "
                   f"{ci(spec.accept_length_ci)} is clearly above the {1 + ctx.margin} of a draft that accepts almost "
                   "nothing")
        if dt.registered and dt.server is not None:
            because += (f" (the draft test on the served wiring: {num(dt.server.tau_serving)} "
                        f"{ci(dt.server.tau_serving_ci)})")
        return Verdict("refuted", because)
    if w["draft_fix_recovered"] and part in w["fix_left"]:
        because = (f"fix not verified: the served fix left {part} as it was (a blocker no config or flag of this engine "
                   f"mends) and recovered the accept length {num(spec.accept_length, missing='of nothing')} -> "
                   f"{num(fixed.accept_length)} {ci(fixed.accept_length_ci)} by what it did change")
        return Verdict("inconclusive", because)
    if w["draft_fix_recovered"]:
        fixed_rc = rc.by_name.get("fixed")
        before = num(spec.accept_length, missing="nothing (the candidate failed while serving)")
        return Verdict("confirmed", f"fix verified: the fixed draft {fixed_rc.draft if fixed_rc else None} recovered "
                                    f"the accept length {before} {ci(spec.accept_length_ci)} -> "
                                    f"{num(fixed.accept_length)} {ci(fixed.accept_length_ci)}")
    if fixed.accept_length is not None:
        spec_rc, fixed_rc = rc.by_name.get("spec"), rc.by_name.get("fixed")
        same = fixed_rc is not None and fixed_rc.draft == (spec_rc.draft if spec_rc else None)
        because = (f"fix not verified: the fix served {'the same draft' if same else 'a draft'} and measured "
                   f"{num(fixed.accept_length)} {ci(fixed.accept_length_ci)} against {num(spec.accept_length)} "
                   f"{ci(spec.accept_length_ci)}")
    else:
        because = "fix not verified: no fix was served and measured"
    return Verdict("inconclusive", because)


@verdict_rule("field_fix_recovers", decides=("draft_field",),
              reads=("inspect", "spec_srv", "spec", "fixed", "rc", "fix", "fixed_srv"))
def field_fix_recovers(ctx: RuleContext) -> Verdict | None:
    """A draft-config field that contradicts the checkpoint (draft_inspect's ``draft_fields`` error) is the root cause
    when the served fix (the corrected config, or the host's fixed draft) recovers the accept length on intervals;
    a fix that served and did not recover leaves it inconclusive, with both figures. Unlike a missing head, a wrong
    field need not leave a draft that accepts nothing, so the server accepting something refutes nothing."""
    if ctx.own_state != "supported":
        return None
    w = ctx.fact("weighing")
    spec, fixed, rc = ctx.bench("spec"), ctx.bench("fixed"), ctx.reconcile()
    finding = ctx.inspect().finding("draft_fields")
    fields = ", ".join(str(f) for f in (finding.details.get("fields") if finding else None) or []) or "the field"
    before = f"{num(spec.accept_length, missing='of nothing (the candidate failed while serving)')} {ci(spec.accept_length_ci)}"
    if w["draft_fix_recovered"] and "config" not in w["fix_left"]:
        fixed_rc = rc.by_name.get("fixed")
        return Verdict("confirmed", f"fix verified: the draft with {fields} corrected "
                                    f"({fixed_rc.draft if fixed_rc else 'the fixed draft'}) recovered the accept length "
                                    f"{before} -> {num(fixed.accept_length)} {ci(fixed.accept_length_ci)}")
    spec_failed = not ctx.server("spec_srv").ok or spec.status == "failed"
    fixed_ci = fixed.accept_length_ci
    if (spec_failed and has_interval(fixed_ci) and fixed_ci[0] > 1 + ctx.margin  # type: ignore[index,operator]
            and "config" not in w["fix_left"]):
        return Verdict("confirmed", f"fix verified: the engine did not serve the candidate; with {fields} corrected "
                                    f"it serves and accepts {num(fixed.accept_length)} {ci(fixed_ci)}")
    if fixed.accept_length is not None:
        return Verdict("inconclusive", f"fix not verified: the fixed server measured {num(fixed.accept_length)} "
                                       f"{ci(fixed.accept_length_ci)} against {before}, not clearly above, or it "
                                       "served the same draft")
    return Verdict("inconclusive", "fix not verified: no fix was served and measured")


@verdict_rule("layer_ids_fix_verified", decides=("layer_id_convention",), reads=("spec", "fixed"))
def layer_ids_fix_verified(ctx: RuleContext) -> Verdict | None:
    """The other engine's reading is the wiring the fix serves: confirmed when that fix verified wiring."""
    if ctx.own_state != "supported":
        return None
    spec, fixed = ctx.bench("spec"), ctx.bench("fixed")
    if ctx.state("wiring") != "confirmed":
        return Verdict("inconclusive", "fix not verified: the wiring fix did not recover the accept length")
    before = (f"{num(spec.accept_length)} {ci(spec.accept_length_ci)}" if spec.accept_length is not None
              else "of a candidate that served nothing")
    return Verdict("confirmed", f"the fix feeds the other engine's reading and recovered the accept length {before} -> "
                                f"{num(fixed.accept_length)} {ci(fixed.accept_length_ci)}")


def _not_yet_cleared(ctx: RuleContext) -> tuple[list[str], list[str]]:
    """(what still stands against blaming the draft, what was checked and cleared): every static finding of the
    checkpoint above ``info``, and the counterfactual served parts (run, and none recovering)."""
    standing, cleared = [], []
    inspect = ctx.inspect()
    runs = [cf for cf in (ctx.draft_test("cf"), ctx.draft_test("cf_rc")) if cf.ok and cf.counterfactual is not None]
    scored = {str(swap.get("part")) for cf in runs for swap in cf.counterfactual.swaps}  # type: ignore[union-attr]
    if not inspect.registered or inspect.failed:
        standing.append("the static checks of the checkpoint did not run")
    else:
        flagged = [f for f in inspect.findings if f.severity != "info" and not _candidates_scored(f, scored)]
        standing += [f"static finding {f.id} ({f.severity}): {f.message}" for f in flagged]
        candidates = [f for f in inspect.findings if f.severity == "warning" and _candidates_scored(f, scored)]
        if candidates:
            cleared.append("the config fields that differ from the target's, scored by the counterfactual ("
                           + ", ".join(str(x) for f in candidates for x in f.details.get("fields") or []) + ")")
        if not flagged:
            cleared.append(f"{len(inspect.findings)} static checks of the checkpoint ("
                           + ("the rest all info)" if candidates else "all info)"))
    dt = ctx.draft_test("dt")
    apart = dt.states_apart
    if apart is not None:
        # the draft may be fine for the function it was trained on: the engine serves another one
        first, diff, tolerance = apart
        engine = (dt.states or {}).get("engine") or "the serving engine"
        standing.append(f"{engine} computes other hidden states than a transformers copy of this target: id {first} "
                        f"(the {'embedding output' if first == 0 else f'output of decoder layer {first - 1}'}) "
                        f"first, {diff:.2g} of its largest value apart (tolerance {tolerance:g}), so a draft trained on "
                        "transformers' states (SpecForge's and speculators' offline path) is scored on other inputs "
                        "than it learned: compare the engine's and transformers' forward of that layer for this "
                        "class, or train the draft on the engine's own states")
    bound = dt.ceiling or {}
    bound_ci = bound.get("tau_ceiling_ci")
    if has_interval(bound_ci) and bound_ci[1] < 1 + ctx.margin:  # type: ignore[index]
        # even a draft perfect within its vocabulary could not clearly accept: the map, not the training
        standing.append(f"the acceptance ceiling: the served vocabulary ({bound.get('vocabulary')} target ids) names "
                        f"{100 * (bound.get('coverage') or 0):.1f}% of the target's greedy tokens, so a draft perfect "
                        f"within it reaches tau {num(bound.get('tau_ceiling'))} {ci(bound_ci)}: its d2t map or "
                        "draft_vocab_size cannot express what this target says")
    elif has_interval(bound_ci):
        cleared.append(f"the acceptance ceiling (tau {num(bound.get('tau_ceiling'))} {ci(bound_ci)} for a draft "
                       "perfect within the served vocabulary)")
    if not runs:
        standing.append("the counterfactual served parts did not run")
    for cf in runs:
        assert cf.counterfactual is not None
        parts = [str(swap.get("part")) for swap in cf.counterfactual.swaps]
        if cf.recovering:
            standing.append(f"the counterfactual names a served part: {', '.join(cf.recovering)}")
        else:
            cleared.append(f"the counterfactual swaps ({', '.join(parts) or 'none'}): none recovers")
    return standing, cleared


def _candidates_scored(finding: InspectFinding, scored: set[str]) -> bool:
    """A field reading whose only findings are candidates (numeric fields off the target's), each scored by a
    counterfactual swap (``field.<name>``): cleared by the counterfactual, not standing against the last resort."""
    fields = finding.details.get("fields") or []
    return (finding.id == "draft_fields" and finding.severity == "warning" and bool(fields)
            and all(f"field.{name}" in scored for name in fields))


@verdict_rule("draft_quality_last_resort", decides=("draft_quality",),
              reads=("dt", "rc", "spec", "fixed", "inspect", "cf", "cf_rc"))
def draft_quality_last_resort(ctx: RuleContext) -> Verdict | None:
    """The last resort, blaming the draft's training: it accepts almost nothing on every wiring, the server measures
    what the offline test predicts, no fix recovered it, no checkpoint fault is supported, no static finding above
    ``info`` stands, and the counterfactual served parts ran with none recovering; the reason says which checks
    cleared and what to check in the training. Short of that last clearing (a finding stands, or the counterfactual
    did not run or names a part), inconclusive: not explained yet, with what stands. Refuted when the draft test's
    best wiring clearly accepts more than 1 + margin."""
    dt, rc = ctx.draft_test("dt"), ctx.reconcile()
    spec_rc = rc.by_name.get("spec")
    no_signal = dt.usable and dt.decision == "no_signal"
    standing: list[str] = []
    cleared: list[str] = []
    if (no_signal and spec_rc is not None and spec_rc.decision == "reconciled"
            and all(ctx.state(h) not in POSITIVE for h in CHECKPOINT_FAULTS)
            and not ctx.fact("weighing")["accept_recovered"]):
        standing, cleared = _not_yet_cleared(ctx)
        state = "inconclusive" if standing else "supported"
    elif dt.usable and dt.best is not None and dt.best.tau_serving_ci and dt.best.tau_serving_ci[0] is not None \
            and dt.best.tau_serving_ci[0] > 1 + ctx.margin:
        state = "refuted"
    else:
        return None
    if standing:
        because = (f"not the last resort yet: the draft accepts almost nothing ({dt.verdict}) and the server agrees, "
                   f"but {'; '.join(standing)}: not explained yet")
    elif no_signal:
        records = (dt.draft or {}).get("records")
        target = (dt.target or {}).get("path") or "the target"
        because = (f"the draft does not predict this target: {dt.verdict}; the server agrees "
                   f"({spec_rc.verdict if spec_rc is not None else 'not reconciled'}); no checkpoint fault stands and no "
                   f"fix recovered it (cleared: {'; '.join(cleared)}). Check: was the training data generated by this "
                   f"target ({target}), the target revision or verifier the draft records"
                   + (f" ({json.dumps(records, sort_keys=True)})" if records else " (it records none)")
                   + ", the chat template used in training against the served one, and the training context length "
                   "against the prompts served")
    elif dt.usable and dt.best is not None:
        because = (f"the draft predicts this target on some wiring: best {dt.best.wiring} tau "
                   f"{num(dt.best.tau_serving)} {ci(dt.best.tau_serving_ci)}")
    else:
        because = "the draft test did not run"
    return Verdict(state, because)  # type: ignore[arg-type]


@verdict_rule("flags_override_fix_recovers", decides=("flags_override",), reads=("spec_srv", "spec", "fixed", "dt"))
def flags_override_fix_recovers(ctx: RuleContext) -> Verdict | None:
    """An override is the root cause only if the draft itself is fine and correcting the flags recovers the accept
    length (the seed's red herring: the override was real, and not the cause)."""
    srv = ctx.server("spec_srv")
    if not srv.overrides:
        return None
    w = ctx.fact("weighing")
    state = "confirmed" if w["draft_ok"] and w["accept_recovered"] else "inconclusive"
    spec, fixed, dt = ctx.bench("spec"), ctx.bench("fixed"), ctx.draft_test("dt")
    if spec.ok and fixed.ok:
        because = (f"the server changed {', '.join(o.flag for o in srv.overrides)}; the draft offline: "
                   f"{dt.decision or 'not tested'}; with the fixed flags accept length {num(spec.accept_length)} "
                   f"{ci(spec.accept_length_ci)} -> {num(fixed.accept_length)} {ci(fixed.accept_length_ci)} "
                   f"({'recovered' if w['accept_recovered'] else 'not clearly recovered'}, 95% CIs)")
    else:
        because = "not measured: a server did not serve"
    return Verdict(state, because)  # type: ignore[arg-type]


@verdict_rule("wrong_algorithm_fix_recovers", decides=("wrong_algorithm",), reads=("spec_srv", "inspect", "spec", "fixed"))
def wrong_algorithm_fix_recovers(ctx: RuleContext) -> Verdict | None:
    """--speculative-algorithm EAGLE with an EAGLE-3 draft (fc skipped): confirmed when serving it as EAGLE3
    recovers the accept length."""
    algorithm = str(ctx.server("spec_srv").effective.get("speculative_algorithm", "")).upper()
    if algorithm != "EAGLE" or ctx.inspect().severity.get("architecture") != "info" \
            or not ctx.fact("weighing")["accept_recovered"]:
        return None
    spec, fixed = ctx.bench("spec"), ctx.bench("fixed")
    if spec.ok and fixed.ok:
        because = (f"speculative_algorithm EAGLE with an EAGLE-3 draft: fc skipped, accept length {spec.accept_length} "
                   f"{ci(spec.accept_length_ci)}; with EAGLE3 {num(fixed.accept_length)} {ci(fixed.accept_length_ci)}")
    else:
        because = "not measured: a server did not serve"
    return Verdict("confirmed", because)
