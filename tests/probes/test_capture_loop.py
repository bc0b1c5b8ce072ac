"""Where the target's class takes the draft's hidden states (target_capture's ``capture_loop``), and the capture rules
read there, on the real SGLang and vLLM trees for published targets (tests/probes/published_targets/).

| target    | SGLang 0.5.12.post1                 | SGLang 0.5.23                   | vLLM 0.33.0 / 0.11.0         |
|-----------|-------------------------------------|---------------------------------|------------------------------|
| Llama-3.1 | llama.py LlamaModel.forward         | llama.py LlamaModel.forward     | llama.py LlamaModel.forward  |
| Qwen3-8B  | qwen2.py Qwen2Model.forward (Qwen3Model inherits it) | qwen3.py Qwen3Model.forward (its own) | qwen2.py Qwen2Model.forward |
| gpt-oss   | gpt_oss.py GptOssModel.forward      | gpt_oss.py GptOssModel.forward  | gpt_oss.py GptOssModel.forward |

The rule differs by class where the code does: SGLang 0.5.12.post1's ``LlamaModel.forward`` appends
``hidden_states + residual`` with ``residual = None`` before layer 0 (the embedding output cannot be captured), while
its ``Qwen2Model.forward``, which Qwen3 runs, appends ``hidden_states`` alone there (it can). vLLM 0.11's entry
capture of a Qwen3 target is read in qwen2.py, not llama.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.probes.test_flagship_reads import flagship_read_steps

PUBLISHED = Path(__file__).resolve().parent / "published_targets"
SG_OLD, SG_NEW, VL_NEW, VL_OLD = "0.5.12.post1", "0.5.23", "0.33.0", "0.11.0"

# (engine, version) -> target -> (file, symbol) of the loop
LOOPS: dict[tuple[str, str], dict[str, tuple[str, str]]] = {
    ("sglang", SG_OLD): {"llama-3.1-8b-instruct": ("srt/models/llama.py", "LlamaModel.forward"),
                         "qwen3-8b": ("srt/models/qwen2.py", "Qwen2Model.forward"),
                         "gpt-oss-120b": ("srt/models/gpt_oss.py", "GptOssModel.forward")},
    ("sglang", SG_NEW): {"llama-3.1-8b-instruct": ("srt/models/llama.py", "LlamaModel.forward"),
                         "qwen3-8b": ("srt/models/qwen3.py", "Qwen3Model.forward"),
                         "gpt-oss-120b": ("srt/models/gpt_oss.py", "GptOssModel.forward")},
    ("vllm", VL_NEW): {"llama-3.1-8b-instruct": ("model_executor/models/llama.py", "LlamaModel.forward"),
                       "qwen3-8b": ("model_executor/models/qwen2.py", "Qwen2Model.forward"),
                       "gpt-oss-120b": ("model_executor/models/gpt_oss.py", "GptOssModel.forward")},
    ("vllm", VL_OLD): {"llama-3.1-8b-instruct": ("model_executor/models/llama.py", "LlamaModel.forward"),
                       "qwen3-8b": ("model_executor/models/qwen2.py", "Qwen2Model.forward"),
                       "gpt-oss-120b": ("model_executor/models/gpt_oss.py", "GptOssModel.forward")},
}
# SGLang version -> target -> can its loop capture the embedding output (eagle_config id -1)?
EMBEDDING = {SG_OLD: {"llama-3.1-8b-instruct": False, "qwen3-8b": True, "gpt-oss-120b": False},
             SG_NEW: {"llama-3.1-8b-instruct": True, "qwen3-8b": True, "gpt-oss-120b": True}}


def published(name: str) -> dict[str, Any]:
    return json.loads((PUBLISHED / f"{name}.json").read_text())


def _loop(run_probe: Any, engine: str, tree: Path, name: str) -> dict[str, Any]:
    result = run_probe("target_capture", {"config": published(name), "engine": engine,
                                          "sys_path": [str(tree)]}).result
    assert result["found"] and result["capture_loop"], result
    return result


@pytest.mark.sglang_source
@pytest.mark.parametrize("version", [SG_OLD, SG_NEW])
def test_sglang_capture_loop_and_its_rule_follow_the_class(run_probe, sglang_trees, version: str) -> None:
    from remote_probes.engine.sglang_capture import capture_rules

    tree = sglang_trees(version)
    for name, (file, symbol) in LOOPS[("sglang", version)].items():
        result = _loop(run_probe, "sglang", tree, name)
        loop = result["capture_loop"]
        assert (loop["file"], loop["symbol"]) == (file, symbol), (name, loop)
        source = (tree / "sglang" / file).read_text().splitlines()
        assert source[loop["line"] - 1].lstrip().startswith("def forward("), (name, loop)
        rules = capture_rules(str(tree / "sglang"), loop)
        assert rules["embedding"] is EMBEDDING[version][name], (name, rules["why"])
        assert {e["file"] for e in rules["evidence"]} >= {file}, (name, rules["evidence"])
        # the flagship's loop read, rendered with this result, lands on that forward
        reads = {r["id"]: r for _, rs in flagship_read_steps(result) for r in rs}
        run = run_probe("sglang_source", {"package": "sglang", "sys_path": [str(tree)],
                                          "reads": [reads["capture_loop"]]})
        read = run.result["reads"][0]
        assert read["found"] and read["file"] == file and [m["symbol"] for m in read["matches"]] == [symbol], read


@pytest.mark.vllm_source
@pytest.mark.parametrize("version", [VL_NEW, VL_OLD])
def test_vllm_capture_loop_and_its_placement_follow_the_class(run_probe, vllm_trees, version: str) -> None:
    from remote_probes.engine.vllm_capture import capture_rules

    tree = vllm_trees[version]
    for name, (file, symbol) in LOOPS[("vllm", version)].items():
        result = _loop(run_probe, "vllm", tree, name)
        loop = result["capture_loop"]
        assert (loop["file"], loop["symbol"]) == (file, symbol), (name, loop)
        rules = capture_rules(str(tree / "vllm"), None, loop)
        if version == VL_OLD and name != "gpt-oss-120b":  # layer-entry capture, read in the class's own loop
            assert rules["capture"] == "entry" and any(e["file"] == file for e in rules["evidence"]), (name, rules)
        elif version == VL_NEW:  # EagleModelMixin's boundary capture (interfaces.py), which the loop calls
            assert rules["capture"] == "boundary", (name, rules)
    # Qwen3 on 0.11: the entry capture is read in qwen2.py, where Qwen3's loop is, never in llama.py
    from tests.probes.test_vllm_source import flagship_vllm_steps

    result = _loop(run_probe, "vllm", tree, "qwen3-8b")
    reads = {r["id"]: r for _, rs in flagship_vllm_steps(result) for r in rs}
    run = run_probe("sglang_source", {"package": "vllm", "sys_path": [str(tree)],
                                      "reads": [reads["vllm_capture"], reads["vllm_capture_loop"]]})
    capture, whole = run.result["reads"]
    assert capture["found"] and whole["found"], run.result
    assert capture["file"] == ("model_executor/models/interfaces.py" if version == VL_NEW
                               else "model_executor/models/qwen2.py"), capture["file"]
    assert whole["file"] == "model_executor/models/qwen2.py"
