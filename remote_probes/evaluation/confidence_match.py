"""The draft's first proposal by the target's confidence (issue 40): what tells a draft that does not predict a
category from a category whose text is harder to predict for any draft.

A category of traffic may trail the best-served one because the draft never learned it (its training data did not
cover it), or because the target itself is less sure there: an EAGLE-3 draft agrees less with an uncertain target
on any text (the lab's draft trained on both halves of a corpus still trails on its harder half). Per replayed
request, each generated token is put in a bin of the target's probability of it (the capture forward's softmax)
and the draft's first proposal for it is counted right or wrong (teacher-forced, greedy, as the draft test's first
step is). The orchestrator (orchestrator/traffic/reconciled.py ``confidence_matched``) then compares a category with
the best-served one at the same confidence: the rate the draft would reach on the category's tokens if it did as well
as on the best category's tokens of the same confidence, against the rate it reaches.

Public API: ``BIN_EDGES``, ``token_probabilities(torch, logits, seq)``,
``first_step_by_confidence(torch, draft, run, wiring, probabilities)``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

#: bins of the target's probability of the token it generated, finer where a small target's tokens crowd (the lab's
#: 12-layer target gives its greedy tokens 0.08 on average) and a large one's (0.9 and up on code)
BIN_EDGES = (0.0, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 0.9, 0.97, 1.0)


def token_probabilities(torch: Any, logits: Any, seq: Any) -> List[float]:
    """``[i]``: the target's probability of ``seq[i + 1]`` after ``seq[: i + 1]`` (one forward's logits)."""
    probs = torch.softmax(logits[0, :-1].float(), dim=-1)
    return [round(p, 6) for p in probs.gather(1, seq[0, 1:].unsqueeze(1)).squeeze(1).tolist()]


def bin_of(p: float) -> int:
    for b, upper in enumerate(BIN_EDGES[1:-1]):
        if p < upper:
            return b
    return len(BIN_EDGES) - 2


def first_step_by_confidence(torch: Any, draft: Any, run: Tuple[Any, int, Dict[int, Any]], wiring: List[int],
                             probabilities: List[float]) -> Dict[str, Any]:
    """``{"bins": [[right, tokens], ..] (one per BIN_EDGES bin), "target_probability": mean over the counted tokens}``:
    the draft's first proposal (unpenalised, as both engines propose) for each generated token it drafts (the first
    generated token is the target's own), by the target's probability of that token."""
    seq, prompt_len, hs = run
    length = int(seq.shape[1])
    dtype = next(draft.parameters()).dtype
    aux = torch.cat([hs[j] for j in wiring], dim=-1)[:, :length - 1].to(dtype)
    nxt = torch.cat([seq[:, 1:], seq.new_zeros(1, 1)], dim=1)
    with torch.no_grad():
        proposals = draft.ttt_forward(aux, nxt, steps=1)[0].token_ids[0].tolist()
    tokens = seq[0].tolist()
    bins = [[0, 0] for _ in BIN_EDGES[1:]]
    total = 0.0
    for t in range(prompt_len - 1, length - 2):  # column t proposes token t + 2, which the target gave p[t + 1]
        p = probabilities[t + 1]
        cell = bins[bin_of(p)]
        cell[0] += int(proposals[t] == tokens[t + 2])
        cell[1] += 1
        total += p
    counted = sum(c[1] for c in bins)
    return {"bins": bins, "target_probability": round(total / counted, 6) if counted else None}
