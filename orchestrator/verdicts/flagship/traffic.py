"""The flagship's rule on the user's own traffic (issue 40; ``-e traffic=FILE``): the traffic file replayed on the
candidate configuration and again on the fix, acceptance per category with 95% intervals
(orchestrator/traffic/acceptance.py). A category served worse than every other, apart on intervals, is a lead the
session cannot verify by a restart (the draft would have to be trained on it), so it is supported, never confirmed."""

from __future__ import annotations

from typing import Any

from orchestrator.verdicts.context import RuleContext
from orchestrator.verdicts.flagship.text import ci, num
from orchestrator.verdicts.registry import Verdict, verdict_rule


def _replay(ctx: RuleContext) -> tuple[str, dict[str, Any]] | None:
    """The latest replay that measured: the fix's, else the candidate's."""
    for name, what in (("fixed_traffic", "the fix"), ("spec_traffic", "the candidate configuration")):
        bench = ctx.bench(name)
        table = bench.raw.get("traffic") if bench.ok else None
        if isinstance(table, dict) and not table.get("unmeasured"):
            return what, table
    return None


@verdict_rule("traffic_category_apart", decides=("traffic_category",), reads=("fixed_traffic", "spec_traffic"))
def traffic_category_apart(ctx: RuleContext) -> Verdict | None:
    """Supported when one category's accept-length interval lies below every other decided category's on the
    latest replay (the fix's where there is one: a category that still trails once the fault is fixed is the
    draft's, not the wiring's); inconclusive when two or more categories are decided and none is told apart; says
    nothing with fewer than two decided categories (one category, or too few requests in the others)."""
    found = _replay(ctx)
    if found is None:
        return None
    what, table = found
    decided = [e for e in table.get("by_category") or [] if e.get("accept_length_ci")]
    low = table.get("lowest_category")
    if low:
        return Verdict("supported", (
            f"your traffic on {what}: {low['category']} accept length {num(low['accept_length'])} "
            f"{ci(low['accept_length_ci'])} against {low['against']} {num(low['against_accept_length'])} "
            f"{ci(low['against_ci'])}, below every other category on 95% intervals: the draft serves "
            f"{low['category']} worst; check that its training data covers it (a domain, a language or a chat "
            "template it never saw)"))
    if len(decided) >= 2:
        listed = ", ".join(f"{e['category']} {num(e['accept_length'])} {ci(e['accept_length_ci'])}" for e in decided)
        return Verdict("inconclusive", f"your traffic on {what}: no category is told apart on 95% intervals ({listed})")
    return None
