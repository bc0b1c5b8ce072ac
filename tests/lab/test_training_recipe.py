"""Training from nothing, in every run, at a reduced size: the lab's own recipe (the pinned child process, the stdlib
corpus, the tokenizer, the target, an EAGLE-3 draft on the seed's wiring) trains, the losses fall, and what it writes
loads in the lab server's engine and decodes speculatively without changing the output. The full build from nothing
(every seed, calibrated) is a bench: bench/lab_seeds.py; the shipped models' link to the recipe:
tests/lab/test_shipped_lab.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from orchestrator.lab.building.build import seed_wiring
from orchestrator.lab.training import model_cache
from orchestrator.lab.training.model_cache import cached_draft, cached_target
from orchestrator.lab.training.train import DraftRecipe, TargetRecipe
from tests import training_fingerprint

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.timeout(900)]

#: the default recipe at a third of its depth, a few steps, a smaller corpus (the default: 12 layers, 560 target
#: steps on 4 MB, 393 draft steps on 1024 chunks), at one thread: beside the other xdist worker on 2 cores, two
#: training threads spin on each other (604 s at two threads under load ~9)
SMALL_TARGET = TargetRecipe(num_layers=4, corpus_bytes=300_000, steps=30, threads=1)
SMALL_DRAFT = DraftRecipe(steps=30, chunks=32, threads=1)


def test_the_recipe_trains_from_nothing_at_a_reduced_size(tmp_path: Path) -> None:
    target = cached_target(seed=0, recipe=SMALL_TARGET, cache_dir=tmp_path / "cache")
    facts = json.loads((target / "lab_recipe.json").read_text())
    assert facts["recipe"]["steps"] == 30 and facts["numerics"]["cpu_capability"]
    assert facts["loss_last"] < facts["loss_first"] - 0.3, facts  # ~6.9 (uniform over 1024 tokens) falls
    n = SMALL_TARGET.num_layers
    draft = cached_draft(target, wiring=seed_wiring(n), recipe=SMALL_DRAFT)
    dfacts = json.loads((draft / "lab_recipe.json").read_text())
    assert dfacts["loss_last"] < dfacts["loss_first"], dfacts
    assert json.loads((draft / "config.json").read_text())["architectures"] == ["LlamaForCausalLMEagle3"]
    # the recipe key holds no code: what training produces is held to the fingerprint of this RECIPE_VERSION
    print(training_fingerprint.check("llama", {"recipe": model_cache.RECIPE_VERSION},
                                     {"target": target, "draft": draft}))

    _serves_losslessly(target, draft, seed_wiring(n), "LlamaForCausalLM")


def test_the_qwen3_recipe_trains_from_nothing_at_a_reduced_size(tmp_path: Path) -> None:
    """The Qwen3 lab's own training code (orchestrator/lab/training/qwen3_train.py): the shipped Qwen3 models
    (tests/lab/test_class_shipped.py) mean CI would otherwise never train it."""
    from dataclasses import asdict

    from orchestrator.lab.training.qwen3_train import QWEN3_TRAINING_VERSION, Qwen3Recipe
    from orchestrator.lab.training.train_job import run_job

    small = Qwen3Recipe(num_layers=4, corpus_bytes=300_000, steps=30)
    target = run_job({"kind": "target", "target_class": "qwen3", "seed": 0, "recipe": asdict(small),
                      "out": str(tmp_path / "target")}, None)
    facts = json.loads((target / "lab_recipe.json").read_text())
    assert facts["target_class"] == "qwen3" and facts["loss_last"] < facts["loss_first"] - 0.3, facts
    assert json.loads((target / "config.json").read_text())["architectures"] == ["Qwen3ForCausalLM"]
    wiring = seed_wiring(small.num_layers)
    draft = run_job({"kind": "draft", "target_class": "qwen3", "target_dir": str(target), "wiring": wiring,
                     "seed": 0, "recipe": asdict(SMALL_DRAFT), "out": str(tmp_path / "draft")}, None)
    dfacts = json.loads((draft / "lab_recipe.json").read_text())
    assert dfacts["loss_last"] < dfacts["loss_first"], dfacts
    print(training_fingerprint.check("qwen3", {"recipe": model_cache.RECIPE_VERSION, "qwen3": QWEN3_TRAINING_VERSION},
                                     {"target": target, "draft": draft}))
    _serves_losslessly(target, draft, wiring, "Qwen3ForCausalLM")


def test_the_kimi_recipe_trains_from_nothing_at_a_reduced_size(tmp_path: Path) -> None:
    """The seed's class (orchestrator/lab/training/kimi_train.py): a DeepSeek-V3 with MLA and experts saved inside
    the Kimi-K2.5 wrapper, and an MLA draft on the seed's shift; shipped models mean CI would otherwise never train
    it."""
    from dataclasses import asdict

    from orchestrator.lab.training.kimi_train import KIMI_TRAINING_VERSION, KimiRecipe
    from orchestrator.lab.training.train_job import run_job

    small = KimiRecipe(num_layers=4, corpus_bytes=300_000, steps=30)
    target = run_job({"kind": "target", "target_class": "kimi", "seed": 0, "recipe": asdict(small),
                      "out": str(tmp_path / "target")}, None)
    facts = json.loads((target / "lab_recipe.json").read_text())
    assert facts["target_class"] == "kimi" and facts["loss_last"] < facts["loss_first"] - 0.3, facts
    config = json.loads((target / "config.json").read_text())
    assert config["architectures"] == ["KimiK25ForConditionalGeneration"], config
    assert config["text_config"]["architectures"] == ["DeepseekV3ForCausalLM"], config
    wiring = seed_wiring(small.num_layers, "kimi")
    draft = run_job({"kind": "draft", "target_class": "kimi", "target_dir": str(target), "wiring": wiring,
                     "seed": 0, "recipe": asdict(SMALL_DRAFT), "out": str(tmp_path / "draft")}, None)
    dfacts = json.loads((draft / "lab_recipe.json").read_text())
    assert dfacts["loss_last"] < dfacts["loss_first"], dfacts
    assert json.loads((draft / "config.json").read_text())["architectures"] == ["Eagle3DeepseekV2ForCausalLM"]
    print(training_fingerprint.check("kimi", {"recipe": model_cache.RECIPE_VERSION, "kimi": KIMI_TRAINING_VERSION},
                                     {"target": target, "draft": draft}))
    _serves_losslessly(target, draft, wiring, "KimiK25ForConditionalGeneration")

def _serves_losslessly(target: Path, draft: Path, wiring: list[int], architecture: str) -> None:
    """What training wrote is a lab: the server's engine loads both and speculative decoding is lossless."""
    from orchestrator.lab.stand_in.model_runner import LabModelRunner
    from orchestrator.lab.stand_in.sglang_args import build_parser, resolve

    def models(*flags: str) -> LabModelRunner:
        ns = build_parser().parse_args(["--model-path", str(target), *flags])
        return LabModelRunner(resolve(ns, target_architecture=architecture), log=logging.getLogger("t").debug)

    prompt = json.loads((target / "prompts.json").read_text())[0]
    plain = models()
    spec = models("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(draft),
                  "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                  "--speculative-num-draft-tokens", "4", "--lab-capture-layers", ",".join(map(str, wiring)))
    ids = plain.tokenizer(prompt)["input_ids"]
    kwargs = {"max_new_tokens": 24, "stop": [], "stop_token_ids": [], "ignore_eos": True}
    want = plain.generate(ids, **kwargs).output_ids
    got = spec.generate(ids, **kwargs)
    assert got.output_ids == want and got.spec.verify_ct > 0
