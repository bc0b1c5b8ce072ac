"""The acceptance ceiling: what share of the target's own greedy tokens the draft could ever propose through the
vocabulary the engine serves it with, and the accept length a perfect draft with that vocabulary would reach.

A draft proposes only target ids its head can name: ``arange(head rows) + d2t`` as served (a head cut to its first
rows names only those). A target token outside that set can never be accepted, whatever the draft learnt, so the
chain stops there. The ceiling runs the draft test's own tally (metrics.Tally: the same cycles, the same intervals
over prompts) with "the token is expressible" in place of "the draft predicted it": a measured upper bound, not an
assumed one. A draft whose served accept length is far below the ceiling is limited by what it predicts; one whose
ceiling is itself low cannot be mended by training, only by its vocabulary (d2t, draft_vocab_size).

Standard library only. Public API: ``ceiling(runs, expressible, steps, confidence) -> dict``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Collection, Dict, List, Sequence, Tuple

from remote_probes.evaluation.interval_stats import ratio_interval
from remote_probes.evaluation.metrics import Tally, summarize

#: the most frequent target tokens the served vocabulary cannot name, said with the figure
TOP_MISSING = 8


def ceiling(runs: Sequence[Tuple[Sequence[int], int]], expressible: Collection[int], steps: int,
            confidence: float, count_first_token: bool = False) -> Dict[str, Any]:
    """``runs``: per prompt the full token sequence (prompt + the target's greedy continuation) and the prompt's
    length; ``expressible``: the target ids the served head can propose. Result: ``{"vocabulary", "coverage",
    "coverage_ci", "tau_ceiling", "tau_ceiling_ci", "missing": [{"id", "count"}], "tokens"}`` — coverage over the
    generated tokens (the ones the draft is asked to propose), the ceiling as tau_serving (accepted + 1 per cycle)."""
    allowed = set(int(i) for i in expressible)
    tallies: List[Tally] = []
    generated = outside = 0
    missing: Counter[int] = Counter()
    per_prompt: List[Tuple[int, int]] = []
    for tokens, prompt_len in runs:
        tokens = [int(t) for t in tokens]
        length = len(tokens)
        hits = [[(tokens[t + 2 + k] in allowed) if t + 2 + k < length else None for k in range(steps)]
                for t in range(length - 1)]
        tally = Tally(steps)
        tally.add(hits, prompt_len - 1)
        if count_first_token and tally.cycles:  # as draft_test.score_wiring counts SGLang's accept length
            tally.tokens += 1
        tallies.append(tally)
        gen = tokens[prompt_len:]
        out = [t for t in gen if t not in allowed]
        missing.update(out)
        generated += len(gen)
        outside += len(out)
        per_prompt.append((len(gen) - len(out), len(gen)))
    result: Dict[str, Any] = {"vocabulary": len(allowed), "tokens": generated,
                              "coverage": round(1 - outside / generated, 4) if generated else None,
                              "missing": [{"id": i, "count": c} for i, c in missing.most_common(TOP_MISSING)]}
    if tallies and any(t.cycles for t in tallies):
        stats = summarize(tallies, confidence)
        result["tau_ceiling"] = stats.get("tau_serving")
        result["tau_ceiling_ci"] = stats.get("tau_serving_ci")
    else:
        result["tau_ceiling"], result["tau_ceiling_ci"] = None, None
    iv = ratio_interval([float(a) for a, _ in per_prompt], [float(b) for _, b in per_prompt], confidence) \
        if len(per_prompt) > 1 and generated else None
    result["coverage_ci"] = iv.as_list() if iv is not None else None
    return result


def expressible_ids(head_rows: int, d2t: Any) -> List[int]:
    """The target ids a head of ``head_rows`` rows names through ``d2t`` offsets (a list, or None: identity)."""
    if d2t is None:
        return list(range(head_rows))
    offsets = [int(x) for x in d2t][:head_rows]
    return [i + offsets[i] if i < len(offsets) else i for i in range(head_rows)]
