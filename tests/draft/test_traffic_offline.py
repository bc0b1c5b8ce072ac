"""A traffic file replayed offline (issue 40): the reconcile's probe with ``requests`` tokenises, generates and
penalises each request as the lab's vLLM stand-in serves it, and scores the draft on it, per request; a request
that samples is said and skipped. The served side is held against real vLLM in tests/lab/test_lab_vs_vllm.py."""

from __future__ import annotations

import logging

import pytest

from tests import realparts

realparts.importorskip("torch")
realparts.importorskip("transformers")

from tests.draft.test_end_to_end import lab_pair, run_draft_test  # noqa: E402,F401 (the fixture)

pytestmark = [pytest.mark.lab, pytest.mark.torch, pytest.mark.timeout(900)]

TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")


def test_the_offline_replay_generates_each_request_as_the_stand_in_serves_it(lab_pair, tmp_path) -> None:  # noqa: F811
    from orchestrator.actions.bench import load_prompts
    from orchestrator.lab.stand_in.model_runner import LabModelRunner
    from orchestrator.lab.stand_in.sglang_args import build_parser, resolve
    from remote_probes.evaluation.penalties import Penalties

    target, draft, _wiring, _n = lab_pair
    template = tmp_path / "chat.jinja"
    template.write_text(TEMPLATE)
    code = load_prompts(None)[:2]
    bodies = [{"prompt": code[0], "temperature": 0, "max_tokens": 24},
              {"prompt": code[0], "temperature": 0, "max_tokens": 24, "frequency_penalty": 1.0},
              {"prompt": code[1], "temperature": 0, "max_tokens": 24, "repetition_penalty": 1.3},
              {"messages": [{"role": "user", "content": "def add(a, b):"}], "temperature": 0, "max_tokens": 24},
              {"prompt": code[1], "temperature": 0.8, "max_tokens": 24, "min_p": 0.1},
              {"prompt": code[0], "temperature": 1e-4, "max_tokens": 24, "seed": 5},
              {"prompt": code[1], "temperature": 1.0, "max_tokens": 24, "seed": 5},
              {"prompt": code[0], "temperature": 1.0, "max_tokens": 24, "seed": 3, "top_k": 1},
              {"prompt": code[1], "temperature": 0.8, "max_tokens": 24, "seed": 2, "top_p": 0.9, "top_k": 20}]
    rc = run_draft_test(tmp_path, {"target": str(target), "engine": "vllm", "max_new_tokens": 24,
                                   "requests": [{"body": b} for b in bodies], "chat_template_path": str(template),
                                   "configs": [{"draft": str(draft), "algorithm": "EAGLE3", "steps": 3}]},
                        probe="draft_reconcile")
    assert rc["prompts"] == 4 and [s["index"] for s in rc["skipped"]] == [4], rc["skipped"]
    # a speculative vLLM refuses min_p (sampling_params.py _validate_spec_decode): nothing to predict
    assert "min_p=0.1" in rc["skipped"][0]["reason"] and "speculative" in rc["skipped"][0]["reason"]
    rows = rc["configs"][0]["row"]["per_request"]
    assert [r["index"] for r in rows] == [0, 1, 2, 3, 5, 6, 7, 8]
    assert all(r["accept_length"] >= 1.0 for r in rows), rows
    assert "draft_penalised" not in rows[0] and rows[1]["draft_penalised"] >= 1.0 and "draft_penalised" in rows[2]
    # the sampled requests are served again offline, cycle by cycle: a cold temperature is greedy decoding, and so
    # is any temperature with top_k 1 (the target's distribution cut to its argmax before the rejection rule)
    assert rows[4]["simulated"] and rows[5]["simulated"] and "simulated" not in rows[0]
    assert rows[4]["accept_length"] == rows[0]["accept_length"], (rows[4], rows[0])
    assert rows[6]["simulated"] and rows[6]["accept_length"] == rows[0]["accept_length"], (rows[6], rows[0])
    assert rows[7]["simulated"], rows[7]

    # the stand-in (speculative, its penalties on the target's logits) serves the same tokens, and the same accept
    # length, as the offline replay predicts for the draft it serves
    ns = build_parser().parse_args(["--model-path", str(target), "--speculative-algorithm", "EAGLE3",
                                    "--speculative-draft-model-path", str(draft), "--speculative-num-steps", "3",
                                    "--speculative-eagle-topk", "1"])
    runner = LabModelRunner(resolve(ns, target_architecture="LlamaForCausalLM"), log=logging.getLogger("t").debug)
    tokenizer = runner.tokenizer
    for body, row in zip(bodies[:3], rows[:3], strict=True):
        gen = runner.generate(tokenizer(body["prompt"])["input_ids"], max_new_tokens=24, stop=[], stop_token_ids=[],
                              ignore_eos=False, penalties=Penalties.from_body(body, ValueError))
        served = len(gen.output_ids) / gen.spec.verify_ct  # the first token counted, as vLLM's counters do not
        assert gen.spec.verify_ct and abs(row["accept_length"] - (gen.spec.accepted_tokens / gen.spec.verify_ct)) \
            < 1e-3, (body, row, served, gen.spec)


def test_the_simulation_serves_as_the_stand_in_does(lab_pair) -> None:  # noqa: F811
    """spec_simulation.simulate (a transformers cache, the served draft) runs the stand-in's loop: greedy, under
    SGLang's relaxed penalty, sampled with top-k and top-p from one seed, and sampled as SGLang verifies with an
    acceptance threshold: the same cycles and tokens as the lab's server on the same prompt."""
    import torch

    from orchestrator.actions.bench import load_prompts
    from orchestrator.lab.stand_in.model_runner import LabModelRunner
    from orchestrator.lab.stand_in.sglang_args import build_parser, resolve
    from remote_probes.evaluation.decoding import Decoding
    from remote_probes.evaluation.penalties import RULES, Penalties
    from remote_probes.evaluation.spec_simulation import simulate

    target, draft, _wiring, _n = lab_pair
    ns = build_parser().parse_args(["--model-path", str(target), "--speculative-algorithm", "EAGLE3",
                                    "--speculative-draft-model-path", str(draft), "--speculative-num-steps", "4",
                                    "--speculative-eagle-topk", "1"])
    runner = LabModelRunner(resolve(ns, target_architecture="LlamaForCausalLM"), log=logging.getLogger("t").debug)
    assert runner.draft is not None
    for prompt in load_prompts(None)[:2]:
        ids = runner.tokenizer(prompt)["input_ids"]
        for decoding in (Decoding(), Decoding(Penalties(frequency=1.0), RULES["sglang"]),
                         Decoding(temperature=0.8, seed=4, top_k=20, top_p=0.9),
                         # SGLang's sampled verify with a threshold below 1, a penalty by its relaxed rule
                         Decoding(Penalties(presence=0.5), RULES["sglang"], 0.8, 5, threshold_acc=0.6)):
            gen = runner.generate(ids, max_new_tokens=24, stop=[], stop_token_ids=[], ignore_eos=False,
                                  penalties=decoding.penalties, rule=decoding.rule, temperature=decoding.temperature,
                                  seed=decoding.seed, top_k=decoding.top_k, top_p=decoding.top_p,
                                  threshold_single=decoding.threshold_single, threshold_acc=decoding.threshold_acc)
            tokens, cycles = simulate(torch, runner.target, runner.draft, ids, runner.capture, 4, 24, decoding,
                                      runner.eos_id)
            assert (tokens, cycles) == (gen.spec.accepted_tokens, gen.spec.verify_ct), (decoding, gen.spec)


def test_a_request_cut_to_its_last_tokens_is_replayed_as_the_stand_in_serves_that_prompt(lab_pair, tmp_path) -> None:  # noqa: F811
    """``keep_last``: the same request again at a shorter context (what a long category owes to its length); its
    accept length is the one the stand-in serves for the prompt's last tokens. A prompt already that short is not
    cut, and a keep_last that is not a positive integer is refused by name."""
    from orchestrator.actions.bench import load_prompts
    from orchestrator.lab.stand_in.model_runner import LabModelRunner
    from orchestrator.lab.stand_in.sglang_args import build_parser, resolve
    from remote_probes.agent.protocol import ProbeFailure
    from remote_probes.evaluation.traffic_offline import parse_requests

    target, draft, _wiring, _n = lab_pair
    long_prompt = "\n".join(load_prompts(None)[:6])
    rc = run_draft_test(tmp_path, {"target": str(target), "engine": "vllm", "max_new_tokens": 24,
                                   "requests": [{"body": {"prompt": long_prompt, "temperature": 0, "max_tokens": 24},
                                                 "keep_last": 20},
                                                {"body": {"prompt": "def f(x):", "temperature": 0, "max_tokens": 24},
                                                 "keep_last": 200}],
                                   "configs": [{"draft": str(draft), "algorithm": "EAGLE3", "steps": 3}]},
                        probe="draft_reconcile")
    whole, short = rc["configs"][0]["row"]["per_request"]
    assert whole["cut_prompt_tokens"] == 20 and whole["cut_accept_length"] >= 1.0 and "cut_accept_length" not in short
    ns = build_parser().parse_args(["--model-path", str(target), "--speculative-algorithm", "EAGLE3",
                                    "--speculative-draft-model-path", str(draft), "--speculative-num-steps", "3",
                                    "--speculative-eagle-topk", "1"])
    runner = LabModelRunner(resolve(ns, target_architecture="LlamaForCausalLM"), log=logging.getLogger("t").debug)
    for ids, want in ((runner.tokenizer(long_prompt)["input_ids"][-20:], whole["cut_accept_length"]),
                      (runner.tokenizer(long_prompt)["input_ids"], whole["accept_length"])):
        gen = runner.generate(ids, max_new_tokens=24, stop=[], stop_token_ids=[], ignore_eos=False)
        assert abs(gen.spec.accepted_tokens / gen.spec.verify_ct - want) < 1e-3, (gen.spec, want)
    for bad in (0, -3, True, "20"):
        with pytest.raises(ProbeFailure, match=r"requests\[0\]\.keep_last must be a positive integer"):
            parse_requests([{"body": {"prompt": "x", "max_tokens": 4}, "keep_last": bad}])


def test_each_greedy_request_gives_the_drafts_first_proposal_by_the_targets_confidence(lab_pair, tmp_path) -> None:  # noqa: F811
    """``first_step`` (confidence_match.py): every drafted token of an unpenalised greedy request counted once, in
    the bin of the target's probability of it, which a forward of transformers' own gives; a penalised request
    (its tokens not the target's own ranking) has none."""
    import torch

    from orchestrator.actions.bench import load_prompts
    from remote_probes.evaluation.confidence_match import BIN_EDGES, bin_of
    from remote_probes.evaluation.target_model import load_causal_lm

    target, draft, _wiring, _n = lab_pair
    code = load_prompts(None)[:2]
    bodies = [{"prompt": code[0], "temperature": 0, "max_tokens": 24},
              {"prompt": code[1], "temperature": 0, "max_tokens": 24},
              {"prompt": code[1], "temperature": 0, "max_tokens": 24, "presence_penalty": 1.0}]
    rc = run_draft_test(tmp_path, {"target": str(target), "engine": "vllm", "max_new_tokens": 24,
                                   "requests": [{"body": b} for b in bodies],
                                   "configs": [{"draft": str(draft), "algorithm": "EAGLE3", "steps": 3}]},
                        probe="draft_reconcile")
    rows = rc["configs"][0]["row"]["per_request"]
    assert "first_step" not in rows[2], rows[2]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(target))
    model = load_causal_lm(str(target), torch.float32)
    for body, row in zip(bodies[:2], rows[:2], strict=True):
        ids = tokenizer(body["prompt"])["input_ids"]
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False,
                                 pad_token_id=tokenizer.eos_token_id)
            probs = torch.softmax(model(out).logits[0, :-1], -1).gather(1, out[0, 1:, None])[:, 0].tolist()
        drafted = probs[len(ids):]  # the tokens after the first generated one, each drafted once
        bins = row["first_step"]["bins"]
        assert len(bins) == len(BIN_EDGES) - 1 and all(0 <= r <= t for r, t in bins), bins
        assert [t for _, t in bins] == [sum(bin_of(p) == b for p in drafted) for b in range(len(bins))], bins
        assert row["first_step"]["target_probability"] == pytest.approx(sum(drafted) / len(drafted), abs=1e-4)
        assert sum(r for r, _ in bins) > 0, bins  # the lab's draft predicts the lab's code


def test_a_chat_request_without_its_template_is_replayed_as_its_messages_text_alone(lab_pair, tmp_path) -> None:  # noqa: F811
    """``without_template``: a chat request again without its chat template, its messages' text alone tokenised as
    a completion's prompt; its accept length is the one the stand-in serves for that prompt. A completion is not
    replayed again, and a flag that is not a boolean is refused by name."""
    from orchestrator.actions.bench import load_prompts
    from orchestrator.lab.stand_in.model_runner import LabModelRunner
    from orchestrator.lab.stand_in.sglang_args import build_parser, resolve
    from remote_probes.agent.protocol import ProbeFailure
    from remote_probes.evaluation.traffic_offline import parse_requests

    target, draft, _wiring, _n = lab_pair
    template = tmp_path / "chat.jinja"
    template.write_text(TEMPLATE)
    code = load_prompts(None)[0]
    rc = run_draft_test(tmp_path, {"target": str(target), "engine": "vllm", "max_new_tokens": 24,
                                   "requests": [{"body": {"messages": [{"role": "user", "content": code}],
                                                          "temperature": 0, "max_tokens": 24},
                                                 "without_template": True},
                                                {"body": {"prompt": code, "temperature": 0, "max_tokens": 24},
                                                 "without_template": True}],
                                   "chat_template_path": str(template),
                                   "configs": [{"draft": str(draft), "algorithm": "EAGLE3", "steps": 3}]},
                        probe="draft_reconcile")
    chat, completion = rc["configs"][0]["row"]["per_request"]
    assert "untemplated_accept_length" not in completion
    ns = build_parser().parse_args(["--model-path", str(target), "--speculative-algorithm", "EAGLE3",
                                    "--speculative-draft-model-path", str(draft), "--speculative-num-steps", "3",
                                    "--speculative-eagle-topk", "1"])
    runner = LabModelRunner(resolve(ns, target_architecture="LlamaForCausalLM"), log=logging.getLogger("t").debug)
    ids = runner.tokenizer(code)["input_ids"]
    assert chat["untemplated_prompt_tokens"] == len(ids)
    gen = runner.generate(ids, max_new_tokens=24, stop=[], stop_token_ids=[], ignore_eos=False)
    assert abs(gen.spec.accepted_tokens / gen.spec.verify_ct - chat["untemplated_accept_length"]) < 1e-3, gen.spec
    assert abs(chat["untemplated_accept_length"] - completion["accept_length"]) < 1e-3
    for bad in (1, "yes", None):
        with pytest.raises(ProbeFailure, match=r"requests\[0\]\.without_template must be true or false"):
            parse_requests([{"body": {"prompt": "x", "max_tokens": 4}, "without_template": bad}])


def test_a_chat_request_with_its_templates_thinking_off_is_replayed_as_the_stand_in_serves_it(lab_pair, tmp_path) -> None:  # noqa: F811
    """``thinking_off``: a chat request again with its template's thinking switched off (the unseen lab's thinking
    template, whose suffix ``enable_thinking: false`` drops, as Qwen3's does), named, its accept length the one the
    stand-in serves for the request with that switch; a template with no switch, and a request that already has
    thinking off, give no such replay."""
    from orchestrator.actions.bench import load_prompts
    from orchestrator.lab.building.unseen_lab import THINKING_TEMPLATE
    from orchestrator.lab.stand_in.model_runner import LabModelRunner
    from orchestrator.lab.stand_in.sglang_args import build_parser, resolve
    from orchestrator.lab.stand_in.sglang_openai import chat_prompt

    target, draft, _wiring, _n = lab_pair
    thinking, plain = tmp_path / "thinking.jinja", tmp_path / "plain.jinja"
    thinking.write_text(THINKING_TEMPLATE)
    plain.write_text(TEMPLATE)
    code = load_prompts(None)[0]
    chat = {"messages": [{"role": "user", "content": code}], "temperature": 0, "max_tokens": 24}
    off = dict(chat, chat_template_kwargs={"enable_thinking": False})

    def replay(template, body):
        rc = run_draft_test(tmp_path, {"target": str(target), "engine": "vllm", "max_new_tokens": 24,
                                       "requests": [{"body": body, "thinking_off": True}],
                                       "chat_template_path": str(template),
                                       "configs": [{"draft": str(draft), "algorithm": "EAGLE3", "steps": 3}]},
                            probe="draft_reconcile")
        return rc["configs"][0]["row"]["per_request"][0]

    row = replay(thinking, chat)
    assert row["thinking_switch"] == "enable_thinking", row
    ns = build_parser().parse_args(["--model-path", str(target), "--speculative-algorithm", "EAGLE3",
                                    "--speculative-draft-model-path", str(draft), "--speculative-num-steps", "3",
                                    "--speculative-eagle-topk", "1"])
    runner = LabModelRunner(resolve(ns, target_architecture="LlamaForCausalLM"), log=logging.getLogger("t").debug)
    ids = chat_prompt(runner.tokenizer, str(thinking), off)
    assert row["thinking_off_prompt_tokens"] == len(ids) < len(chat_prompt(runner.tokenizer, str(thinking), chat))
    gen = runner.generate(ids, max_new_tokens=24, stop=[], stop_token_ids=[], ignore_eos=False)
    assert abs(gen.spec.accepted_tokens / gen.spec.verify_ct - row["thinking_off_accept_length"]) < 1e-3, gen.spec
    for template, body in ((plain, chat), (thinking, off)):
        row = replay(template, body)
        assert "thinking_off_accept_length" not in row and "thinking_switch" not in row, row
    from remote_probes.agent.protocol import ProbeFailure
    from remote_probes.evaluation.traffic_offline import parse_requests

    with pytest.raises(ProbeFailure, match=r"requests\[0\]\.thinking_off must be true or false"):
        parse_requests([{"body": {"prompt": "x", "max_tokens": 4}, "thinking_off": "yes"}])
