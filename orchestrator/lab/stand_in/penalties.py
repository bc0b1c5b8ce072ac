"""A request's penalties as vLLM applies them to the target's logits, for the lab's vLLM stand-in (issue 40).

vLLM 0.32 (v1/sample/rejection_sampler.py ``apply_logits_processors`` and ``_combine_outputs_with_spec_tokens``,
v1/sample/ops/penalties.py, model_executor/layers/utils.py ``apply_penalties``, _custom_ops.py
``apply_repetition_penalties_torch``) penalises each verified position's target logits with the request's output so
far plus the draft tokens before that position, and the bonus token's with all of them: exactly greedy decoding
with penalties, token by token. The repetition penalty scales the logits of every token seen in the prompt or the
output (divided where positive, multiplied where not); the frequency penalty subtracts ``penalty x count`` over the
output, the presence penalty ``penalty`` for each token the output holds. The draft is not penalised: it proposes
the argmax of its own logits (v1/spec_decode/llm_base_proposer.py), so a penalty moves the target away from the
draft's proposals, which is what the lab then measures. At temperature 0 this is deterministic: a greedy figure, not
a sampled one.

Public API: ``Penalties``, ``penalties_of(body, error)``, ``penalised_argmax(logits, prompt, histories, penalties)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Penalties:
    frequency: float = 0.0
    presence: float = 0.0
    repetition: float = 1.0

    @property
    def neutral(self) -> bool:
        return self.frequency == 0.0 and self.presence == 0.0 and self.repetition == 1.0


NONE = Penalties()


def _number(body: dict[str, Any], name: str, default: float, error: type[Exception]) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise error(f"{name} must be a number, got {value!r}")
    return float(value)


def penalties_of(body: dict[str, Any], error: type[Exception]) -> Penalties:
    """The OpenAI body's penalties, checked with vLLM's own words (sampling_params.py ``_verify_args``)."""
    presence = _number(body, "presence_penalty", 0.0, error)
    frequency = _number(body, "frequency_penalty", 0.0, error)
    repetition = _number(body, "repetition_penalty", 1.0, error)
    if not -2.0 <= presence <= 2.0:
        raise error(f"presence_penalty must be in [-2, 2], got {presence}.")
    if not -2.0 <= frequency <= 2.0:
        raise error(f"frequency_penalty must be in [-2, 2], got {frequency}.")
    if not math.isfinite(repetition):
        raise error(f"repetition_penalty must be a finite number, got {repetition}.")
    if repetition <= 0.0:
        raise error(f"repetition_penalty must be greater than zero, got {repetition}.")
    return Penalties(frequency=frequency, presence=presence, repetition=repetition)


def penalised_argmax(logits: torch.Tensor, prompt: list[int], histories: list[list[int]],
                     penalties: Penalties) -> list[int]:
    """The greedy token of each row of ``logits`` ([rows, vocab]) once row i is penalised with the output
    ``histories[i]`` (and, for the repetition penalty, the prompt), as vLLM does; float32 as vLLM's sampler."""
    rows, vocab = logits.shape
    if penalties.neutral:
        return [int(t) for t in logits.argmax(-1).tolist()]
    out = logits.to(torch.float32).clone()
    counts = torch.zeros(rows, vocab, dtype=torch.float32)
    for i, history in enumerate(histories):
        if history:
            counts[i].index_add_(0, torch.tensor(history), torch.ones(len(history)))
    seen_out = counts > 0
    if penalties.repetition != 1.0:
        seen_prompt = torch.zeros(vocab, dtype=torch.bool)
        if prompt:
            seen_prompt[torch.tensor(prompt)] = True
        scale = torch.where(seen_prompt[None, :] | seen_out, penalties.repetition, 1.0)
        out *= torch.where(out > 0, 1.0 / scale, scale)
    out -= penalties.frequency * counts
    out -= penalties.presence * seen_out.to(torch.float32)
    return [int(t) for t in out.argmax(-1).tolist()]
