"""A request's penalties as vLLM applies them to the target's logits: the lab's vLLM stand-in serves with it, and the
draft test replays a user's traffic with it (issue 40).

vLLM 0.32 (v1/sample/rejection_sampler.py ``apply_logits_processors`` and ``_combine_outputs_with_spec_tokens``,
v1/sample/ops/penalties.py, model_executor/layers/utils.py ``apply_penalties``, _custom_ops.py
``apply_repetition_penalties_torch``) penalises each verified position's target logits with the request's output so
far plus the draft tokens before that position, and the bonus token's with all of them: exactly greedy decoding
with penalties, token by token. The repetition penalty scales the logits of every token seen in the prompt or the
output (divided where positive, multiplied where not); the frequency penalty subtracts ``penalty x count`` over the
output, the presence penalty ``penalty`` for each token the output holds. The draft is not penalised: it proposes
the argmax of its own logits (v1/spec_decode/llm_base_proposer.py), so a penalty moves the target away from the
draft's proposals. At temperature 0 this is deterministic: a greedy figure, not a sampled one.

SGLang (0.5.12.post1 and 0.5.23 read alike; "a relaxed version of penalties for speculative decoding") differs in
three ways, which ``RULES["sglang"]`` carries: its penalisers hold the output tokens fed to them, and in speculative
decoding they are fed ONE token per verify cycle, the last one before it (0.5.23: eagle_utils.py
``eagle_prepare_for_decode`` -> schedule_batch.py ``cumulate_penalty_output_tokens``; 0.5.12.post1: eagle_worker.py
``_draft_preprocess_decode``, the cycle's bonus token), so the tokens accepted inside a cycle are never counted;
every position of a cycle gets the same penalty (``penalizer_orchestrator.apply(..., repeat=draft_token_num)``:
eagle_info.py, eagle_utils.py); and its repetition penalty counts the output only, not the prompt
(penaltylib/repetition_penalty.py), applied after the additive ones (orchestrator.py ``apply``). Its checks accept a
repetition penalty in (0, 2] only (sampling_params.py ``verify``). Plain decoding feeds every token, as vLLM does.
The lab feeds the cycle's last output token as it stands before the cycle; under SGLang's overlap scheduler that token
may lag a cycle (the last prompt token on the first decode: schedule_batch.py's comment), which is not modelled.

Public API: ``Penalties`` (``from_body``), ``NONE``, ``Rule``, ``RULES``, ``penalise(logits, prompt_seen, counts,
penalties, rule)``, ``penalised_logits(logits, prompt, histories, penalties, rule)``, ``penalised_argmax(...)``.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, NamedTuple, Optional

#: the OpenAI body's penalty fields and their neutral values
FIELDS = {"frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0}


class Rule(NamedTuple):
    """How an engine applies penalties: where the repetition penalty looks, in which order, and what history a
    speculative verify cycle is penalised with (module doc)."""

    engine: str
    prompt_in_repetition: bool     # vLLM: prompt or output; SGLang: output only
    scaling_first: bool            # vLLM: repetition, then frequency/presence; SGLang: additive, then scaling
    per_position: bool             # vLLM: each verified position its own history; SGLang: one per cycle
    max_repetition: float          # the largest repetition penalty the engine accepts


RULES = {"vllm": Rule("vllm", True, True, True, float("inf")), "sglang": Rule("sglang", False, False, False, 2.0)}


class Penalties(NamedTuple):
    frequency: float = 0.0
    presence: float = 0.0
    repetition: float = 1.0

    @property
    def neutral(self) -> bool:
        return self.frequency == 0.0 and self.presence == 0.0 and self.repetition == 1.0

    @classmethod
    def from_body(cls, body: Dict[str, Any], error: type, rule: Optional[Rule] = None) -> "Penalties":
        """An OpenAI body's penalties, checked with the engine's own words (vLLM's sampling_params.py
        ``_verify_args`` by default, SGLang's ``verify`` with its rule); ``error`` is raised with the message."""
        values = {}
        for name, default in FIELDS.items():
            value = body.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise error("%s must be a number, got %r" % (name, value))
            values[name] = default if value is None else float(value)
        presence, frequency, repetition = (values["presence_penalty"], values["frequency_penalty"],
                                           values["repetition_penalty"])
        if not -2.0 <= presence <= 2.0:
            raise error("presence_penalty must be in [-2, 2], got %s." % presence)
        if not -2.0 <= frequency <= 2.0:
            raise error("frequency_penalty must be in [-2, 2], got %s." % frequency)
        if not math.isfinite(repetition):
            raise error("repetition_penalty must be a finite number, got %s." % repetition)
        if rule is not None and rule.engine == "sglang" and not 0.0 < repetition <= rule.max_repetition:
            raise error("repetition_penalty must be in (0, 2] (1.0 = no penalty), got %s." % repetition)
        if repetition <= 0.0:
            raise error("repetition_penalty must be greater than zero, got %s." % repetition)
        return cls(frequency=frequency, presence=presence, repetition=repetition)


NONE = Penalties()


def penalise(logits: Any, prompt_seen: Any, counts: Any, penalties: Penalties, rule: Rule = RULES["vllm"]) -> Any:
    """``logits`` ([rows, vocab]) penalised as the engine does (vLLM's ``apply_penalties``, SGLang's penalisers), in
    float32: ``counts`` ([rows, vocab]) each row's output token counts, ``prompt_seen`` ([vocab] bool) the prompt's
    tokens (vLLM's repetition penalty counts them; SGLang's does not)."""
    import torch

    out = logits.to(torch.float32).clone()
    seen_out = counts > 0

    def scaling() -> None:
        if penalties.repetition != 1.0:
            seen = (prompt_seen[None, :] | seen_out) if rule.prompt_in_repetition else seen_out
            scale = torch.where(seen, penalties.repetition, 1.0)
            out.mul_(torch.where(out > 0, 1.0 / scale, scale))

    if rule.scaling_first:
        scaling()
    out -= penalties.frequency * counts
    out -= penalties.presence * seen_out.to(torch.float32)
    if not rule.scaling_first:
        scaling()
    return out


def penalised_argmax(logits: Any, prompt: List[int], histories: List[List[int]], penalties: Penalties,
                     rule: Rule = RULES["vllm"]) -> List[int]:
    """The greedy token of each row of ``logits`` ([rows, vocab]) once row i is penalised with the output
    ``histories[i]`` (and, for vLLM's repetition penalty, the prompt), as the engine of ``rule`` does."""
    if penalties.neutral:
        return [int(t) for t in logits.argmax(-1).tolist()]
    return [int(t) for t in penalised_logits(logits, prompt, histories, penalties, rule).argmax(-1).tolist()]


def penalised_logits(logits: Any, prompt: List[int], histories: List[List[int]], penalties: Penalties,
                     rule: Rule = RULES["vllm"]) -> Any:
    """``logits`` ([rows, vocab]) with row i penalised by the output ``histories[i]`` (``penalise``), float32."""
    import torch

    rows, vocab = logits.shape
    if penalties.neutral:
        return logits.to(torch.float32)
    counts = torch.zeros(rows, vocab, dtype=torch.float32)
    for i, history in enumerate(histories):
        if history:
            counts[i].index_add_(0, torch.tensor(history), torch.ones(len(history)))
    seen_prompt = torch.zeros(vocab, dtype=torch.bool)
    if prompt:
        seen_prompt[torch.tensor(prompt)] = True
    return penalise(logits, seen_prompt, counts, penalties, rule)
