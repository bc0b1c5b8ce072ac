"""Tree drafting as SGLang's EAGLE worker does it (``--speculative-eagle-topk`` > 1), for the lab and the offline test.

Read from SGLang 0.5.12.post1 (issue 39): ``EAGLEWorker.draft_forward`` (srt/speculative/eagle_worker.py:851-925),
``select_top_k_tokens`` (srt/speculative/spec_utils.py:476-545), ``organize_draft_results`` and the tree the
``build_tree_kernel_efficient`` kernel builds from them (srt/speculative/eagle_utils.py:20-160), and the greedy
verification ``verify_tree_greedy`` (the same file, 162-). What this module follows, step by step:

- the draft's extend over the verified columns gives ``topk`` candidates (softmax over the draft vocabulary, the
  top ``topk``, mapped to target ids through ``hot_token_id`` = d2t): step 0's candidates, parent the root;
- each later step runs the draft once on ``topk`` rows (all at the same position), row r fed the r-th selected
  candidate with the draft hidden state of the row that proposed it; each row attends to the verified prefix and
  to **its own row's** earlier draft tokens (``generate_draft_decode_kv_indices``: KV slots are laid out per row,
  not per ancestor, so after a re-selection a row attends to another branch's tokens; SGLang's rule, kept here);
  its ``topk`` x ``topk`` children are scored by cumulative probability (parent score x child probability) and the
  best ``topk`` continue;
- after ``steps`` steps every candidate (``topk`` + (steps - 1) x topk^2) is ranked by its cumulative score and the
  best ``num_draft_tokens - 1`` are kept, in candidate order (``torch.topk`` then sorted indices): with the root (the
  last verified token) they are the ``num_draft_tokens`` tokens the target verifies in one forward, each attending to
  the prefix and its ancestors (the tree mask), at position prefix + depth;
- greedy verification walks from the root: the child whose token is the target's argmax at the current node is
  accepted, and so on; the target's argmax at the last accepted node is the bonus token. A sampled request is
  walked as sgl-kernel's target-only kernel walks it (remote_probes/evaluation/decoding.py ``walk_tree``).

A candidate whose parent was not kept (a tie broken against the parent) is what SGLang's kernel warns about as an
invalid tree; it is kept here with no parent and is never accepted. With ``topk`` 1 the tree is SGLang's chain of
``steps`` tokens (tests hold it to the chain the lab has always served).

Public API: ``DraftTree``, ``propose_tree(draft, tokens, hidden, cache, root, steps, topk, num_draft_tokens)``,
``grow_tree(to_target, logits, hidden, row_step, root, steps, topk, num_draft_tokens)`` (the same from a step
function), ``link_parents(kept, parent_list, topk)``, ``candidate_count(steps, topk)``, ``tree_attention(tree, prefix)`` (the target's additive mask and positions),
``greedy_walk(tree, predictions)`` and ``keep_positions(cache, keep)`` (a transformers cache cut to the kept slots).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Tuple

import torch

ORPHAN = -2  # a kept candidate whose parent was not kept (SGLang: "invalid eagle tree"); never accepted


@dataclass
class DraftTree:
    """The tokens one verify forward checks: node 0 the root (the last verified token), then the kept drafts."""

    tokens: List[int]     # target ids, root first
    parents: List[int]    # node -> parent node (-1 for the root, ORPHAN for a candidate whose parent was dropped)
    depths: List[int]     # node -> depth (root 0): its position is the prefix length + depth
    scores: List[float]   # node -> cumulative draft probability (1.0 for the root)

    @property
    def drafts(self) -> int:
        return len(self.tokens) - 1

    def path(self, node: int) -> List[int]:
        """Nodes from the root's first child down to ``node`` (empty for the root)."""
        out: List[int] = []
        while node > 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]


def candidate_count(steps: int, topk: int) -> int:
    """How many candidates ``steps`` steps of ``topk`` draft: topk + (steps - 1) x topk^2 (organize_draft_results
    ranks these; ``num_draft_tokens - 1`` above it is torch.topk's "selected index k out of range")."""
    return topk + (steps - 1) * topk * topk


def _topk_target(to_target: Callable[[torch.Tensor], torch.Tensor], logits: torch.Tensor, topk: int
                 ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(probabilities, target ids) of the ``topk`` best draft tokens of each row (SGLang: softmax, fast_topk,
    hot_token_id)."""
    probs = torch.softmax(logits.float(), dim=-1)
    p, index = torch.topk(probs, topk, dim=-1)
    return p, to_target(index)


def _row_cache(cache: Any, rows: int) -> Any:
    """A copy of the draft's prefix cache for ``rows`` rows (each row then appends its own draft tokens)."""
    copy = type(cache)()
    if cache.k is not None:
        copy.k = cache.k.repeat(rows, 1, 1, 1)
        copy.v = cache.v.repeat(rows, 1, 1, 1)
    return copy


#: one draft step over the rows: (the rows' input target ids [rows], their hidden states [rows, 1, H]) ->
#: (the draft's logits [rows, draft_vocab] after them, their new hidden states [rows, 1, H])
RowStep = Callable[[torch.Tensor, torch.Tensor], Tuple[torch.Tensor, torch.Tensor]]


def propose_tree(draft: Any, tokens: torch.Tensor, hidden: torch.Tensor, cache: Any, root: int, steps: int,
                 topk: int, num_draft_tokens: int) -> DraftTree:
    """The draft's tree for one verify cycle (module doc): ``tokens``/``hidden`` the verified columns after the cached
    ones (as ``Eagle3Draft.propose`` takes them), ``root`` the last verified token. ``cache`` keeps only the verified
    columns (the rows draft on copies of it)."""
    out = draft.forward(tokens=tokens, hidden=hidden, cache=cache)
    rows = _row_cache(cache, topk) if steps > 1 else None

    def row_step(input_ids: torch.Tensor, row_hidden: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        step = draft.forward(tokens=input_ids.view(-1, 1), hidden=row_hidden, cache=rows)
        return step.logits[:, -1], step.hidden

    return grow_tree(draft.to_target_ids, out.logits[:, -1], out.hidden[:, -1:], row_step, root, steps, topk,
                     num_draft_tokens)


def grow_tree(to_target: Callable[[torch.Tensor], torch.Tensor], logits: torch.Tensor, hidden: torch.Tensor,
              row_step: RowStep, root: int, steps: int, topk: int, num_draft_tokens: int) -> DraftTree:
    """The tree from the draft's logits after the verified columns (``logits`` [1, draft_vocab], ``hidden``
    [1, 1, H]) and ``row_step`` for the later steps: SGLang's draft_forward loop, select_top_k_tokens and
    organize_draft_results, then the parents its build_tree kernel links (module doc)."""
    topk_p, topk_index = _topk_target(to_target, logits, topk)              # [1, topk]
    row_hidden = hidden.repeat(topk, 1, 1)                                  # [topk, 1, H]
    score_list = [topk_p.view(-1)]
    token_list = [topk_index.view(-1)]
    parents_list = [torch.arange(-1, topk)]
    scores = topk_p.view(-1)                                                # [topk]
    input_ids = topk_index.view(-1)
    for i in range(1, steps):
        step_logits, step_hidden = row_step(input_ids, row_hidden)
        child_p, child_index = _topk_target(to_target, step_logits, topk)  # [topk rows, topk]
        expand = scores[:, None] * child_p                                  # [topk, topk]
        best_p, best = torch.topk(expand.flatten(), topk)
        input_ids = child_index.flatten()[best]
        row_hidden = step_hidden[best // topk]
        score_list.append(expand.flatten())
        token_list.append(child_index.flatten())
        parents_list.append(best + topk * topk * (i - 1) + topk)
        scores = best_p
    all_scores = torch.cat(score_list)
    all_tokens = torch.cat(token_list)
    kept = torch.sort(torch.topk(all_scores, num_draft_tokens - 1).indices).values.tolist()
    parent_list = torch.cat(parents_list[:-1]).tolist() if len(parents_list) > 1 else []
    parents, depths = link_parents(kept, parent_list, topk)
    return DraftTree(tokens=[int(root)] + [int(all_tokens[f]) for f in kept], parents=parents, depths=depths,
                     scores=[1.0] + [float(all_scores[f]) for f in kept])


def link_parents(kept: List[int], parent_list: List[int], topk: int) -> Tuple[List[int], List[int]]:
    """(parent node, depth) of the root and each kept candidate, as SGLang's build_tree_efficient kernel links
    them: candidate index // topk is a slot of ``parent_list`` (0: the root), whose value is the parent's candidate
    index, found among the kept ones (not kept: the kernel's "invalid eagle tree", ORPHAN here)."""
    node_of = {flat: node for node, flat in enumerate(kept, start=1)}
    parents, depths = [-1], [0]
    for flat in kept:
        slot = flat // topk
        parent = 0 if slot == 0 else node_of.get(int(parent_list[slot]), ORPHAN)
        parents.append(parent)
        depths.append(depths[parent] + 1 if parent >= 0 else 0)
    return parents, depths


def tree_attention(tree: DraftTree, prefix: int, dtype: torch.dtype = torch.float32
                   ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(additive mask [1, 1, nodes, prefix + nodes], positions [1, nodes]) for the target's verify forward: every
    node sees the prefix, its ancestors and itself; an orphan sees the prefix and itself."""
    n = len(tree.tokens)
    allowed = torch.zeros(n, prefix + n, dtype=torch.bool)
    allowed[:, :prefix] = True
    for node in range(n):
        allowed[node, prefix + node] = True
        parent = tree.parents[node]
        while parent >= 0:
            allowed[node, prefix + parent] = True
            parent = tree.parents[parent]
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    positions = torch.tensor([[prefix + d for d in tree.depths]])
    return mask[None, None], positions


def greedy_walk(tree: DraftTree, predictions: List[int]) -> Tuple[List[int], int]:
    """(accepted nodes from the root's child down, the bonus token): from the root, the child whose token is the
    target's prediction at the current node (``predictions[node]``) is accepted, until none is."""
    children: List[List[int]] = [[] for _ in tree.tokens]
    for node, parent in enumerate(tree.parents):
        if parent >= 0:
            children[parent].append(node)
    path: List[int] = []
    node = 0
    while True:
        nxt = next((c for c in children[node] if tree.tokens[c] == predictions[node]), None)
        if nxt is None:
            return path, predictions[node]
        path.append(nxt)
        node = nxt


def keep_positions(cache: Any, keep: List[int]) -> None:
    """Cut a transformers KV cache to the slots ``keep`` (in that order): the verified prefix, the root and the
    accepted nodes after a tree verification (SGLang moves the accepted nodes' KV the same way)."""
    index = torch.tensor(keep, dtype=torch.long)
    layers = getattr(cache, "layers", None)
    if layers is not None:  # transformers 5: one DynamicLayer per decoder layer
        for layer in layers:
            layer.keys = layer.keys.index_select(-2, index.to(layer.keys.device))
            layer.values = layer.values.index_select(-2, index.to(layer.values.device))
        return
    for i in range(len(cache.key_cache)):  # transformers 4.x
        cache.key_cache[i] = cache.key_cache[i].index_select(-2, index.to(cache.key_cache[i].device))
        cache.value_cache[i] = cache.value_cache[i].index_select(-2, index.to(cache.value_cache[i].device))
