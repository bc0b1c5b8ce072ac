"""How each token is picked in speculative decoding: greedily, or sampled as vLLM 0.32's rejection sampler does
(issue 40). The lab's stand-ins serve with it; the offline replay of a traffic file simulates serving with it.

Greedy (temperature 0): the argmax of the target's logits, penalised as the engine does (penalties.py); a verify
cycle keeps the drafts that equal the target's argmax, then the target's own token.

Sampled (temperature > 0; the lab's vLLM stand-in, and the offline simulation): the target's logits, penalised,
divided by the temperature and soft-maxed, as vLLM's ``apply_sampling_constraints`` does with no top-k/top-p. An EAGLE draft gives vLLM no
probabilities (its proposer keeps the argmax: ``draft_probs`` is None), so its rejection sampler
(v1/sample/rejection_sampler.py ``rejection_random_sample_kernel``, ``NO_DRAFT_PROBS``) accepts draft token d at
position k when ``p_target(d) >= u``, u uniform in [0, 1); at the first rejection it samples the recovered token from
the target's distribution with d removed (``sample_recovered_tokens_kernel``); when every draft is accepted, the
bonus token from the target's distribution at the last position. Each request draws from its own generator (its
``seed``, else a fresh one): the lab's draws are not vLLM's, so a sampled request's figure equals real vLLM's in
distribution, not token for token.

Public API: ``Decoding``, ``GREEDY``, ``TokenChooser``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

import torch

from remote_probes.evaluation.penalties import (
    NONE,
    RULES,
    Penalties,
    Rule,
    penalised_argmax,
    penalised_logits,
)


@dataclass(frozen=True)
class Decoding:
    penalties: Penalties = NONE
    rule: Rule = RULES["vllm"]
    temperature: float = 0.0
    seed: Optional[int] = None

    @property
    def sampled(self) -> bool:
        return self.temperature > 0


GREEDY = Decoding()


class TokenChooser:
    """One request's token choices: ``next`` for a plain step, ``verify`` for a speculative cycle."""

    def __init__(self, decoding: Decoding, prompt: List[int]) -> None:

        self.decoding = decoding
        self.prompt = prompt if not decoding.penalties.neutral else []
        self.generator: Any = None
        if decoding.sampled:
            self.generator = torch.Generator().manual_seed(
                decoding.seed if decoding.seed is not None else random.SystemRandom().randrange(2 ** 63))

    def _probs(self, logits: Any, histories: List[List[int]]) -> Any:

        d = self.decoding
        return torch.softmax(penalised_logits(logits, self.prompt, histories, d.penalties, d.rule) / d.temperature,
                             dim=-1)

    def _draw(self, probs: Any) -> int:

        return int(torch.multinomial(probs, 1, generator=self.generator))

    def next(self, logits: Any, history: List[int]) -> int:
        """The token after one position's logits ([1, vocab])."""
        d = self.decoding
        if not d.sampled:
            return penalised_argmax(logits, self.prompt, [history], d.penalties, d.rule)[0]
        return self._draw(self._probs(logits, [history])[0])

    def verify(self, logits: Any, histories: List[List[int]], proposal: List[int]) -> Tuple[int, int]:
        """(drafts accepted, the token after them) for one verify cycle: ``logits`` [K + 1, vocab] at the
        positions of the K drafts and after them, ``histories`` each position's output so far (penalties.py)."""
        d = self.decoding
        steps = len(proposal)
        if not d.sampled:
            preds = penalised_argmax(logits, self.prompt, histories, d.penalties, d.rule)
            m = 0
            while m < steps and proposal[m] == preds[m]:
                m += 1
            return m, preds[m]

        probs = self._probs(logits, histories)
        for k, token in enumerate(proposal):
            u = float(torch.rand((), generator=self.generator))
            if float(probs[k, token]) >= u:
                continue
            rest = probs[k].clone()
            rest[token] = 0.0
            return k, self._draw(rest / rest.sum())
        return steps, self._draw(probs[steps])
