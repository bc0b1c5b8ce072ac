"""How each token is picked in speculative decoding: greedily, or sampled as vLLM 0.32's rejection sampler and
SGLang's target-only kernel do (issue 40). The lab's stand-ins serve with it; the offline replay of a traffic file
simulates serving with it.

Greedy (temperature 0): the argmax of the target's logits, penalised as the engine does (penalties.py); a verify
cycle keeps the drafts that equal the target's argmax, then the target's own token.

Sampled (temperature > 0; the lab's stand-ins, and the offline simulation): the target's logits, penalised,
divided by the temperature, then cut to the request's top-k and top-p as vLLM 0.32's ``apply_sampling_constraints``
(v1/sample/rejection_sampler.py) and its sampler (v1/sample/sampler.py ``sample``) do with
``apply_top_k_top_p_pytorch`` (v1/sample/ops/topk_topp_sampler.py: the logits sorted ascending; below the k-th
largest value masked, ties kept; then the ascending cumulative probability ``<= 1 - p`` masked, the largest always
kept), and soft-maxed. ``min_p`` (a fraction of the largest probability, after the temperature: the sampler's
argmax-invariant ``MinPLogitsProcessor``) applies without speculation only: vLLM 0.32 refuses a min_p request on a
speculative server (sampling_params.py ``_validate_spec_decode``), and builds no min-p processor there
(v1/sample/logits_processor/__init__.py). An EAGLE draft gives vLLM no
probabilities (its proposer keeps the argmax: ``draft_probs`` is None), so its rejection sampler
(v1/sample/rejection_sampler.py ``rejection_random_sample_kernel``, ``NO_DRAFT_PROBS``) accepts draft token d at
position k when ``p_target(d) >= u``, u uniform in [0, 1); at the first rejection it samples the recovered token from
the target's distribution with d removed (``sample_recovered_tokens_kernel``); when every draft is accepted, the
bonus token from the target's distribution at the last position. Each request draws from its own generator (its
``seed``, else a fresh one): the lab's draws are not vLLM's, so a sampled request's figure equals real vLLM's in
distribution, not token for token.

SGLang verifies a sampled chain (``--speculative-eagle-topk 1``), and a draft tree (``walk_tree``), on CUDA with
sgl-kernel's ``tree_speculative_sampling_target_only`` (called from 0.5.12.post1's eagle_info_v2.py and
eagle_info.py ``verify``, 0.5.15.post1's and 0.5.23's eagle_utils.py; csrc/speculative/speculative_sampling.cuh
``TreeSpeculativeSamplingTargetOnly``): the draft's probabilities are not used either (``draft_probs`` zeros), draft
token d is kept when
``coin <= p_target(d) / threshold_acc`` or ``p_target(d) >= threshold_single`` (``--speculative-accept-threshold-acc``
and ``-single``, both 1.0 by default: then vLLM's rule), a rejection draws from ``relu(p_target - draft_probs)`` with
``draft_probs[d] = p_target(d)`` (the target without d), and the bonus token from the target at the last position.
Its target probabilities are the penalised logits over the temperature, soft-maxed, then renormalised to the top-k
and top-p (``top_k_renorm_prob``, ``top_p_renorm_prob``); it applies no min_p there (traffic_offline.py refuses to
model one). A threshold below 1 keeps drafts the target's own distribution would not: faster, and no longer the
target's sampling. Where that SGLang verifies greedily instead (its condition names the platforms: 0.5.15.post1
``is_all_greedy or _is_npu or _is_hip or _is_xpu``; 0.5.23 ``_verify_uses_greedy``), the playbook reads it
(``sglang_greedy_verify``).

Public API: ``Decoding``, ``GREEDY``, ``TokenChooser``, ``top_k_top_p``.
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
    top_k: int = 0          # 0 or -1: every token (vLLM's "disabled")
    top_p: float = 1.0
    min_p: float = 0.0      # without speculation only (module doc)
    threshold_single: float = 1.0   # SGLang's --speculative-accept-threshold-single (module doc); vLLM: 1
    threshold_acc: float = 1.0      # SGLang's --speculative-accept-threshold-acc; vLLM: 1

    @property
    def sampled(self) -> bool:
        return self.temperature > 0


GREEDY = Decoding()


def top_k_top_p(logits: Any, k: int, p: float) -> Any:
    """``logits`` [rows, vocab] with the tokens outside the top ``k`` (0 or -1: none) and outside the top-``p``
    nucleus at -inf, as vLLM 0.32's ``apply_top_k_top_p_pytorch`` does (module doc): ties at the k-th value kept,
    the token that carries the nucleus over ``p`` kept, the most likely token always kept."""
    vocab = logits.shape[-1]
    k = vocab if k <= 0 or k > vocab else k
    if k == vocab and p >= 1.0:
        return logits
    ordered, index = logits.sort(dim=-1, descending=False)
    if k < vocab:
        kth = ordered[:, vocab - k:vocab - k + 1]
        ordered = ordered.masked_fill(ordered < kth, float("-inf"))
    if p < 1.0:
        cumulative = torch.cumsum(ordered.softmax(dim=-1), dim=-1)
        cut = cumulative <= 1 - p
        cut[:, -1] = False
        ordered = ordered.masked_fill(cut, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, index, ordered)


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
        scaled = penalised_logits(logits, self.prompt, histories, d.penalties, d.rule) / d.temperature
        if d.min_p > 0:
            probs = torch.softmax(scaled, dim=-1)
            scaled = scaled.masked_fill(probs < d.min_p * probs.amax(dim=-1, keepdim=True), float("-inf"))
        return torch.softmax(top_k_top_p(scaled, d.top_k, d.top_p), dim=-1)

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
        acc = max(d.threshold_acc, 1e-9)  # sgl-kernel caps it there
        for k, token in enumerate(proposal):
            u = float(torch.rand((), generator=self.generator))
            p = float(probs[k, token])
            if p >= u * acc or p >= d.threshold_single:
                continue
            return k, self._draw_without(probs[k], [token])
        return steps, self._draw(probs[steps])

    def _draw_without(self, row: Any, tried: List[int]) -> int:
        """A token from the target's distribution ``row`` with the rejected drafts ``tried`` taken out; where they
        held all of it (a rounding edge: a draft the target is sure of is always kept), from ``row`` itself, as
        sgl-kernel then falls back to its last valid token."""
        rest = row.clone()
        rest[tried] = 0.0
        total = float(rest.sum())
        return self._draw(rest / total if total > 0 else row)

    def walk_tree(self, logits: Any, histories: List[List[int]], tree: Any) -> Tuple[List[int], int]:
        """(accepted nodes from the root's child down, the token after them) for one verify of SGLang's draft tree
        (``tree``: remote_probes/eagle3/tree.py's DraftTree, node 0 the root; ``logits`` [nodes, vocab] at each
        node, ``histories`` each node's output so far). Greedy: the child whose token is the target's argmax at the
        current node, down the
        tree. Sampled, as sgl-kernel's ``TreeSpeculativeSamplingTargetOnly`` walks it: one draw per level, the
        children tried in order, the target's probabilities of their tokens summed as they go; the first child where
        the draw is at most that sum over ``threshold_acc`` (or whose own probability reaches ``threshold_single``)
        is accepted and the walk goes on from it with a fresh draw; where none is, the token after is drawn from
        the target at that node without the children it tried (``relu(target - draft_probs)``). Each child is then
        kept with the target's probability of it (at thresholds 1), whatever the order."""
        from remote_probes.eagle3.tree import greedy_walk

        d = self.decoding
        if not d.sampled:
            return greedy_walk(tree, penalised_argmax(logits, self.prompt, histories, d.penalties, d.rule))
        tokens = tree.tokens
        children: List[List[int]] = [[] for _ in tokens]
        for node, parent in enumerate(tree.parents):
            if parent >= 0:
                children[parent].append(node)
        probs = self._probs(logits, histories)
        acc = max(d.threshold_acc, 1e-9)
        node = 0
        path: List[int] = []
        while True:
            u = float(torch.rand((), generator=self.generator))
            total, tried, chosen = 0.0, [], None
            for child in children[node]:
                p = float(probs[node, tokens[child]])
                total += p
                if u * acc <= total or p >= d.threshold_single:
                    chosen = child
                    break
                tried.append(tokens[child])
            if chosen is None:
                return path, self._draw_without(probs[node], tried)
            path.append(chosen)
            node = chosen

