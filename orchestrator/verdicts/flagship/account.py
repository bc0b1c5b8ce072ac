"""The symptom as a whole, accounted for: the flagship's answer in one line.

The symptom is a ladder of numbers, each rung on 95% intervals, after one check of correctness (greedy outputs with
speculation equal to those without, request by request: a difference is the first finding):

1. speed: speculation's tok/s against none (paired by request where the benchmarks pair);
2. served against offline: the served accept length against what this draft reaches offline on the target's own
   greedy continuation, on its best wiring (the draft test);
3. offline against its vocabulary: a draft that accepts almost nothing offline where a draft perfect within its
   vocabulary and map would accept clearly more (the ceiling) has a fault of its own (a tensor, a map, a head);
4. the ceiling itself: a vocabulary or map that cannot express the target's greedy tokens.

A rung that does not hold is a gap to explain. Every hypothesis the board weighed is then told by what it explains:
a confirmed root cause explains the gap its verified fix closed (all of it when the fixed server is at least as
fast as no speculation within intervals, else part); a supported finding whose served fix recovered nothing explains nothing; one never served
is untested. The status follows, and "nothing wrong" is only ever said where no rung shows a gap.

``account(ctx, titles)`` reads the registered results (``spec``, ``base``, ``fixed``, ``dt``, ``fix``) and the
board's final states; the front ends get it through orchestrator/session/answer.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from orchestrator.bench_compare import speed_against
from orchestrator.verdicts.context import RuleContext
from orchestrator.verdicts.flagship.text import ci, num
from orchestrator.verdicts.results import Bench

AccountStatus = Literal["verified", "partly_verified", "found_not_servable", "found_not_verified", "nothing_wrong",
                        "not_explained"]
RungState = Literal["holds", "gap", "unmeasured"]
Explains = Literal["all", "part", "nothing", "untested"]

#: the exit code of ``orchestrator run`` for each status (and for the sessions that are not the flagship's: 0)
EXIT_CODES: dict[AccountStatus, int] = {"verified": 0, "nothing_wrong": 0, "partly_verified": 3,
                                        "found_not_servable": 4, "found_not_verified": 5, "not_explained": 5}
#: hypotheses that are about the investigation or the user's own checks, not causes a rung can be closed by
NOT_CAUSES = ("serving_difference", "residual_symptom", "traffic_category", "traffic_sampling")
#: what a status says, first in the line
STATUS_TEXT: dict[AccountStatus, str] = {
    "verified": "Cause found, fix verified",
    "partly_verified": "Cause found and verified, symptom not gone",
    "found_not_servable": "Cause found, no fix this engine can serve",
    "found_not_verified": "Found, not verified",
    "nothing_wrong": "Nothing wrong",
    "not_explained": "Not explained yet",
}


class Rung(BaseModel):
    """One rung of the symptom's ladder: whether it holds on intervals, and its figures in words."""

    name: str
    state: RungState
    text: str


class Explanation(BaseModel):
    """A hypothesis the board weighed, told by how much of the symptom it explains."""

    hypothesis: str
    title: str
    state: str
    explains: Explains
    text: str


class SymptomAccount(BaseModel):
    """The flagship's answer: the symptom in numbers, the cause, the fix and whether it was verified."""

    status: AccountStatus
    headline: str
    symptom: str
    rungs: list[Rung] = Field(default_factory=list)
    explanations: list[Explanation] = Field(default_factory=list)
    cause: str | None = None
    fix: str | None = None
    speedup: float | None = None
    speedup_ci: list[float | None] | None = None
    fixed_speedup: float | None = None
    fixed_speedup_ci: list[float | None] | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    @property
    def symptom_stands(self) -> bool:
        return any(r.state == "gap" for r in self.rungs)


def _bounds(interval: Any) -> tuple[float, float] | None:
    """(low, high) of a two-sided interval with both ends, else None."""
    if isinstance(interval, (list, tuple)) and len(interval) == 2 and all(isinstance(v, (int, float)) for v in interval):
        return float(interval[0]), float(interval[1])
    return None


def _lossless(spec: Bench, base: Bench) -> Rung | None:
    """Greedy outputs with speculation against without, request by request (the bench's output digests, same prompt
    in the same place): speculation must not change what a greedy request returns, so a difference is the first
    finding, before any speed figure. None where the benchmarks carry no digests (an older session)."""
    mine, theirs = spec.raw.get("per_request"), base.raw.get("per_request")
    if not isinstance(mine, list) or not isinstance(theirs, list) or len(mine) != len(theirs):
        return None
    pairs = [(i, a.get("output_sha"), b.get("output_sha")) for i, (a, b) in enumerate(zip(mine, theirs, strict=True))
             if isinstance(a, dict) and isinstance(b, dict) and a.get("prompt_tokens") == b.get("prompt_tokens")]
    compared = [(i, a, b) for i, a, b in pairs if a and b]
    if not compared:
        return None
    differ = [i for i, a, b in compared if a != b]
    if differ:
        return Rung(name="lossless", state="gap", text=(
            f"speculation changed the greedy output of {len(differ)} of {len(compared)} requests (the first: request "
            f"{differ[0]}): a correctness fault, before any speed figure"))
    return Rung(name="lossless", state="holds",
                text=f"greedy outputs equal with and without speculation ({len(compared)} requests)")


def _speed(after: Bench, before: Bench) -> dict[str, Any]:
    """speed_against with a ratio also where only the marginal figures exist."""
    out = speed_against(after.raw, before.raw)
    if out.get("ratio") is None and isinstance(after.tok_s, (int, float)) and isinstance(before.tok_s, (int, float)) \
            and before.tok_s > 0:
        out["ratio"] = round(after.tok_s / before.tok_s, 4)
    return out


def _speed_text(speed: dict[str, Any], after: Bench, before: Bench, what: str) -> str:
    ratio = speed.get("ratio")
    interval = f" {ci(speed.get('ci'))}" if speed.get("how") == "paired" else ""
    figures = f"{num(after.tok_s, 1)} vs {num(before.tok_s, 1)} tok/s"
    return (f"{what} at {num(ratio)}x{interval} of no speculation ({figures})" if ratio is not None
            else f"{what}: {figures}")


def _rungs(ctx: RuleContext) -> tuple[list[Rung], dict[str, Any]]:
    spec, base, dt = ctx.bench("spec"), ctx.bench("base"), ctx.draft_test("dt")
    rungs: list[Rung] = []
    speed: dict[str, Any] = {}
    if not ctx.server("spec_srv").ok or spec.served_nothing:
        rungs.append(Rung(name="serves", state="gap", text="the server does not serve the candidate configuration"))
    elif spec.ok and base.ok:
        lossless = _lossless(spec, base)
        if lossless is not None:
            rungs.append(lossless)
        speed = _speed(spec, base)
        decision = speed.get("decision")
        text = _speed_text(speed, spec, base, "speculation")
        state: RungState = "gap" if decision == "slower" else "holds" if decision in ("faster", "undecided") \
            else "unmeasured"
        if decision == "undecided":
            text += ": not clearly faster or slower"
        rungs.append(Rung(name="speed", state=state, text=text))
    else:
        rungs.append(Rung(name="speed", state="unmeasured", text="speculation or its baseline was not benchmarked"))
    best = dt.best if dt.usable else None
    margin = 1 + ctx.margin
    served, offline = _bounds(spec.accept_length_ci), _bounds(best.tau_serving_ci if best else None)
    if spec.ok and best is not None and served is not None and offline is not None:
        below = served[1] < offline[0]
        rungs.append(Rung(
            name="served_vs_offline", state="gap" if below else "holds",
            text=(f"accept length {num(spec.accept_length)} {ci(spec.accept_length_ci)} served"
                  f"{' where' if below else ', and'} the draft reaches {num(best.tau_serving)} "
                  f"{ci(best.tau_serving_ci)} offline on the target's greedy continuation ({best.wiring})")))
        bound = dt.ceiling or {}
        ceiling = _bounds(bound.get("tau_ceiling_ci"))
        if ceiling is not None and ceiling[1] < margin:
            rungs.append(Rung(name="ceiling", state="gap", text=(
                f"the served vocabulary names {100 * (bound.get('coverage') or 0):.1f}% of the target's greedy "
                f"tokens: a perfect draft within it reaches {num(bound.get('tau_ceiling'))} "
                f"{ci(bound.get('tau_ceiling_ci'))}")))
        elif ceiling is not None and offline[1] < margin < ceiling[0]:
            rungs.append(Rung(name="offline_vs_ceiling", state="gap", text=(
                f"offline the draft accepts almost nothing ({num(best.tau_serving)} {ci(best.tau_serving_ci)}) "
                f"where a draft perfect within its vocabulary reaches {num(bound.get('tau_ceiling'))} "
                f"{ci(bound.get('tau_ceiling_ci'))}")))
    elif spec.ok and served is not None:
        rungs.append(Rung(name="served_vs_offline", state="unmeasured",
                          text=f"accept length {num(spec.accept_length)} {ci(spec.accept_length_ci)} served; the draft "
                               "test did not measure the draft offline"))
    return rungs, speed


def _explanations(ctx: RuleContext, titles: Mapping[str, str], fixed_faster: bool | None) -> list[Explanation]:
    spec, fixed = ctx.bench("spec"), ctx.bench("fixed")
    served_fix = fixed.ok and fixed.accept_length is not None
    recovered = bool(ctx.fact("weighing")["accept_recovered"]) or bool(ctx.fact("weighing")["draft_fix_recovered"])
    out: list[Explanation] = []
    for hid, title in titles.items():
        state = ctx.state(hid)
        if hid in NOT_CAUSES or state not in ("confirmed", "supported"):
            continue
        if state == "confirmed":
            explains: Explains = "all" if fixed_faster else "part"
            text = (f"its fix: accept length {num(spec.accept_length, missing='nothing')} -> "
                    f"{num(fixed.accept_length)} {ci(fixed.accept_length_ci)}")
        elif served_fix and not recovered:
            explains = "nothing"
            text = (f"the served fix recovered nothing ({num(spec.accept_length)} {ci(spec.accept_length_ci)} -> "
                    f"{num(fixed.accept_length)} {ci(fixed.accept_length_ci)})")
        else:
            explains = "untested"
            text = "no fix that addresses it was served and measured"
        out.append(Explanation(hypothesis=hid, title=title, state=state, explains=explains, text=text))
    return out


def _first_sentence(text: str) -> str:
    """The observation's first sentence without its parenthesised figures: what it names, short."""
    head = text.split(". ", 1)[0]
    cut = head.find(" (")
    return head[:cut] if cut > 20 else head


def account(ctx: RuleContext, titles: Mapping[str, str],
            evidence: Mapping[str, str] | None = None) -> SymptomAccount | None:
    """The account of a flagship session (None for a session that benchmarked no speculative server: not the
    flagship's shape). ``titles``: every hypothesis's title, in the playbook's order; ``ctx.states``: the board's
    final states; ``evidence``: each hypothesis's first supporting observation (what names the field, tensor or
    setting)."""
    evidence = evidence or {}
    if not ctx.server("spec_srv").registered and not ctx.bench("spec").registered:
        return None
    rungs, speed = _rungs(ctx)
    fixed, base = ctx.bench("fixed"), ctx.bench("base")
    fixed_speed = _speed(fixed, base) if fixed.ok and base.ok else {}
    # the symptom is gone with the fix where the fixed server is at least as fast as none within intervals: the
    # ladder's own rule for the speed rung, applied to the fix
    fixed_faster = fixed_speed.get("decision") in ("faster", "undecided") if fixed_speed else None
    explanations = _explanations(ctx, titles, fixed_faster)
    confirmed = [e for e in explanations if e.state == "confirmed"]
    supported = [e for e in explanations if e.state == "supported"]
    gap = any(r.state == "gap" for r in rungs)
    unmeasured = [r for r in rungs if r.state == "unmeasured"]
    fix = ctx.draft_fix("fix")
    status: AccountStatus
    if confirmed and fix.fix_status == "blocked":
        status = "found_not_servable"  # verified on a fix this engine cannot serve (the lab's engine change)
    elif confirmed:
        status = "verified" if fixed_faster or not gap else "partly_verified"
    elif any(e.explains == "untested" for e in supported):
        status = "found_not_servable" if fix.fix_status == "blocked" else "found_not_verified"
    elif gap or unmeasured or supported:
        # a gap nothing explains, a rung the session could not measure, or findings whose served fix recovered
        # nothing: never "nothing wrong"
        status = "not_explained"
    else:
        status = "nothing_wrong"
    symptom = ("; ".join(r.text for r in rungs if r.state == "gap") or "; ".join(r.text for r in rungs)
               or "nothing measured")
    def named(e: Explanation) -> str:
        seen = evidence.get(e.hypothesis)
        return f"[{e.hypothesis}] " + (_first_sentence(seen) if seen else e.title)

    cause = None
    if confirmed:
        cause = "; ".join(named(e) for e in confirmed)
    elif supported:
        cause = "; ".join(f"{named(e)} ({e.text})" for e in supported)
    fix_text = None
    if confirmed and fixed.ok and status == "found_not_servable":
        fix_text = (f"verified on a change this engine cannot serve by config or flags (accept length "
                    f"{num(fixed.accept_length)} {ci(fixed.accept_length_ci)}, "
                    + (_speed_text(fixed_speed, fixed, base, "the fix") if fixed_speed else "speed not weighed")
                    + "); what remains is in the fix derivation: "
                    + "; ".join(f"{b.what}: {b.why}" for b in fix.blockers)[:300])
    elif confirmed and fixed.ok:
        fix_text = (f"verified: accept length {num(fixed.accept_length)} {ci(fixed.accept_length_ci)}, "
                    + (_speed_text(fixed_speed, fixed, base, "the fix") if fixed_speed else "not weighed for speed"))
    elif fix.registered and fix.summary:
        fix_text = fix.summary
    said = STATUS_TEXT[status] if confirmed or status != "found_not_servable" else "Found, no fix this engine can serve"
    parts = [f"{said}: {symptom}"]
    if cause:
        parts.append(("cause: " if confirmed else "found: ") + cause)
    if fix_text and status != "nothing_wrong":
        parts.append(f"fix {fix_text}" if confirmed else f"fix derivation: {fix_text}")
    nothing = [e.hypothesis for e in explanations if e.explains == "nothing"]
    if nothing:
        parts.append("explains nothing: " + ", ".join(nothing))
    return SymptomAccount(status=status, headline=" — ".join(parts), symptom=symptom, rungs=rungs,
                          explanations=explanations, cause=cause, fix=fix_text, speedup=speed.get("ratio"),
                          speedup_ci=speed.get("ci") if speed.get("how") == "paired" else None,
                          fixed_speedup=fixed_speed.get("ratio"),
                          fixed_speedup_ci=fixed_speed.get("ci") if fixed_speed.get("how") == "paired" else None)
