"""The target's own class, followed through each real engine tree (SGLang 0.5.12.post1 / 0.5.23, vLLM 0.33.0 /
0.11.0) for published targets (tests/probes/published_targets/: their config.json keys, no weights).

Where the capture read lands (the capture method that runs for the target; ``->`` is a wrapper's delegation to its
``language_model``):

| target (architecture)                        | SGLang 0.5.12.post1 / 0.5.23                     | vLLM 0.33.0                         | vLLM 0.11.0                    |
|----------------------------------------------|--------------------------------------------------|-------------------------------------|--------------------------------|
| Llama-3.1-8B (LlamaForCausalLM)              | llama.py LlamaForCausalLM                        | interfaces.py SupportsEagle3        | llama.py LlamaForCausalLM      |
| Qwen3-8B (Qwen3ForCausalLM)                  | qwen3.py Qwen3ForCausalLM                        | interfaces.py SupportsEagle3        | qwen3.py Qwen3ForCausalLM      |
| Qwen3-30B-A3B (Qwen3MoeForCausalLM)          | qwen3_moe.py Qwen3MoeForCausalLM                 | interfaces.py SupportsEagle3        | none (no EAGLE-3 support)      |
| DeepSeek-V2-Lite (DeepseekV2ForCausalLM)     | deepseek_v2.py DeepseekV2ForCausalLM             | interfaces.py SupportsEagle3        | none                           |
| DeepSeek-V3 (DeepseekV3ForCausalLM)          | deepseek_v2.py DeepseekV2ForCausalLM (its base)  | interfaces.py SupportsEagle3        | none                           |
| Kimi-K2.5 (KimiK25ForConditionalGeneration)  | kimi_k25.py -> deepseek_v2.py DeepseekV2ForCausalLM | kimi_k25 -> DeepseekV2ForCausalLM: interfaces.py | none (not in its registry) |
| gpt-oss-120b (GptOssForCausalLM)             | gpt_oss.py GptOssForCausalLM                     | interfaces.py SupportsEagle3        | gpt_oss.py GptOssForCausalLM   |
| Llama-4-Scout (Llama4ForConditionalGeneration) | mllama4.py -> llama.py LlamaForCausalLM (Llama4ForCausalLM's base) | mllama4.py -> Llama4ForCausalLM: interfaces.py | none |

vLLM 0.33's runners call ``get_eagle3_default_aux_hidden_state_layers`` (v1/worker/gpu_model_runner.py,
eagle3_utils.py), which only interfaces.py's SupportsEagle3 defines; deepseek_v2.py and kimi_k25.py still define the
0.11 name ``get_eagle3_aux_hidden_state_layers``, which no 0.33 runner calls, so a read of those would cite dead code.
Every default is (2, N // 2, N - 3) with N the TEXT model's layer count (Kimi-K2.5: text_config's 61).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.probes.test_flagship_reads import flagship_read_steps

HERE = Path(__file__).resolve().parent
PUBLISHED = HERE / "published_targets"
SG_OLD, SG_NEW, VL_NEW, VL_OLD = "0.5.12.post1", "0.5.23", "0.33.0", "0.11.0"

# target -> (SGLang: [classes of the chain], capture file, defining symbol)
SGLANG: dict[str, tuple[list[str], str, str]] = {
    "llama-3.1-8b-instruct": (["LlamaForCausalLM"], "srt/models/llama.py", "LlamaForCausalLM"),
    "qwen3-8b": (["Qwen3ForCausalLM"], "srt/models/qwen3.py", "Qwen3ForCausalLM"),
    "qwen3-30b-a3b": (["Qwen3MoeForCausalLM"], "srt/models/qwen3_moe.py", "Qwen3MoeForCausalLM"),
    "deepseek-v2-lite": (["DeepseekV2ForCausalLM"], "srt/models/deepseek_v2.py", "DeepseekV2ForCausalLM"),
    "deepseek-v3": (["DeepseekV3ForCausalLM"], "srt/models/deepseek_v2.py", "DeepseekV2ForCausalLM"),
    "kimi-k2.5": (["KimiK25ForConditionalGeneration", "DeepseekV3ForCausalLM"], "srt/models/deepseek_v2.py",
                  "DeepseekV2ForCausalLM"),
    "gpt-oss-120b": (["GptOssForCausalLM"], "srt/models/gpt_oss.py", "GptOssForCausalLM"),
    "llama-4-scout": (["Llama4ForConditionalGeneration", "Llama4ForCausalLM"], "srt/models/llama.py",
                      "LlamaForCausalLM"),
}
INTERFACES = "model_executor/models/interfaces.py"
# vLLM version -> target -> ([classes of the chain], capture file, defining symbol) or None (not served)
VLLM: dict[str, dict[str, tuple[list[str], str, str] | None]] = {
    VL_NEW: {
        "llama-3.1-8b-instruct": (["LlamaForCausalLM"], INTERFACES, "SupportsEagle3"),
        "qwen3-8b": (["Qwen3ForCausalLM"], INTERFACES, "SupportsEagle3"),
        "qwen3-30b-a3b": (["Qwen3MoeForCausalLM"], INTERFACES, "SupportsEagle3"),
        "deepseek-v2-lite": (["DeepseekV2ForCausalLM"], INTERFACES, "SupportsEagle3"),
        "deepseek-v3": (["DeepseekV3ForCausalLM"], INTERFACES, "SupportsEagle3"),
        "kimi-k2.5": (["KimiK25ForConditionalGeneration", "DeepseekV2ForCausalLM"], INTERFACES, "SupportsEagle3"),
        "gpt-oss-120b": (["GptOssForCausalLM"], INTERFACES, "SupportsEagle3"),
        "llama-4-scout": (["Llama4ForConditionalGeneration", "Llama4ForCausalLM"], INTERFACES, "SupportsEagle3"),
    },
    VL_OLD: {
        "llama-3.1-8b-instruct": (["LlamaForCausalLM"], "model_executor/models/llama.py", "LlamaForCausalLM"),
        "qwen3-8b": (["Qwen3ForCausalLM"], "model_executor/models/qwen3.py", "Qwen3ForCausalLM"),
        "gpt-oss-120b": (["GptOssForCausalLM"], "model_executor/models/gpt_oss.py", "GptOssForCausalLM"),
        "qwen3-30b-a3b": None, "deepseek-v2-lite": None, "deepseek-v3": None, "kimi-k2.5": None,
        "llama-4-scout": None,
    },
}


def published(name: str) -> dict[str, Any]:
    return json.loads((PUBLISHED / f"{name}.json").read_text())


def text_layers(config: dict[str, Any]) -> int:
    return int(config.get("num_hidden_layers") or config["text_config"]["num_hidden_layers"])


def test_the_tables_cover_every_published_target() -> None:
    names = {p.stem for p in PUBLISHED.glob("*.json")}
    assert names == set(SGLANG) == set(VLLM[VL_NEW]) == set(VLLM[VL_OLD])


def _source_line(tree: Path, package: str, result: dict[str, Any]) -> str:
    capture = result["capture"]
    lines = (tree / package / capture["file"]).read_text().splitlines()
    return lines[capture["line"] - 1]


@pytest.mark.sglang_source
@pytest.mark.parametrize("version", [SG_OLD, SG_NEW])
@pytest.mark.parametrize("name", sorted(SGLANG))
def test_sglang_capture_read_follows_the_target_class(run_probe, sglang_trees, version: str, name: str) -> None:
    tree = sglang_trees(version)
    config = published(name)
    result = run_probe("target_capture", {"config": config, "engine": "sglang", "sys_path": [str(tree)]}).result
    chain, file, owner = SGLANG[name]
    assert result["found"], result
    assert [link["class"] for link in result["chain"]] == chain, result["followed"]
    assert (result["capture"]["file"], result["capture"]["symbol"]) == (file, f"{owner}.set_eagle3_layers_to_capture")
    assert _source_line(tree, "sglang", result).lstrip().startswith("def set_eagle3_layers_to_capture(")
    n = text_layers(config)
    assert (result["num_layers"], result["default_ids"]) == (n, [2, n // 2, n - 3])
    assert result["id_offset"] == 1  # ids a draft gives are captured one layer later (SGLang's "+1")
    if len(chain) > 1:
        assert result["chain"][0]["delegates_to"] == "language_model"

    # the flagship's capture read, rendered with this result, lands on that method and shows the rule
    reads = {r["id"]: r for _, rs in flagship_read_steps(result) for r in rs}
    run = run_probe("sglang_source", {"package": "sglang", "sys_path": [str(tree)], "reads": [reads["capture"]]})
    read = run.result["reads"][0]
    assert read["found"] and read["file"] == file, read
    assert [m["symbol"] for m in read["matches"]] == [f"{owner}.set_eagle3_layers_to_capture"]
    text = "\n".join(t for m in read["matches"] for _, t in m["lines"])
    assert re.search(r"\[\s*2,\s*num_layers // 2,\s*num_layers - 3,?\s*\]", text) and "val + 1" in text
    assert read["expect"]["passed"], read


@pytest.mark.vllm_source
@pytest.mark.parametrize("version", [VL_NEW, VL_OLD])
@pytest.mark.parametrize("name", sorted(SGLANG))
def test_vllm_capture_read_follows_the_target_class(run_probe, vllm_trees, version: str, name: str) -> None:
    tree = vllm_trees[version]
    config = published(name)
    result = run_probe("target_capture", {"config": config, "engine": "vllm", "sys_path": [str(tree)]}).result
    expected = VLLM[version][name]
    if expected is None:
        assert not result["found"] and result["why"], result
        assert result["default_ids"] is None and result["capture"] is None
        return
    chain, file, owner = expected
    method = "get_eagle3_default_aux_hidden_state_layers" if version == VL_NEW else "get_eagle3_aux_hidden_state_layers"
    assert result["found"], result
    assert result["runner_call"]["method"] == method and result["runner_call"]["at"], result["runner_call"]
    assert [link["class"] for link in result["chain"]] == chain, result["followed"]
    assert (result["capture"]["file"], result["capture"]["symbol"]) == (file, f"{owner}.{method}")
    assert _source_line(tree, "vllm", result).lstrip().startswith(f"def {method}(")
    n = text_layers(config)
    assert (result["num_layers"], result["default_ids"]) == (n, [2, n // 2, n - 3])


def test_a_target_without_architectures_or_config_is_said(run_probe, sglang_trees, tmp_path: Path) -> None:
    tree = sglang_trees(SG_OLD)
    result = run_probe("target_capture", {"config": {"num_hidden_layers": 4}, "sys_path": [str(tree)]}).result
    assert not result["found"] and "names no architectures" in result["why"]
    result = run_probe("target_capture", {"config": {"architectures": ["NoSuchForCausalLM"], "num_hidden_layers": 4},
                                          "sys_path": [str(tree)]}).result
    assert not result["found"] and "EntryClass" in result["why"]
    run = run_probe("target_capture", {"target_path": str(tmp_path), "sys_path": [str(tree)]})
    assert run.outcome.error is not None and run.outcome.error.kind == "not_found", run.outcome
