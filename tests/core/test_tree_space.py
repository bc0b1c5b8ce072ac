"""The tuner's trees (orchestrator/tuning/tree_space.py) on requests drawn from a known truth: SGLang's servable trees
only, the row step and verify-token costs recovered from two trees, and every tree's tok/s predicted within its
intervals from its offline accept lengths."""

from __future__ import annotations

import random

from orchestrator.tuning.cost_model import Request, fit
from orchestrator.tuning.tree_space import TreeConfig, fit_trees, predict_tree, tree_configs, tree_flags

T1, C0, C, W, V = 0.012, 0.004, 0.003, 0.002, 0.0005


def cycle(cfg: TreeConfig | None, k: int) -> float:
    if cfg is None:
        return T1 + C0 + C * k if k else T1
    return T1 + C0 + C * cfg.steps + W * (cfg.steps - 1) + V * cfg.extra_verified


def draw(rng: random.Random, n: int, k: int, accept: float | None, cfg: TreeConfig | None = None) -> list[Request]:
    out = []
    for _ in range(n):
        a = accept * rng.uniform(0.97, 1.03) if accept else None
        cycles = 64 / (a or 1.0)
        out.append(Request(tokens=64, seconds=cycles * cycle(cfg, k) * rng.uniform(0.97, 1.03), accept_length=a))
    return out


def test_only_the_trees_sglang_serves_are_considered():
    configs = tree_configs([1, 2, 3], [1, 2, 4], [4, 8, 37, 38])
    assert all(c.topk > 1 for c in configs)
    # 2 steps of topk 2 draft 2 + 4 = 6 candidates: a budget of 8 (7 drafts) is torch.topk's "out of range" in SGLang
    assert TreeConfig(2, 2, 8) not in configs and TreeConfig(2, 2, 4) in configs
    assert TreeConfig(1, 4, 4) in configs and TreeConfig(1, 4, 8) not in configs
    assert TreeConfig(3, 4, 37) in configs and TreeConfig(3, 4, 38) not in configs  # 4 + 2 x 16 = 36 candidates
    assert tree_flags({"speculative-algorithm": "EAGLE3"}, TreeConfig(5, 4, 16)) == {
        "speculative-algorithm": "EAGLE3", "speculative-num-steps": 5, "speculative-eagle-topk": 4,
        "speculative-num-draft-tokens": 16}


def test_two_trees_recover_the_row_step_and_verify_token_costs_and_predict_every_tree():
    rng = random.Random(7)
    profile_accept = {k: 1 + sum(0.8 ** j for j in range(1, k + 1)) for k in range(1, 9)}
    baseline = draw(rng, 24, 0, None)
    probe = draw(rng, 24, 7, profile_accept[7])
    short = draw(rng, 24, 2, profile_accept[2])
    model = fit(baseline, probe, 7, points={2: short})
    wide, deep = TreeConfig(3, 4, 16), TreeConfig(7, 4, 8)
    one = fit_trees(model, {wide: draw(rng, 24, 0, 3.8, wide)})
    assert one.w == 0.0 and one.assumption  # one tree cannot tell a row step from a verified token
    two = fit_trees(model, {wide: draw(rng, 24, 0, 3.8, wide), deep: draw(rng, 24, 0, 4.3, deep)})
    assert not two.assumption and two.points == [wide, deep]
    assert abs(two.w - W) < 0.35 * W and abs(two.v - V) < 0.5 * V, (two.w, two.v)
    for cfg, accept in ((TreeConfig(5, 4, 16), 4.7), (TreeConfig(5, 2, 8), 4.0), (TreeConfig(7, 4, 16), 5.1)):
        accepts = [accept * rng.uniform(0.95, 1.05) for _ in range(12)]
        p = predict_tree(model, two, cfg, accepts)
        truth = (sum(accepts) / len(accepts)) / cycle(cfg, cfg.steps)
        half = (p.tok_s_ci[1] - p.tok_s_ci[0]) / 2
        assert p.tok_s_ci[0] - half <= truth <= p.tok_s_ci[1] + half, (cfg, p, truth)
        assert p.accept_length_ci[0] <= p.accept_length <= p.accept_length_ci[1]


def test_trees_on_vllm_are_refused_before_any_restart():
    import pytest
    from pydantic import ValidationError

    from orchestrator.actions.tune import TuneArgs

    vllm = {"speculative-config": {"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}}
    with pytest.raises(ValidationError, match="the installed vLLM does not draft"):
        TuneArgs(flags=vllm, topk=[1, 4])
    assert TuneArgs(flags=vllm, topk=[1]).topk == [1]
    with pytest.raises(ValidationError, match="budgets >= 2"):
        TuneArgs(flags={}, topk=[4], draft_tokens=[1])


def test_the_recommendation_is_ready_to_paste():
    from orchestrator.actions.tune import paste_flags

    sglang = {"speculative-algorithm": "EAGLE3", "speculative-draft-model-path": "/models/my draft",
              "speculative-num-steps": 5, "speculative-eagle-topk": 4, "speculative-num-draft-tokens": 16,
              "tp-size": 8}
    assert paste_flags(sglang) == ("--speculative-algorithm EAGLE3 --speculative-draft-model-path '/models/my draft' "
                                   "--speculative-num-steps 5 --speculative-eagle-topk 4 "
                                   "--speculative-num-draft-tokens 16")
    vllm = {"speculative-config": {"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}}
    assert paste_flags(vllm) == ("--speculative-config "
                                 "'{\"method\": \"eagle3\", \"model\": \"/d\", \"num_speculative_tokens\": 3}'")
