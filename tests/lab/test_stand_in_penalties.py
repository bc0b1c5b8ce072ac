"""A greedy request's penalties in the lab's stand-ins (issue 40): vLLM's arithmetic on the target's logits, and
speculative decoding that stays exactly penalised greedy decoding while the draft proposes unpenalised; SGLang's
relaxed rule, where speculation changes what is served. vLLM's is held against real vLLM 0.32 in
tests/lab/test_lab_vs_vllm.py (the traffic replay's frequency_penalty requests)."""

from __future__ import annotations

import pytest
import torch

from orchestrator.lab.building.build import LabPaths
from remote_probes.evaluation.penalties import NONE, RULES, Penalties, penalised_argmax
from tests.lab.test_rules import models_for, spec_argv


class Refused(Exception):
    pass


def test_each_penalty_moves_the_greedy_token_as_vllm_computes_it() -> None:
    # vocab of 4; token 0 leads, token 1 close behind
    logits = torch.tensor([[2.0, 1.8, -1.0, 0.5]])
    assert penalised_argmax(logits, [], [[]], Penalties(frequency=1.0)) == [0]  # nothing generated yet
    assert penalised_argmax(logits, [], [[0]], Penalties(frequency=0.1)) == [0]  # 2.0 - 0.1 > 1.8
    assert penalised_argmax(logits, [], [[0]], Penalties(frequency=0.3)) == [1]  # 1.7 < 1.8
    assert penalised_argmax(logits, [], [[0, 0]], Penalties(presence=0.15)) == [0]  # presence counts once
    assert penalised_argmax(logits, [], [[0, 0]], Penalties(frequency=0.15)) == [1]  # frequency counts twice
    # repetition: prompt tokens too, divided where positive (2.0 / 1.2 = 1.67 < 1.8)
    assert penalised_argmax(logits, [0], [[]], Penalties(repetition=1.2)) == [1]
    negative = torch.tensor([[-1.0, -1.1, -5.0]])  # multiplied where negative: -1.0 * 1.2 = -1.2 < -1.1
    assert penalised_argmax(negative, [0], [[]], Penalties(repetition=1.2)) == [1]
    # one row per verified position, each with its own history (the output plus the drafts before it)
    rows = torch.tensor([[2.0, 1.8, 0.0], [2.0, 1.8, 0.0]])
    assert penalised_argmax(rows, [], [[], [0]], Penalties(frequency=0.5)) == [0, 1]
    assert penalised_argmax(rows, [], [[], [0]], NONE) == [0, 0]


def test_penalties_are_checked_with_vllms_words() -> None:
    assert Penalties.from_body({"frequency_penalty": 1, "repetition_penalty": 1.3}, Refused) == Penalties(1.0, 0.0, 1.3)
    for body, said in (({"frequency_penalty": 3}, "frequency_penalty must be in [-2, 2], got 3.0."),
                       ({"presence_penalty": -2.5}, "presence_penalty must be in [-2, 2], got -2.5."),
                       ({"repetition_penalty": 0}, "repetition_penalty must be greater than zero, got 0.0."),
                       ({"repetition_penalty": "high"}, "repetition_penalty must be a number, got 'high'")):
        with pytest.raises(Refused, match=None) as caught:
            Penalties.from_body(body, Refused)
        assert str(caught.value) == said


@pytest.mark.lab
@pytest.mark.torch
def test_speculative_decoding_with_a_penalty_is_penalised_greedy_decoding(lab: LabPaths) -> None:
    """The healthy draft proposes unpenalised; the target verifies each position with vLLM's penalised logits:
    the output is token for token what plain decoding with the penalty gives, and the penalty costs acceptance."""
    from orchestrator.actions.bench import load_prompts

    plain = models_for(lab)
    spec = models_for(lab, *spec_argv(lab.drafts["healthy"], 5))
    penalty = Penalties(frequency=1.0)
    accepted = {True: [0, 0], False: [0, 0]}
    for text in load_prompts(None)[:3]:
        ids = plain.tokenizer(text)["input_ids"]
        args = {"max_new_tokens": 40, "stop": [], "stop_token_ids": [], "ignore_eos": True}
        reference = plain.generate(ids, **args, penalties=penalty).output_ids
        assert reference != plain.generate(ids, **args).output_ids  # the penalty changes what is generated
        for penalised in (True, False):
            gen = spec.generate(ids, **args, penalties=penalty if penalised else NONE)
            if penalised:
                assert gen.output_ids == reference
            accepted[penalised][0] += gen.spec.accepted_tokens
            accepted[penalised][1] += gen.spec.verify_ct
    with_penalty, without = (accepted[k][0] / accepted[k][1] for k in (True, False))
    assert with_penalty < without, (with_penalty, without)


def test_sglangs_rule_counts_no_prompt_and_scales_after_the_additive_penalties() -> None:
    sglang = RULES["sglang"]
    logits = torch.tensor([[2.0, 1.8, -1.0, 0.5]])
    # the repetition penalty sees the output only: a prompt token keeps its logit on SGLang, not on vLLM
    assert penalised_argmax(logits, [0], [[]], Penalties(repetition=1.2), sglang) == [0]
    assert penalised_argmax(logits, [0], [[]], Penalties(repetition=1.2)) == [1]
    assert penalised_argmax(logits, [], [[0]], Penalties(repetition=1.2), sglang) == [1]
    # frequency then repetition (SGLang): (2.0 - 0.3) / 1.2 = 1.42 against 1.8; repetition first (vLLM):
    # 2.0 / 1.2 - 0.3 = 1.37; both pick 1 here, and the arithmetic differs where it matters
    both = Penalties(frequency=0.3, repetition=1.2)
    mixed = torch.tensor([[2.0, 1.4]])
    assert penalised_argmax(mixed, [], [[0]], both, sglang) == [0]   # 1.4167 > 1.4
    assert penalised_argmax(mixed, [], [[0]], both) == [1]           # 1.3667 < 1.4
    with pytest.raises(Refused) as caught:
        Penalties.from_body({"repetition_penalty": 2.5}, Refused, sglang)
    assert str(caught.value) == "repetition_penalty must be in (0, 2] (1.0 = no penalty), got 2.5."
    assert Penalties.from_body({"repetition_penalty": 2.5}, Refused) == Penalties(repetition=2.5)  # vLLM: no cap


@pytest.mark.lab
@pytest.mark.torch
def test_sglangs_relaxed_rule_makes_speculation_change_what_is_served(lab: LabPaths) -> None:
    """SGLang feeds its penaliser one token per verify cycle, so a speculative server's penalised output is not plain
    penalised decoding's (which feeds every token, as vLLM does): the accepted tokens inside a cycle go uncounted."""
    from orchestrator.actions.bench import load_prompts

    plain = models_for(lab)
    spec = models_for(lab, *spec_argv(lab.drafts["healthy"], 5))
    penalty, sglang = Penalties(frequency=1.0), RULES["sglang"]
    args = {"max_new_tokens": 40, "stop": [], "stop_token_ids": [], "ignore_eos": True}
    differs = 0
    for text in load_prompts(None)[:3]:
        ids = plain.tokenizer(text)["input_ids"]
        every_token = plain.generate(ids, **args, penalties=penalty, rule=sglang).output_ids
        assert every_token == plain.generate(ids, **args, penalties=penalty).output_ids  # plain: the rules agree
        differs += spec.generate(ids, **args, penalties=penalty, rule=sglang).output_ids != every_token
    assert differs, "SGLang's relaxed penalty served the same tokens as plain penalised decoding on every prompt"
