"""Where each installed engine's draft loader puts the checkpoint's tensors (remote_probes/draft_reading/
tensor_placement.py), read from the real engine trees: SGLang drops a name it cannot place and serves the parameter
at its initial value, vLLM refuses the draft at start; the finding, the served parts, the draft the test builds and
the renamed copy draft_fix writes."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from remote_probes.draft_reading.field_findings import field_findings
from remote_probes.draft_reading.field_table import engine_reading
from remote_probes.draft_reading.tensor_placement import (
    REQUIRED,
    as_trained,
    checkpoint_names,
    loader_reading,
    place,
)
from remote_probes.eagle3.names import apply_renames, canonical_name
from remote_probes.eagle3.served import served_parts
from remote_probes.fixes.fields import field_renames
from remote_probes.fixes.parts import write_without
from tests.conftest import install_vllm_tree

SGLANG_VERSIONS = ("0.5.12.post1", "0.5.23")
VLLM_VERSIONS = ("0.33.0", "0.11.0")
#: the lab's healthy draft, as SpecForge saves it
HEALTHY = ([f"midlayer.self_attn.{p}_proj.weight" for p in "qkvo"]
           + [f"midlayer.mlp.{p}_proj.weight" for p in ("gate", "up", "down")]
           + [f"midlayer.{n}.weight" for n in ("input_layernorm", "post_attention_layernorm", "hidden_norm")]
           + ["fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"])
COMPILED = ["_orig_mod." + n for n in HEALTHY]
HF_LAYOUT = [n if n in ("lm_head.weight", "d2t", "t2d") else "model." + n.replace("midlayer.", "layers.0.")
             for n in HEALTHY]
CONFIG = {"hidden_size": 128, "intermediate_size": 320, "num_attention_heads": 4, "num_key_value_heads": 4,
          "num_hidden_layers": 1, "hidden_act": "silu", "rms_norm_eps": 1e-6, "vocab_size": 1024,
          "draft_vocab_size": 512, "tie_word_embeddings": False}


def sglang_loader(version: str, trees: Callable[[str], Path]) -> dict[str, Any]:
    return loader_reading(str(trees(version) / "sglang"), "sglang")


def vllm_loader(version: str) -> dict[str, Any]:
    return loader_reading(str(install_vllm_tree(version) / "vllm"), "vllm")


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_sglang_drops_what_it_cannot_place(version: str, sglang_trees: Callable[[str], Path]) -> None:
    loader = sglang_loader(version, sglang_trees)
    assert loader["missing"] == [], loader
    # the renames are read from the loader's own dict literal, the rule's line is the version's own
    assert loader["renames"]["midlayer"] == "layers.0" and loader["renames"]["aux_norm_low"] == "fc_norm.0"
    rule = loader["rules"]["unplaced"]
    lines = (sglang_trees(version) / "sglang" / rule["file"]).read_text().splitlines()
    assert "if param_name in params_dict:" in lines[rule["line"] - 1]
    for names in (HEALTHY, HF_LAYOUT):  # SGLang loads a name bare or under one "model."
        placed = place(names, loader)
        assert placed is not None and not placed["dropped"] and not placed["refused"], placed
        assert placed["left_at_init"] == []
    compiled = place(COMPILED, loader)
    assert compiled is not None and not compiled["refused"]
    # every name but the map (any name holding "d2t" is the hot-token map; t2d is skipped) is dropped
    assert set(compiled["dropped"]) == {n for n in COMPILED if not n.endswith(("d2t", "t2d"))}
    assert compiled["placed"] == {"_orig_mod.d2t": "d2t"}
    assert sorted(compiled["left_at_init"]) == sorted(canonical_name(p) for p in REQUIRED)
    assert compiled["renames"]["_orig_mod.midlayer.self_attn.q_proj.weight"] == "midlayer.self_attn.q_proj.weight"
    # placed (or skipped) anyway, the maps lose the prefix too: the corrected copy has one layout
    assert compiled["renames"]["_orig_mod.d2t"] == "d2t" and compiled["renames"]["_orig_mod.t2d"] == "t2d"


@pytest.mark.parametrize("version", VLLM_VERSIONS)
def test_vllm_refuses_what_it_cannot_place(version: str) -> None:
    loader = vllm_loader(version)
    assert loader["missing"] == [], loader
    assert loader["renames"] == {"midlayer.": "layers.0."}
    assert place(HEALTHY, loader)["refused"] == {}  # type: ignore[index]
    compiled = place(COMPILED, loader)
    hf = place(HF_LAYOUT, loader)
    assert compiled is not None and hf is not None and not compiled["dropped"]
    # the first component a loader cannot place, as AutoWeightsLoader words it: the map's name stays at the top
    # (real vLLM 0.32 raises on it first: the names come sorted), the rest go under "model." to the draft layer
    assert compiled["refused"]["_orig_mod.d2t"] == "'_orig_mod' in Eagle3LlamaForCausalLM"
    if version != "0.11.0":
        assert compiled["refused"]["_orig_mod.fc.weight"] == "'_orig_mod' in LlamaModel"
    assert set(hf["refused"]) == {n for n in HF_LAYOUT if n.startswith("model.")}
    if version == "0.11.0":  # the draft layer's own loader: params_dict[name]
        assert loader["inner"] == "keyerror" and hf["refused"]["model.fc.weight"].startswith("KeyError")
    else:
        assert hf["refused"]["model.fc.weight"] == "'model' in LlamaModel"
    assert hf["renames"]["model.layers.0.mlp.up_proj.weight"] == "layers.0.mlp.up_proj.weight"


def test_an_engine_tree_without_the_rules_is_said_and_not_judged(tmp_path: Path) -> None:
    models = tmp_path / "srt" / "models"
    models.mkdir(parents=True)
    (models / "llama_eagle3.py").write_text("def load_weights(self, weights):\n    pass\n")
    loader = loader_reading(str(tmp_path), "sglang")
    assert any("unplaced" in m for m in loader["missing"]) and place(COMPILED, loader) is None
    assert loader_reading(None, "vllm")["missing"] == ["the vllm package (not found)"]


def reading(engine: str, loader: dict[str, Any]) -> dict[str, Any]:
    out = engine_reading(loader.get("root") or "/nowhere", engine, "X")
    out["fields"] = {"hidden_size": {"file": "f.py", "line": 1, "text": "config.hidden_size", "kind": "shape",
                                     "does": "sizes"}}
    out["loader"] = loader
    return out


def tensors(names: list[str]) -> dict[str, Any]:
    shapes = {"fc.weight": [128, 384], "lm_head.weight": [512, 128], "d2t": [512], "t2d": [1024]}
    return {n: {"shape": shapes.get(canonical_name(n).replace("_orig_mod.", ""), [128, 128])} for n in names}


def test_the_finding_names_the_tensors_the_line_and_the_rename(sglang_trees: Callable[[str], Path]) -> None:
    loader = sglang_loader("0.5.23", sglang_trees)
    found = field_findings(CONFIG, tensors(COMPILED), None, reading("sglang", loader))[0]
    assert found["severity"] == "error" and found["details"]["parts"] == ["tensors"]
    one = next(f for f in found["details"]["findings"] if f["id"] == "tensor.names")
    assert "drops 13 saved tensors" in one["message"] and "srt/models/llama_eagle3.py:" in one["message"]
    assert "without the prefix '_orig_mod.'" in one["message"]
    assert one["details"]["prefix"] == "_orig_mod." and found["details"]["renames"] == one["details"]["rename"]
    # the other checks judge the names as the loader would place them: no second finding for the same fault
    assert [f["id"] for f in found["details"]["findings"] if f["severity"] == "error"] == ["tensor.names"]
    changes: list[dict[str, Any]] = []
    renames = field_renames([found], changes, "SGLang 0.5.23")
    assert renames == one["details"]["rename"] and changes[0]["what"] == "tensor names"
    # a healthy checkpoint gets no such finding, nor does the HF layout SGLang loads
    for names in (HEALTHY, HF_LAYOUT):
        ok = field_findings(CONFIG, tensors(names), None, reading("sglang", loader))[0]
        assert not any(f["id"] == "tensor.names" for f in ok["details"]["findings"])


def test_vllm_refusal_is_an_error_with_the_engine_words() -> None:
    loader = vllm_loader("0.33.0")
    found = field_findings(CONFIG, tensors(HF_LAYOUT), None, reading("vllm", loader))[0]
    one = next(f for f in found["details"]["findings"] if f["id"] == "tensor.names")
    assert "refuses the draft at start" in one["message"]
    assert "There is no module or parameter named 'model' in LlamaModel" in one["message"]
    assert "model_executor/models/utils.py:" in one["message"] and one["details"]["prefix"] == "model."


def test_served_parts_serve_what_is_placed_and_train_what_is_meant(sglang_trees: Callable[[str], Path]) -> None:
    placement = place(COMPILED, sglang_loader("0.5.12.post1", sglang_trees))
    shapes = {n: m["shape"] for n, m in tensors(COMPILED).items()}
    parts = served_parts(CONFIG, shapes, "EAGLE3", "sglang", placement=placement)
    assert parts["fails"] is None
    assert parts["served"]["tensors"] and parts["trained"]["tensors"] == []
    # the dropped head is served at its initial value; the map SGLang takes by substring is served
    assert parts["served"]["head"] == "random" and parts["trained"]["head"] == "draft_head"
    assert parts["served"]["d2t"] and parts["trained"]["d2t"]
    assert {s["part"] for s in parts["swapped"]} == {"head", "tensors"}
    # what the renamed copy would serve (the counterfactual's tensors swap): its own head, nothing at init
    assert parts["if_placed"]["head"] == "draft_head" and parts["if_placed"]["tensors"] == []
    state = {canonical_name(n): n for n in COMPILED}
    trained = apply_renames(state, parts["renames"]["trained"])
    assert trained["midlayer.self_attn.q_proj.weight"] == "_orig_mod.midlayer.self_attn.q_proj.weight"
    assert apply_renames(state, parts["renames"]["served"])["d2t"] == "_orig_mod.d2t"
    assert as_trained({n: 1 for n in COMPILED}, placement).keys() == {canonical_name(n) for n in HEALTHY}
    vllm = served_parts(CONFIG, shapes, "EAGLE3", "vllm", placement=place(COMPILED, vllm_loader("0.33.0")))
    assert vllm["fails"] and "There is no module or parameter named '_orig_mod'" in vllm["fails"]


def test_the_fix_renames_the_tensors_in_a_copy(tmp_path: Path) -> None:
    src, dest = tmp_path / "draft", tmp_path / "fixed"
    src.mkdir()
    dest.mkdir()
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    blob = b""
    for i, name in enumerate(["_orig_mod.fc.weight", "_orig_mod.d2t"]):
        header[name] = {"dtype": "I64", "shape": [2], "data_offsets": [len(blob), len(blob) + 16]}
        blob += struct.pack("<2q", i, i + 1)
    head = json.dumps(header).encode()
    (src / "model.safetensors").write_bytes(struct.pack("<Q", len(head)) + head + blob)
    assert write_without(str(src), str(dest), [], None, {"_orig_mod.fc.weight": "fc.weight"}) == ["model.safetensors"]
    assert sorted(checkpoint_names(str(dest)) or []) == ["_orig_mod.d2t", "fc.weight"]
    raw = (dest / "model.safetensors").read_bytes()
    size = struct.unpack("<Q", raw[:8])[0]
    meta = json.loads(raw[8:8 + size])
    begin, end = meta["fc.weight"]["data_offsets"]
    assert struct.unpack("<2q", raw[8 + size + begin:8 + size + end]) == (0, 1)


def test_the_counterfactual_scores_the_names_as_the_loader_would_place_them(
        sglang_trees: Callable[[str], Path]) -> None:
    import torch

    from remote_probes.evaluation.counterfactual import variants

    placement = place(COMPILED, sglang_loader("0.5.23", sglang_trees))
    shapes = {n: m["shape"] for n, m in tensors(COMPILED).items()}
    parts = served_parts(CONFIG, shapes, "EAGLE3", "sglang", placement=placement)
    saved = {canonical_name(n): torch.zeros(s, dtype=torch.long if n.endswith("d2t") else torch.float32)
             for n, s in shapes.items()}
    served = apply_renames(saved, parts["renames"]["served"])
    swap = next(v for v in variants(CONFIG, served, parts, {}, None, None) if v["part"] == "tensors")
    assert "12 parameters at their initial values" in swap["served"]
    assert swap["parts"]["tensors"] == [] and swap["parts"]["head"] == "draft_head"
    assert {"midlayer.self_attn.q_proj.weight", "lm_head.weight", "d2t", "fc.weight"} <= set(swap["state"])
