"""Speculative decoding simulated offline, cycle by cycle, for the requests a captured run cannot predict (issue 40).

The draft test scores a draft on ONE greedy generation of the target (teacher-forced columns): exact for greedy
decoding, and for vLLM's penalties, where what is served is penalised greedy decoding whatever the draft proposes.
Two cases break that: a sampled request (vLLM's rejection sampler keeps a draft token with the target's
probability of it, so what is served depends on the draws) and SGLang's relaxed penalty (one token fed to its
penalisers per verify cycle, so what is served depends on where the cycles fall). For those, this runs the serving
loop itself on the target (a transformers copy, its KV cache cropped to the verified prefix) and the served draft
(remote_probes.eagle3.draft, incremental with its own cache): the draft proposes K tokens, the target verifies them
in one forward and the engine's rule (decoding.py, penalties.py) keeps m of them plus one, both caches go back to
the verified prefix, and so on to the request's max_tokens or its EOS. The figure is the request's accept length as
the server counts it (tokens per verify cycle: vLLM's 1 + accepted / drafts cycles; SGLang's completion tokens /
verify forwards); a sampled request's is one draw (its ``seed``, else the request's index), the interval then over
requests.

Public API: ``simulate(torch, model, draft, prompt_ids, wiring, steps, max_tokens, decoding, eos, count_first_token,
topk=1, num_draft_tokens=None)``, ``simulate_tree(...)`` (the same for SGLang's tree drafting).
"""

from __future__ import annotations

import inspect
from typing import Any, List, Optional, Tuple

from remote_probes.evaluation.decoding import Decoding, TokenChooser


def _crop(cache: Any, length: int) -> None:
    """Keep the first ``length`` positions (a negative count drops from the end in transformers 4.x and 5.x)."""
    drop = cache.get_seq_length() - length
    if drop > 0:
        cache.crop(-drop)


def _forward(model: Any, ids: Any, cache: Any, wiring: List[int]) -> Tuple[Any, Any]:
    """(logits [positions, vocab], the wiring's hidden states concatenated [1, positions, width])."""
    import torch

    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, output_hidden_states=True, **{key: cache})
    aux = torch.cat([out.hidden_states[i] for i in wiring], dim=-1)
    return out.logits[0], aux


def simulate(torch: Any, model: Any, draft: Any, prompt_ids: List[int], wiring: List[int], steps: int,
             max_tokens: int, decoding: Decoding, eos: Optional[int], count_first_token: bool = False,
             topk: int = 1, num_draft_tokens: Optional[int] = None) -> Tuple[int, int]:
    """(tokens counted, verify cycles) of one request served by speculative decoding (module doc); ``topk`` > 1
    drafts SGLang's tree of ``num_draft_tokens`` nodes instead of the chain (simulate_tree)."""
    if topk > 1:
        return simulate_tree(torch, model, draft, prompt_ids, wiring, steps, topk,
                             num_draft_tokens or steps + 1, max_tokens, decoding, eos, count_first_token)
    from transformers import DynamicCache

    from remote_probes.eagle3.draft import DraftKVCache

    choose = TokenChooser(decoding, prompt_ids)
    dtype = next(draft.parameters()).dtype
    cache = DynamicCache(config=model.config) if "config" in inspect.signature(DynamicCache).parameters \
        else DynamicCache()
    ids = torch.tensor([prompt_ids], device=model.device)
    logits, aux = _forward(model, ids, cache, wiring)
    out = [choose.next(logits[-1:], [])]
    n = len(prompt_ids)
    dcache = DraftKVCache()
    draft_tokens = torch.tensor([prompt_ids[1:] + out[-1:]], device=model.device)
    draft_aux = aux.to(dtype)
    fed: List[int] = []
    tokens, cycles = 0, 0
    while len(out) < max_tokens and (eos is None or out[-1] != eos):
        with torch.no_grad():
            proposal = draft.propose(draft_tokens, draft_aux, dcache, steps)
        logits, vaux = _forward(model, torch.tensor([[out[-1], *proposal]], device=model.device), cache, wiring)
        if decoding.rule.per_position:
            histories = [out + proposal[:k] for k in range(steps + 1)]
        else:
            fed.append(out[-1])
            histories = [list(fed)] * (steps + 1)
        m, after = choose.verify(logits, histories, proposal)
        new = proposal[:m] + [after]
        tokens += m + 1  # as the servers count a cycle (the lab's and vLLM's counters), whatever the stop cuts
        cycles += 1
        if eos is not None and eos in new:
            new = new[:new.index(eos) + 1]
        out.extend(new[:max_tokens - len(out)])
        _crop(cache, n + m + 1)
        dcache.crop(n)
        draft_tokens = torch.tensor([proposal[:m] + [after]], device=model.device)
        draft_aux = vaux[:, :m + 1].to(dtype)
        n += m + 1
    if count_first_token and cycles:
        tokens += 1
    return tokens, cycles


def simulate_tree(torch: Any, model: Any, draft: Any, prompt_ids: List[int], wiring: List[int], steps: int, topk: int,
                  num_draft_tokens: int, max_tokens: int, decoding: Decoding, eos: Optional[int],
                  count_first_token: bool = False) -> Tuple[int, int]:
    """One request served by SGLang's tree drafting (remote_probes/eagle3/tree.py), cycle by cycle: the draft's tree,
    one target forward over it under the tree mask, the walk (greedy, or SGLang's sampled one: decoding.py
    ``walk_tree``), the target's cache cut to the accepted path.
    The lab's server serves with the same steps (orchestrator/lab/stand_in/model_runner.py ``_tree_loop``)."""
    from transformers import DynamicCache

    from remote_probes.eagle3.draft import DraftKVCache
    from remote_probes.eagle3.tree import keep_positions, propose_tree, tree_attention

    choose = TokenChooser(decoding, prompt_ids)
    dtype = next(draft.parameters()).dtype
    cache = DynamicCache(config=model.config) if "config" in inspect.signature(DynamicCache).parameters \
        else DynamicCache()
    logits, aux = _forward(model, torch.tensor([prompt_ids], device=model.device), cache, wiring)
    out = [choose.next(logits[-1:], [])]
    n = len(prompt_ids)
    dcache = DraftKVCache()
    draft_tokens = torch.tensor([prompt_ids[1:] + out[-1:]], device=model.device)
    draft_aux = aux.to(dtype)
    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    fed: List[int] = []
    tokens, cycles = 0, 0
    while len(out) < max_tokens and (eos is None or out[-1] != eos):
        with torch.no_grad():
            tree = propose_tree(draft, draft_tokens, draft_aux, dcache, out[-1], steps, topk, num_draft_tokens)
            mask, positions = tree_attention(tree, n)
            result = model(input_ids=torch.tensor([tree.tokens], device=model.device), use_cache=True,
                           output_hidden_states=True, attention_mask=mask.to(model.device),
                           position_ids=positions.to(model.device), **{key: cache})
        vaux = torch.cat([result.hidden_states[i] for i in wiring], dim=-1)
        if decoding.rule.per_position:
            histories = [out + [tree.tokens[p] for p in tree.path(node)] for node in range(len(tree.tokens))]
        else:
            fed.append(out[-1])
            histories = [list(fed)] * len(tree.tokens)
        path, after = choose.walk_tree(result.logits[0], histories, tree)
        m = len(path)
        new = [tree.tokens[p] for p in path] + [after]
        tokens += m + 1
        cycles += 1
        if eos is not None and eos in new:
            new = new[:new.index(eos) + 1]
        out.extend(new[:max_tokens - len(out)])
        keep_positions(cache, list(range(n)) + [n + p for p in [0, *path]])
        dcache.crop(n)
        draft_tokens = torch.tensor([[tree.tokens[p] for p in path] + [after]], device=model.device)
        draft_aux = vaux[:, [0, *path]].to(dtype)
        n += m + 1
    if count_first_token and cycles:
        tokens += 1
    return tokens, cycles
