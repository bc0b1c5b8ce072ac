"""A sampled request in the lab's vLLM stand-in (issue 40): vLLM's rejection rule for a draft that gives no
probabilities (remote_probes/evaluation/decoding.py), checked on its own terms; held against real vLLM 0.32 in distribution by
tests/lab/test_lab_vs_vllm.py (the traffic replay's temperature 0.8 requests)."""

from __future__ import annotations

import math

import pytest
import torch

from orchestrator.lab.building.build import LabPaths
from remote_probes.evaluation.decoding import Decoding, TokenChooser
from remote_probes.evaluation.interval_stats import mean_interval
from tests.lab.test_rules import models_for, spec_argv


def test_a_draft_token_is_accepted_with_the_targets_probability_and_a_rejection_draws_from_the_rest() -> None:
    """Position 0's draft accepted with p_target(d); after a rejection, the token drawn from p_target without d;
    all accepted: the bonus token from the last position. 4,000 cycles, decided on 99.9% intervals."""
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2, 1e-12], [0.1, 0.1, 0.1, 0.7]]))
    chooser = TokenChooser(Decoding(temperature=1.0, seed=7), prompt=[])
    trials = 4000
    accepted, recovered, bonus = [], {1: 0, 2: 0, 3: 0}, {0: 0, 3: 0}
    for _ in range(trials):
        m, token = chooser.verify(logits, [[], []], [0])
        accepted.append(float(m == 1))
        if m == 0:
            assert token != 0  # the rejected draft is never the recovered token
            recovered[token] += 1
        else:
            bonus[token] = bonus.get(token, 0) + 1
    iv = mean_interval(accepted, 0.999)
    assert iv is not None and iv.lo <= 0.5 <= iv.hi, iv  # p_target(0) = 0.5
    rejected = trials - sum(accepted)
    share = recovered[1] / rejected  # 0.3 / (0.3 + 0.2 + ~0)
    half = 3.3 * math.sqrt(0.6 * 0.4 / rejected)
    assert abs(share - 0.6) < half, (share, recovered)
    assert bonus.get(3, 0) > bonus.get(0, 0)  # the bonus token follows the second position's distribution
    # a draft the target gives no probability is always rejected; one it is sure of always accepted
    assert TokenChooser(Decoding(temperature=1.0, seed=1), []).verify(logits, [[], []], [3])[0] == 0
    sure = torch.log(torch.tensor([[1.0 - 1e-9, 1e-9, 1e-9, 1e-9], [0.25] * 4]))
    assert all(TokenChooser(Decoding(temperature=1.0, seed=s), []).verify(sure, [[], []], [0])[0] == 1
               for s in range(20))


@pytest.mark.lab
@pytest.mark.torch
def test_sampled_speculation_is_seeded_and_a_cold_temperature_is_greedy(lab: LabPaths) -> None:
    from orchestrator.actions.bench import load_prompts

    spec = models_for(lab, *spec_argv(lab.drafts["healthy"], 5))
    ids = spec.tokenizer(load_prompts(None)[0])["input_ids"]
    args = {"max_new_tokens": 32, "stop": [], "stop_token_ids": [], "ignore_eos": True}
    greedy = spec.generate(ids, **args)
    cold = spec.generate(ids, **args, temperature=1e-4, seed=3)
    assert cold.output_ids == greedy.output_ids and cold.spec.verify_ct == greedy.spec.verify_ct
    hot = [spec.generate(ids, **args, temperature=1.5, seed=s) for s in (11, 11, 12)]
    assert hot[0].output_ids == hot[1].output_ids  # one seed, one draw
    assert hot[0].output_ids != greedy.output_ids
