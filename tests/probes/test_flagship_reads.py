"""Every source read of the flagship (playbooks/eagle3.yaml) lands on the intended code in both real SGLang trees.

The reads are taken from the playbook itself, so a drifting playbook fails here. Where the code lives:

| read                | 0.5.12.post1                                           | 0.5.23                                          |
|---------------------|--------------------------------------------------------|-------------------------------------------------|
| embed_head          | speculative/eagle_worker_v2.py EagleDraftWorker.init_lm_head (spec v2, the default with topk 1) | same symbol, same file |
| embed_source        | eagle_worker_v2.py: the worker's own get_embed_and_head() call | pp_draft_embedding.py resolve_target_embed_and_head |
| lm_head_from_target | models/llama_eagle3.py LlamaForCausalLMEagle3.__init__ | same                                            |
| fc_skip             | llama_eagle3.py LlamaModel.forward                     | same                                            |
| d2t                 | llama_eagle3.py LlamaForCausalLMEagle3.load_weights    | same                                            |
| capture             | models/llama.py LlamaForCausalLM.set_eagle3_layers_to_capture | same                                     |
| capture_loop        | models/llama.py LlamaModel.forward (appends hidden_states + residual) | same (capture_output to the layer) |
| aux_ids             | model_executor/model_runner.py (ModelRunner)           | model_runner_components/spec_aux_hidden_state.py |
| topk_rule           | srt/server_args.py                                     | srt/arg_groups/speculative_hook.py              |
| sglang_target_penalties | speculative/eagle_info_v2.py (verify: one penalty per cycle) | speculative/eagle_utils.py             |
| sglang_penalty_history  | eagle_info_v2.py (the last output token, once per cycle) | managers/schedule_batch.py cumulate_penalty_output_tokens |
| sglang_draft_proposal   | eagle_worker_v2.py fast_topk over the draft's own probs | same                                          |
| sglang_sampled_acceptance | eagle_info_v2.py: the call of sgl-kernel's target-only kernel | eagle_utils.py: sampling_fn = that kernel |
| sglang_greedy_verify    | eagle_info_v2.py: ``is_all_greedy or _is_npu or _is_hip`` | eagle_utils.py ``_verify_uses_greedy``'s return |
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.actions.read_source import ReadSourceArgs, summarize
from orchestrator.hypotheses.board import evaluate_rules
from orchestrator.playbook.loader import load_playbook
from orchestrator.playbook.models import Step
from orchestrator.templating import render

pytestmark = pytest.mark.sglang_source

FLAGSHIP = Path(__file__).resolve().parents[2] / "playbooks" / "eagle3.yaml"
OLD, NEW = "0.5.12.post1", "0.5.23"
V2_WORKER = "srt/speculative/eagle_worker_v2.py"
EAGLE3 = "srt/models/llama_eagle3.py"
HOST_VARS = ("engine", "target", "draft", "candidate_flags", "fixed_flags")  # a real host's vars (the playbook header)

# id -> (file, qualified symbol or None for a pattern read, any_of alternative or None, lines the read must show)
Expected = tuple[str, str | None, int | None, list[str]]
COMMON: dict[str, Expected] = {
    "lm_head_from_target": (EAGLE3, None, None, ["self.load_lm_head_from_target = False",
                                                 "if config.draft_vocab_size is None:",
                                                 "self.load_lm_head_from_target = True"]),
    "fc_skip": (EAGLE3, None, None, ["if hidden_states.shape[-1] != embeds.shape[-1]:",
                                     "hidden_states = self.fc(hidden_states)"]),
    "d2t": (EAGLE3, "LlamaForCausalLMEagle3.load_weights", None,
            ['if "d2t" in name:', "self.hot_token_id = loaded_weight + torch.arange(loaded_weight.shape[0])"]),
    "capture": ("srt/models/llama.py", "LlamaForCausalLM.set_eagle3_layers_to_capture", None,
                ["self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]",
                 "self.model.layers_to_capture = [val + 1 for val in layer_ids]"]),
}
EXPECTED: dict[str, dict[str, Expected]] = {
    OLD: {
        **COMMON,
        "capture_loop": ("srt/models/llama.py", "LlamaModel.forward", None,
                         ["aux_hidden_states.append(hidden_states + residual)"]),
        "embed_head": (V2_WORKER, "EagleDraftWorker.init_lm_head", 0, [
            "embed, head = self.target_worker.model_runner.model.get_embed_and_head()",
            "and self.draft_runner.model.load_lm_head_from_target",
            "self.draft_runner.model.set_embed_and_head(embed, head)",
            "self.draft_runner.model.set_embed(embed)"]),
        "embed_source": (V2_WORKER, None, 1,
                         ["embed, head = self.target_worker.model_runner.model.get_embed_and_head()"]),
        "aux_ids": ("srt/model_executor/model_runner.py", None, None, [
            'eagle_config = getattr(', "self.eagle_aux_hidden_state_layer_ids = eagle_config[",
            "self.eagle_aux_hidden_state_layer_ids = None"]),
        "topk_rule": ("srt/server_args.py", None, 1, [
            "self.speculative_eagle_topk == 1",
            "self.speculative_num_draft_tokens = self.speculative_num_steps + 1"]),
        # issue 40: a request's penalties in speculative decoding (spec v2's verify and prepare-for-decode)
        "sglang_target_penalties": ("srt/speculative/eagle_info_v2.py", None, 1, [
            "# This is a relaxed version of penalties for speculative decoding.",
            "if sampling_info.acc_additive_penalties is not None:"]),
        "sglang_penalty_history": ("srt/speculative/eagle_info_v2.py", None, 1, [
            "req.output_ids[-1]", "batch.sampling_info.penalizer_orchestrator.cumulate_output_tokens("]),
        "sglang_draft_proposal": (V2_WORKER, None, None, ["topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)"]),
        # at a temperature: the target-only kernel, and where the verify is greedy whatever the temperature
        "sglang_sampled_acceptance": ("srt/speculative/eagle_info_v2.py", None, 2,
                                      ["tree_speculative_sampling_target_only("]),
        "sglang_greedy_verify": ("srt/speculative/eagle_info_v2.py", None, 2,
                                 ["if sampling_info.is_all_greedy or _is_npu or _is_hip:"]),
    },
    NEW: {
        **COMMON,
        "capture_loop": ("srt/models/llama.py", "LlamaModel.forward", None,
                         ["capture_output=aux_hidden_states.capture"]),
        "embed_head": (V2_WORKER, "EagleDraftWorker.init_lm_head", 0, [
            "embed, head = self._resolve_shared_embed_and_head()",
            "and self.draft_runner.model.load_lm_head_from_target",
            "self.draft_runner.model.set_embed_and_head(embed, head)",
            "self.draft_runner.model.set_embed(embed)"]),
        "embed_source": ("srt/speculative/pp_draft_embedding.py", "resolve_target_embed_and_head", 0,
                         ["return target_model.get_embed_and_head()"]),
        "aux_ids": ("srt/model_executor/model_runner_components/spec_aux_hidden_state.py", None, None, [
            'eagle_config = getattr(draft_model_config.hf_config, "eagle_config", None)',
            "config.eagle_aux_hidden_state_layer_ids = eagle_config[",
            "config.eagle_aux_hidden_state_layer_ids = None"]),
        "topk_rule": ("srt/arg_groups/speculative_hook.py", None, 0, [
            "cfg.speculative_eagle_topk == 1",
            "speculative_num_draft_tokens=cfg.speculative_num_steps + 1"]),
        "sglang_target_penalties": ("srt/speculative/eagle_utils.py", None, 0, [
            "# This is a relaxed version of penalties for speculative decoding.",
            "if sampling_info.acc_additive_penalties is not None:"]),
        "sglang_penalty_history": ("srt/managers/schedule_batch.py", "ScheduleBatch.cumulate_penalty_output_tokens", 0,
                                   ["req.output_ids[-1] if len(req.output_ids) else req.origin_input_ids[-1]"]),
        "sglang_draft_proposal": (V2_WORKER, None, None, ["topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)"]),
        "sglang_sampled_acceptance": ("srt/speculative/eagle_utils.py", None, 0,
                                      ["sampling_fn = tree_speculative_sampling_target_only"]),
        "sglang_greedy_verify": ("srt/speculative/eagle_utils.py", None, 0, [
            "return is_all_greedy or is_cpu or is_xpu or (is_hip and not use_rejection_sampling)"]),
    },
}


#: the lab's target class; the reads that follow the target's class get their address from the target_capture step
LLAMA_TARGET = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 12}


def target_class(run_probe: Any, sys_path: Path, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The flagship's target_capture step on this tree: which class runs ``config``'s target and where it captures."""
    run = run_probe("target_capture", {"config": config or LLAMA_TARGET, "engine": "sglang", "sys_path": [str(sys_path)]})
    return run.result


def flagship_read_steps(target: dict[str, Any] | None = None) -> list[tuple[Step, list[dict[str, Any]]]]:
    """The flagship's read_source steps with their reads, exactly as the action sends them to the probe (rendered
    with the target_capture step's result ``target``, as the engine renders them after it ran)."""
    # SGLang's reads (the vLLM ones, package vllm, are tests/probes/test_vllm_source.py's)
    steps = [s for s in load_playbook(FLAGSHIP, extra_names=HOST_VARS).steps
             if s.action == "read_source" and s.args.get("package") == "sglang"]
    variables = {"target_class": target or {"found": False}}
    return [(s, ReadSourceArgs.model_validate(render(s.args, variables)).all_reads()) for s in steps]


def run_flagship_reads(run_probe: Any, sys_path: Path, target: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """register name -> the summarized step result, every read of every step run in one probe call."""
    steps = flagship_read_steps(target if target is not None else target_class(run_probe, sys_path))
    everything = [read for _, reads in steps for read in reads]
    run = run_probe("sglang_source", {"package": "sglang", "sys_path": [str(sys_path)], "reads": everything})
    result = run.result
    registered, offset = {}, 0
    for step, reads in steps:
        part = dict(result, reads=result["reads"][offset:offset + len(reads)])
        offset += len(reads)
        assert step.register_as, f"{step.name}: a flagship read step registers its result for the rules"
        registered[step.register_as] = summarize(part)
    return registered


def test_every_flagship_read_is_covered_here() -> None:
    ids = [read.get("id") for _, reads in flagship_read_steps() for read in reads]
    assert all(ids) and len(ids) == len(set(ids)), f"every flagship read needs a unique id: {ids}"
    for version, expected in EXPECTED.items():
        assert sorted(ids) == sorted(expected), f"{version}: update EXPECTED when the flagship's reads change"


@pytest.mark.parametrize("version", [OLD, NEW])
def test_flagship_reads_land_on_the_intended_code(run_probe, sglang_trees, version: str) -> None:
    registered = run_flagship_reads(run_probe, sglang_trees(version))
    reads = {r["id"]: r for result in registered.values() for r in result["reads"]}
    for rid, (file, symbol, alternative, shown) in EXPECTED[version].items():
        read = reads[rid]
        where = f"{rid} on {version}"
        assert read["found"] and not read.get("error") and not read.get("not_found"), f"{where}: {read}"
        assert read["file"] == file, f"{where} landed in {read['file']}"
        # every span in the intended file: the old whole-package grep showed gemma3_mm.py/kimi_k25.py instead
        assert {m["file"] for m in read.get("matches") or [read]} == {file}, where
        assert read.get("alternative") == alternative, f"{where}: alternative {read.get('alternative')}"
        if symbol is not None:
            assert [m["symbol"] for m in read["matches"]] == [symbol], where
            assert read["lines"][0][1].lstrip().startswith("def " + symbol.rsplit(".", 1)[-1] + "("), where
        text = [t.strip() for m in read.get("matches") or [read] for _, t in m["lines"]]
        for line in shown:
            assert any(line in t for t in text), f"{where} does not show {line!r}"
        if read.get("expect") is not None:
            assert read["expect"]["passed"], f"{where}: expect failed {read['expect']}"
    for register, result in registered.items():
        assert result["found"] and result["not_found"] == [] and result["version"] == version, register


@pytest.mark.parametrize("version", [OLD, NEW])
def test_flagship_read_rules_stay_quiet_when_the_code_is_there(run_probe, sglang_trees, version: str) -> None:
    """Found code decides nothing by itself: no rule of the read steps fires on a stock SGLang."""
    registered = run_flagship_reads(run_probe, sglang_trees(version))
    for step, _ in flagship_read_steps():
        assert evaluate_rules(step, registered) == [], step.name


def test_flagship_reads_that_find_nothing_are_recorded_as_evidence(run_probe, tmp_path: Path) -> None:
    """An "sglang" with none of the code: every read is not found, no step fails, and each read step's rules
    record an inconclusive verdict whose evidence says what was missing in which version."""
    site = tmp_path / "site"
    (site / "sglang" / "srt" / "models").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "srt" / "models" / "llama_eagle3.py").write_text("class Other:\n    pass\n")
    dist = site / "sglang-9.9.9.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 9.9.9\n")
    registered = run_flagship_reads(run_probe, site, target={"found": False})
    for result in registered.values():
        assert not result["found"] and result["not_found"], result
        for read in result["reads"]:
            assert not read["found"] and not read.get("error"), read
            assert read["not_found"]["message"].startswith("not found in sglang 9.9.9: "), read
            if read.get("expect") is not None:
                assert read["expect"]["passed"] is False
    decided = 0
    for step, _ in flagship_read_steps():
        if not step.evidence:
            continue
        hits = evaluate_rules(step, registered)
        assert hits and all(verdict == "inconclusive" for _, verdict, _, _ in hits), (step.name, hits)
        for _, _, _, because in hits:
            assert because and "not found in sglang 9.9.9" in because, (step.name, because)
        decided += len(hits)
    assert decided >= 4  # lm_head_sharing, d2t_mapping, wrong_algorithm, wiring, flags_override


@pytest.mark.parametrize("version", [OLD, NEW])
def test_the_read_tour_finds_every_read_on_both_versions(run_probe, sglang_trees, version: str) -> None:
    """playbooks/read-sglang.yaml, the flagship's reads as a tour: each finds its code (a silent miss is how its
    two_h_input pattern went unnoticed). Its first step is the seed's fixed range, gone from 0.5.13 on by design."""
    tour = load_playbook(FLAGSHIP.parent / "read-sglang.yaml")
    steps = [s for s in tour.steps if s.action == "read_source"][1:]
    reads = [r for s in steps for r in ReadSourceArgs.model_validate(
        {k: v for k, v in s.args.items() if k != "sys_path"}).all_reads()]  # sys_path is templated; given below
    run = run_probe("sglang_source", {"package": "sglang", "sys_path": [str(sglang_trees(version))], "reads": reads})
    missed = [(r.get("id"), r.get("not_found") or r.get("error")) for r in run.result["reads"] if not r["found"]]
    assert missed == []
