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

Public API: ``Penalties`` (``from_body``), ``NONE``, ``penalise(logits, prompt_seen, counts, penalties)``,
``penalised_argmax(logits, prompt, histories, penalties)``.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, NamedTuple

#: the OpenAI body's penalty fields and their neutral values
FIELDS = {"frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0}


class Penalties(NamedTuple):
    frequency: float = 0.0
    presence: float = 0.0
    repetition: float = 1.0

    @property
    def neutral(self) -> bool:
        return self.frequency == 0.0 and self.presence == 0.0 and self.repetition == 1.0

    @classmethod
    def from_body(cls, body: Dict[str, Any], error: type) -> "Penalties":
        """An OpenAI body's penalties, checked with vLLM's own words (sampling_params.py ``_verify_args``);
        ``error`` is raised with the message."""
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
        if repetition <= 0.0:
            raise error("repetition_penalty must be greater than zero, got %s." % repetition)
        return cls(frequency=frequency, presence=presence, repetition=repetition)


NONE = Penalties()


def penalise(logits: Any, prompt_seen: Any, counts: Any, penalties: Penalties) -> Any:
    """``logits`` ([rows, vocab]) penalised as vLLM's ``apply_penalties`` does, in float32: ``counts`` ([rows, vocab])
    each row's output token counts, ``prompt_seen`` ([vocab] bool) the prompt's tokens (the repetition penalty's)."""
    import torch

    out = logits.to(torch.float32).clone()
    seen_out = counts > 0
    if penalties.repetition != 1.0:
        scale = torch.where(prompt_seen[None, :] | seen_out, penalties.repetition, 1.0)
        out *= torch.where(out > 0, 1.0 / scale, scale)
    out -= penalties.frequency * counts
    out -= penalties.presence * seen_out.to(torch.float32)
    return out


def penalised_argmax(logits: Any, prompt: List[int], histories: List[List[int]], penalties: Penalties) -> List[int]:
    """The greedy token of each row of ``logits`` ([rows, vocab]) once row i is penalised with the output
    ``histories[i]`` (and, for the repetition penalty, the prompt), as vLLM does."""
    import torch

    rows, vocab = logits.shape
    if penalties.neutral:
        return [int(t) for t in logits.argmax(-1).tolist()]
    counts = torch.zeros(rows, vocab, dtype=torch.float32)
    for i, history in enumerate(histories):
        if history:
            counts[i].index_add_(0, torch.tensor(history), torch.ones(len(history)))
    seen_prompt = torch.zeros(vocab, dtype=torch.bool)
    if prompt:
        seen_prompt[torch.tensor(prompt)] = True
    return [int(t) for t in penalise(logits, seen_prompt, counts, penalties).argmax(-1).tolist()]
