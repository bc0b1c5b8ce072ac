"""SGLang's loading and capture rules, and real speculative decoding, with the lab's models in-process."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from orchestrator.lab.building.build import LabPaths, seed_wiring
from orchestrator.lab.stand_in.sglang_args import StartupError, build_parser, resolve

pytestmark = [pytest.mark.lab, pytest.mark.torch]


def trained(lab: LabPaths) -> str:
    return ",".join(str(i) for i in seed_wiring(lab.num_layers))


def models_for(lab: LabPaths, *argv: str):
    from orchestrator.lab.stand_in.model_runner import LabModelRunner

    ns = build_parser().parse_args(["--model-path", str(lab.target), *argv])
    return LabModelRunner(resolve(ns, target_architecture="LlamaForCausalLM"), log=logging.getLogger("lab-test").info)


def spec_argv(draft: Path | str, steps: int = 7, algo: str = "EAGLE3", *extra: str) -> list[str]:
    return ["--speculative-algorithm", algo, "--speculative-draft-model-path", str(draft),
            "--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1", *extra]


def run(models) -> dict[str, Any]:
    """Accept length per request over the flagship's own bench sample (the bundled prompts, its n and tokens: what
    the lab's calibration checked), its 95% interval with the request as the unit, and the outputs."""
    from orchestrator.actions.bench import load_prompts
    from orchestrator.lab.building.calibrate import FlagshipSample
    from remote_probes.evaluation.interval_stats import mean_interval

    sample = FlagshipSample()
    accepts, outputs = [], []
    for text in load_prompts(None)[:sample.bench_n]:
        gen = models.generate(models.tokenizer(text)["input_ids"], max_new_tokens=sample.bench_tokens, stop=[],
                              stop_token_ids=[], ignore_eos=False)
        accepts.append(len(gen.output_ids) / gen.spec.verify_ct if gen.spec.verify_ct else 1.0)
        outputs.append(gen.output_ids)
    iv = mean_interval(accepts)
    return {"tau": iv.estimate if iv else 1.0, "ci": iv.as_list() if iv else None, "outputs": outputs}


def clearly_below(low: dict[str, Any], high: dict[str, Any]) -> bool:
    """The 95% intervals do not overlap: ``low``'s upper bound is under ``high``'s lower bound."""
    return low["ci"] is not None and high["ci"] is not None and low["ci"][1] < high["ci"][0]


@pytest.fixture(scope="module")
def plain(lab: LabPaths) -> dict[str, Any]:
    return run(models_for(lab))


def test_default_capture_is_sglangs_2_mid_n_minus_3(lab: LabPaths):
    n = lab.num_layers
    assert models_for(lab, *spec_argv(lab.drafts["seed-wiring"])).capture == [2, n // 2, n - 3]


def test_nested_ids_get_plus_one_and_top_level_ids_are_ignored(lab: LabPaths, variant):
    nested = variant("healthy", set={"eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 5, 10]},
                                     "eagle_aux_hidden_state_layer_ids": [3, 4, 5]})
    assert models_for(lab, *spec_argv(nested)).capture == [1, 6, 11]
    n = lab.num_layers
    assert models_for(lab, *spec_argv(lab.drafts["off-by-one"])).capture == [2, n // 2, n - 3]


def test_lab_capture_layers_override(lab: LabPaths):
    assert models_for(lab, *spec_argv(lab.drafts["seed-wiring"]), "--lab-capture-layers", trained(lab)).capture == seed_wiring(lab.num_layers)
    with pytest.raises(StartupError, match="outside the target"):
        models_for(lab, *spec_argv(lab.drafts["seed-wiring"]), "--lab-capture-layers", "0,6,40")


def test_speculative_output_is_lossless(lab: LabPaths, plain):
    for argv in (spec_argv(lab.drafts["seed-wiring"]), spec_argv(lab.drafts["healthy"], steps=3)):
        assert run(models_for(lab, *argv))["outputs"] == plain["outputs"]


def test_healthy_draft_accepts_clearly_more_than_the_seed_wiring(lab: LabPaths, plain):
    seed = run(models_for(lab, *spec_argv(lab.drafts["seed-wiring"])))
    healthy = run(models_for(lab, *spec_argv(lab.drafts["healthy"])))
    fixed = run(models_for(lab, *spec_argv(lab.drafts["seed-wiring"]), "--lab-capture-layers", trained(lab)))
    assert clearly_below(seed, healthy), (seed["ci"], healthy["ci"])
    assert clearly_below(seed, fixed), (seed["ci"], fixed["ci"])
    assert seed["outputs"] == healthy["outputs"] == fixed["outputs"] == plain["outputs"]


def test_eagle_with_an_eagle3_draft_feeds_one_hidden_state_and_accepts_clearly_less(lab: LabPaths):
    import torch

    models = models_for(lab, *spec_argv(lab.drafts["healthy"], algo="EAGLE"))
    assert models.capture == [lab.num_layers]  # the last hidden state: width H, so fc is skipped
    # the non-EAGLE3 branch: the target's head (cut to draft_vocab_size rows by the logits processor), no d2t
    rows = models.draft.lm_head.weight.shape[0]
    assert rows == 512 and torch.equal(models.draft.lm_head.weight, models.target.lm_head.weight[:rows])
    assert not models.draft.d2t.any()
    assert {s["part"] for s in models.parts["swapped"]} == {"head", "d2t", "fc", "feed"}
    eagle = run(models)
    eagle3 = run(models_for(lab, *spec_argv(lab.drafts["healthy"])))
    assert clearly_below(eagle, eagle3), (eagle["ci"], eagle3["ci"])


def test_missing_lm_head_with_draft_vocab_declared_loads_a_random_head(lab: LabPaths):
    models = models_for(lab, *spec_argv(lab.drafts["no-lm-head"]))
    assert any("randomly initialised" in note for note in models.notes)
    good = models_for(lab, *spec_argv(lab.drafts["seed-wiring"]), "--lab-capture-layers", trained(lab))
    assert clearly_below(run(models), run(good))


def test_lm_head_comes_from_the_target_without_draft_vocab_size(lab: LabPaths, variant):
    # the lab draft keeps its 512-entry d2t: over the target's 1024-row head SGLang indexes hot_token_id past its
    # end at the first draft step, so the lab refuses to start, as the served-parts resolution predicts
    draft = variant("healthy", drop=["draft_vocab_size"])
    with pytest.raises(StartupError, match="d2t has 512 entries but the served head has 1024 rows"):
        models_for(lab, *spec_argv(draft))


def test_tied_draft_serves_the_targets_embedding_as_its_head(lab: LabPaths, variant):
    import torch

    models = models_for(lab, *spec_argv(variant("healthy", set={"tie_word_embeddings": True})))
    assert any("target's embedding (tied)" in note for note in models.notes)
    emb = models.target.get_input_embeddings().weight
    assert torch.equal(models.draft.lm_head.weight, emb[:512])  # draft_vocab_size cuts the logits to 512
    with pytest.raises(StartupError, match="deletes the same weight twice"):  # EAGLE: set_embed_and_head
        models_for(lab, *spec_argv(variant("healthy", set={"tie_word_embeddings": True}), algo="EAGLE"))


def test_d2t_offsets_become_target_ids_and_direct_ids_break_the_mapping(lab: LabPaths):
    import torch

    good = models_for(lab, *spec_argv(lab.drafts["seed-wiring"]), "--lab-capture-layers", trained(lab))
    hot = good.draft.to_target_ids(torch.arange(good.draft.d2t.shape[0]))
    assert hot.min() >= 0 and hot.max() < good.config.vocab_size and len(set(hot.tolist())) == hot.shape[0]
    bad = models_for(lab, *spec_argv(lab.drafts["direct-d2t"]), "--lab-capture-layers", trained(lab))
    assert any("d2t" in note for note in bad.notes)
    assert clearly_below(run(bad), run(good))


@pytest.mark.parametrize(("architecture", "said"), [
    ("LlamaForCausalLM", r"AttributeError: 'LlamaForCausalLM' object has no attribute 'hot_token_id' "
                         r"\(srt/speculative/eagle_worker.py:\d+: if self.draft_model_runner.model.hot_token_id"),
    ("Eagle3DraftModel", r"ValueError: Model architectures \['Eagle3DraftModel'\] are not supported for now. "
                         r"\(srt/models/registry.py:\d+"),
])
def test_a_draft_sglang_would_not_load_as_eagle3_is_refused_as_sglang_refuses_it(lab: LabPaths, variant, monkeypatch,
                                                                                  architecture: str, said: str):
    """Loader first (issue 61): a base architecture loads as a plain model and the EAGLE-3 worker then reads its
    hot_token_id; another library's class is not registered. The stand-in read both from the tree on its path and
    refuses at start, instead of serving the weights as an EAGLE-3 draft the engine never builds."""
    monkeypatch.syspath_prepend(str(lab.site))  # the tree on the lab server's path (its PYTHONPATH)
    with pytest.raises(StartupError, match=said):
        models_for(lab, *spec_argv(variant("healthy", set={"architectures": [architecture]})))
