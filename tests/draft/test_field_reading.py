"""The draft as each installed engine reads it (remote_probes/draft_reading/): the field table against the real
engine trees, the findings a checkpoint gets field by field, the acceptance ceiling, and the fix draft_fix writes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from remote_probes.draft_reading.field_findings import SUMMARY_ID, decoder_layers, field_findings
from remote_probes.draft_reading.field_table import TABLE, engine_reading, source_reads
from remote_probes.evaluation.ceiling import ceiling, expressible_ids
from tests import realparts
from tests.conftest import install_vllm_tree

SGLANG_VERSIONS = ("0.5.12.post1", "0.5.23")
VLLM_VERSIONS = ("0.33.0", "0.11.0")
CONFIG = {"hidden_size": 128, "intermediate_size": 320, "num_attention_heads": 4, "num_key_value_heads": 4,
          "num_hidden_layers": 1, "hidden_act": "silu", "rms_norm_eps": 1e-6, "max_position_embeddings": 1024,
          "vocab_size": 1024, "draft_vocab_size": 512, "tie_word_embeddings": False, "torch_dtype": "float32"}
TENSORS = {"fc.weight": {"shape": [128, 384]}, "lm_head.weight": {"shape": [512, 128]}, "d2t": {"shape": [512]},
           "midlayer.self_attn.q_proj.weight": {"shape": [128, 256]}, "norm.weight": {"shape": [128]}}
TARGET = dict(CONFIG, num_hidden_layers=12, draft_vocab_size=None)


def reading(engine: str, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """A reading as engine_reading returns it, for the unit tests below (the real ones are read further down)."""
    names = fields if fields is not None else {k: None for k in TABLE[engine] if k != "tie_word_embeddings"
                                               or engine == "sglang"}
    return {"engine": engine, "version": "X", "root": "/r", "unknown": [], "missing": [],
            "fields": {k: {"file": "f.py", "line": i + 1, "text": f"config.{k}", "kind": TABLE[engine][k].kind,
                           "does": TABLE[engine][k].does} for i, k in enumerate(names)}}


def summary(config: dict[str, Any], tensors: dict[str, Any], engine: str = "sglang",
            target: dict[str, Any] | None = TARGET) -> dict[str, Any]:
    found = field_findings(config, tensors, target, reading(engine))
    assert [f["id"] for f in found] == [SUMMARY_ID]
    return found[0]


def by_field(found: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["details"].get("field", f["id"]): f for f in found["details"]["findings"]}


# ---------------------------------------------------------------- the table against the engines' own source
@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_every_field_sglang_reads_is_in_the_table(version: str, sglang_trees: Callable[[str], Path]) -> None:
    root = str(sglang_trees(version) / "sglang")
    read = engine_reading(root, "sglang", version)
    assert read["missing"] == [] and read["unknown"] == [], read
    # SGLang's head is the embedding module when the config ties them: the line is the version's own
    tie = read["fields"]["tie_word_embeddings"]
    assert tie["file"] == "srt/models/llama_eagle3.py" and "tie_word_embeddings" in tie["text"]
    lines = (Path(root) / tie["file"]).read_text().splitlines()
    assert "tie_word_embeddings" in lines[tie["line"] - 1]
    assert {"num_hidden_layers", "rms_norm_eps", "hidden_act", "fc_norm", "draft_vocab_size"} <= set(read["fields"])


@pytest.mark.parametrize("version", VLLM_VERSIONS)
def test_every_field_vllm_reads_is_in_the_table(version: str) -> None:
    root = str(install_vllm_tree(version) / "vllm")
    read = engine_reading(root, "vllm", version)
    assert read["missing"] == [] and read["unknown"] == [], read
    # vLLM's EAGLE-3 class builds its own lm_head whatever the config ties; it scales logits by logit_scale
    assert "tie_word_embeddings" not in read["fields"] and "logit_scale" in read["fields"]
    assert read["fields"]["logit_scale"]["file"] == "model_executor/models/llama_eagle3.py"


def test_an_unknown_field_is_said_not_passed(tmp_path: Path) -> None:
    models = tmp_path / "srt" / "models"
    models.mkdir(parents=True)
    (models / "llama_eagle3.py").write_text("def f(config):\n    a = config.hidden_size\n"
                                            "    b = getattr(config, 'brand_new_knob', 1)\n")
    (models / "llama.py").write_text("class LlamaMLP:\n    def __init__(self, config):\n        self.x = config.hidden_act\n")
    read = engine_reading(str(tmp_path), "sglang", "9.9")
    assert read["unknown"] == ["brand_new_knob"]
    assert read["fields"]["hidden_size"]["line"] == 2 and read["fields"]["hidden_act"]["file"] == "srt/models/llama.py"
    found = field_findings(CONFIG, TENSORS, TARGET, read)[0]
    assert "brand_new_knob" in found["message"] and "not checked" in found["message"]
    assert source_reads(str(tmp_path / "nowhere"), "vllm")["missing"] == [
        "model_executor/models/llama_eagle3.py", "model_executor/models/llama.py"]


def test_no_engine_source_is_said_not_judged() -> None:
    found = field_findings(CONFIG, TENSORS, TARGET, engine_reading(None, "sglang"))
    assert found[0]["severity"] == "info" and "was not read field by field" in found[0]["message"]
    assert found[0]["details"]["fixes"] == {}


# ---------------------------------------------------------------- findings, field by field
def test_a_healthy_config_contradicts_nothing() -> None:
    found = summary(CONFIG, TENSORS)
    assert found["severity"] == "info" and found["details"]["fixes"] == {}
    assert "none contradicts the checkpoint or the target" in found["message"]


def test_a_tied_config_with_a_trained_head_names_the_field_the_line_and_the_fix() -> None:
    tied = dict(CONFIG, tie_word_embeddings=True)
    found = summary(tied, TENSORS)
    assert found["severity"] == "error" and found["details"]["fixes"] == {"tie_word_embeddings": False}
    assert found["details"]["parts"] == ["head"]
    tie = by_field(found)["tie_word_embeddings"]
    assert tie["details"]["file"] == "f.py" and tie["details"]["line"] is not None
    assert "[512, 128]" in tie["message"] and "never served" in tie["message"]
    # vLLM never reads it: said, and nothing is wrong
    vllm = summary(tied, TENSORS, engine="vllm")
    assert vllm["severity"] == "info" and by_field(vllm)["tie_word_embeddings"]["severity"] == "info"
    assert by_field(vllm)["field.unread"]["details"]["fields"] == ["tie_word_embeddings"]
    # without a head in the checkpoint a tied head is the format's own choice
    assert summary(tied, {k: v for k, v in TENSORS.items() if k != "lm_head.weight"})["severity"] == "info"


def test_layers_declared_against_layers_saved() -> None:
    two = summary(dict(CONFIG, num_hidden_layers=2), TENSORS)
    layers = by_field(two)["num_hidden_layers"]
    assert layers["severity"] == "error" and layers["details"]["fix"] == {"num_hidden_layers": 1}
    assert "layer(s) [1] stay at their initial values" in layers["message"]
    saved = dict(TENSORS, **{"layers.1.self_attn.q_proj.weight": {"shape": [128, 128]}})
    assert decoder_layers(saved) == [0, 1]
    assert "never served" in by_field(summary(CONFIG, saved))["num_hidden_layers"]["message"]


def test_layout_flags_against_the_tensors_they_build() -> None:
    normed = dict(TENSORS, **{f"fc_norm.{i}.weight": {"shape": [128]} for i in range(3)})
    dropped = by_field(summary(CONFIG, normed))["fc_norm"]
    assert dropped["severity"] == "error" and dropped["details"]["fix"] == {"fc_norm": True}
    empty = by_field(summary(dict(CONFIG, fc_norm=True), TENSORS))["fc_norm"]
    assert empty["details"]["fix"] == {"fc_norm": False} and "initial values" in empty["message"]
    assert summary(dict(CONFIG, fc_norm=True), normed)["severity"] == "info"
    bias = by_field(summary(dict(CONFIG, attention_bias=True), TENSORS))["attention_bias"]
    assert bias["severity"] == "error" and bias["details"]["fix"] == {"attention_bias": False}


def test_a_numeric_field_that_differs_from_the_target_is_a_candidate_not_a_verdict() -> None:
    found = summary(dict(CONFIG, rms_norm_eps=1e-5, hidden_act="gelu"), TENSORS)
    assert found["severity"] == "warning" and found["details"]["fixes"] == {}
    eps = by_field(found)["rms_norm_eps"]
    assert eps["details"]["candidate"] and eps["details"]["fix"] == {"rms_norm_eps": 1e-6}
    assert set(found["details"]["fields"]) == {"rms_norm_eps", "hidden_act"}
    assert summary(dict(CONFIG, rms_norm_eps=1e-5), TENSORS, target=None)["severity"] == "info"


# ---------------------------------------------------------------- the acceptance ceiling
def test_the_ceiling_counts_what_the_served_vocabulary_can_name() -> None:
    plain = [1 + i % 8 for i in range(40)]
    runs = [(plain, 2), ([9 if i % 5 == 3 else t for i, t in enumerate(plain)], 2)]
    full = ceiling(runs, range(10), steps=3, confidence=0.95)
    assert full["coverage"] == 1.0 and full["missing"] == []
    none = ceiling(runs, [], steps=3, confidence=0.95)
    assert none["coverage"] == 0.0 and none["tau_ceiling"] == 1.0
    part = ceiling(runs, [1, 2, 3, 4, 5, 6, 7, 8], steps=3, confidence=0.95)
    assert part["missing"] == [{"id": 9, "count": 8}] and part["coverage"] == round(1 - 8 / 76, 4)
    assert none["tau_ceiling"] < part["tau_ceiling"] < full["tau_ceiling"] <= 4.0
    assert part["coverage_ci"] is not None and part["coverage_ci"][0] <= part["coverage"] <= part["coverage_ci"][1]
    assert expressible_ids(3, [5, 5, 5, 9]) == [5, 6, 7] and expressible_ids(2, None) == [0, 1]


# ---------------------------------------------------------------- the fix
def test_draft_fix_writes_the_field_and_does_not_send_the_head_back_for_re_export(
        tmp_path: Path, sglang_trees: Callable[[str], Path]) -> None:
    from remote_probes.fixes.draft_fix import derive

    draft, target = tmp_path / "draft", tmp_path / "target"
    draft.mkdir()
    target.mkdir()
    tied = dict(CONFIG, tie_word_embeddings=True, architectures=["LlamaForCausalLMEagle3"])
    (draft / "config.json").write_text(json.dumps(tied))
    (draft / "model.safetensors").write_bytes(b"")  # linked into the corrected draft, never read here
    (target / "config.json").write_text(json.dumps(dict(TARGET, architectures=["LlamaForCausalLM"])))
    found = field_findings(tied, TENSORS, None, reading("sglang"))
    head = {"part": "head", "served": "target embedding", "swapped": "the draft's own lm_head", "recovers": True}
    out = derive({"draft": str(draft), "target": str(target), "engine": "sglang", "findings": found,
                  "engine_sys_path": [str(sglang_trees("0.5.12.post1"))],
                  "candidate_flags": {"speculative-draft-model-path": str(draft)}, "parts": [head]})
    assert out["fix_status"] == "fix", out
    written = json.loads((Path(out["draft"]) / "config.json").read_text())
    assert written["tie_word_embeddings"] is False
    assert not any(b["what"] == "head" for b in out["blockers"])
    assert any("head swap" in n for n in out["notes"])
    assert any(c["what"] == "config tie_word_embeddings" for c in out["changes"])


# ---------------------------------------------------------------- the lab held to the table
def test_the_lab_refuses_a_field_value_it_does_not_serve_as_the_engine_does() -> None:
    from orchestrator.lab.stand_in.field_fidelity import unmodelled

    assert unmodelled(CONFIG, "sglang") == [] and unmodelled(dict(CONFIG, tie_word_embeddings=True), "sglang") == []
    two = unmodelled(dict(CONFIG, num_hidden_layers=2), "vllm")
    assert [(f, v) for f, v, _ in two] == [("num_hidden_layers", 2)]
    # logit_scale is vLLM's: SGLang never reads it, so the lab standing in for SGLang serves it as SGLang does
    assert unmodelled(dict(CONFIG, logit_scale=2.0), "sglang") == []
    assert [f for f, _, _ in unmodelled(dict(CONFIG, logit_scale=2.0), "vllm")] == ["logit_scale"]
    assert [f for f, _, _ in unmodelled(dict(CONFIG, model_type="llama4_text"), "sglang")] == ["model_type"]


def test_a_behaviour_flag_the_config_sets_is_a_candidate_scored_off() -> None:
    found = summary(dict(CONFIG, norm_output=True), TENSORS)
    flag = by_field(found)["norm_output"]
    assert found["severity"] == "warning" and flag["details"]["fix"] == {"norm_output": False}
    assert "NeMo Automodel PR 2897" in flag["message"]


def test_a_lost_d2t_is_read_back_from_t2d_into_a_file_beside_the_weights(tmp_path: Path) -> None:
    torch = realparts.importorskip("torch")
    from safetensors.torch import load_file, save_file

    from remote_probes.fixes.d2t import d2t_from_t2d
    from remote_probes.fixes.parts import ADDED_FILE, tensor_names, write_added

    ids = torch.tensor([0, 1, 5, 9])
    t2d = torch.zeros(12, dtype=torch.bool)
    t2d[ids] = True
    save_file({"t2d": t2d, "fc.weight": torch.zeros(2, 2)}, str(tmp_path / "model.safetensors"))
    blob, why = d2t_from_t2d(str(tmp_path), 4)
    assert blob is not None and why == ""
    assert d2t_from_t2d(str(tmp_path), 5)[0] is None and "marks 4 target ids" in d2t_from_t2d(str(tmp_path), 5)[1]
    dest = tmp_path / "fixed"
    dest.mkdir()
    assert write_added(str(tmp_path), str(dest), {"d2t": blob}) == [ADDED_FILE]
    d2t = load_file(str(dest / ADDED_FILE))["d2t"]
    assert (torch.arange(4) + d2t).tolist() == ids.tolist()
    assert tensor_names(str(tmp_path)) == {"t2d", "fc.weight"}


def test_shape_fields_against_the_tensors_they_size() -> None:
    undeclared = {k: v for k, v in CONFIG.items() if k != "draft_vocab_size"}
    sglang = by_field(summary(undeclared, TENSORS))["draft_vocab_size"]
    assert sglang["details"]["fix"] == {"draft_vocab_size": 512} and "past its end" in sglang["message"]
    no_map = {k: v for k, v in TENSORS.items() if k != "d2t"}
    head = by_field(summary(undeclared, no_map))["draft_vocab_size"]
    assert "target's embedding and head" in head["message"] and head["details"]["parts"] == ["head"]
    vllm = by_field(summary(undeclared, TENSORS, engine="vllm"))["draft_vocab_size"]
    assert "no d2t parameter" in vllm["message"] and "refuses the draft at start" in vllm["message"]
    assert vllm["details"]["parts"] == []
    other = by_field(summary(undeclared, TENSORS, engine="vllm", target=dict(TARGET, vocab_size=2048)))
    assert "1024 rows" in other["draft_vocab_size"]["message"] and "size mismatch" in other["draft_vocab_size"]["message"]
    assert "draft_vocab_size" not in by_field(summary(CONFIG, TENSORS))
    wide = by_field(summary(dict(CONFIG, hidden_size=256), TENSORS))["hidden_size"]
    assert wide["details"]["fix"] == {"hidden_size": 128} and "norm.weight has 128" in wide["message"]


def test_the_ceiling_line_every_front_end_prints() -> None:
    from orchestrator.probes.models import ceiling_line

    bound = {"vocabulary": 512, "tokens": 1024, "coverage": 0.863, "coverage_ci": [0.813, 0.913],
             "tau_ceiling": 4.1169, "tau_ceiling_ci": [3.64, 4.59], "missing": [{"id": 573, "count": 92}]}
    line = ceiling_line(bound, 2.85)
    assert line == ("acceptance ceiling: the served vocabulary (512 target ids) names 86.3% [81.3, 91.3] of the "
                    "target's 1024 greedy tokens; a draft perfect within it reaches tau 4.12 [3.64, 4.59] (served "
                    "2.85); most frequent it cannot name: id 573 x92")
    assert ceiling_line(None) is None and ceiling_line({"coverage": None}) is None


# ---------------------------------------------------------------- values the engines refuse or serve wrong
def test_the_engines_limits_are_read_in_every_tree(sglang_trees: Callable[[str], Path]) -> None:
    from remote_probes.draft_reading.engine_limits import LIMITS, limits_reading

    roots = [(str(sglang_trees(v) / "sglang"), "sglang") for v in SGLANG_VERSIONS]
    roots += [(str(install_vllm_tree(v) / "vllm"), "vllm") for v in VLLM_VERSIONS]
    for root, engine in roots:
        read = limits_reading(root, engine)
        assert read["missing"] == [] and set(read["limits"]) == set(LIMITS[engine]), (root, read)
        act = read["limits"]["hidden_act"]
        lines = (Path(root) / act["file"]).read_text().splitlines()
        assert "Only silu is supported" in "\n".join(lines[act["line"] - 1:act["line"] + 3])


def test_a_value_the_engine_refuses_is_an_error_with_its_fix() -> None:

    limits = {"engine": "vllm", "limits": {
        "hidden_act": {"file": "model_executor/models/llama.py", "line": 112, "text": "if hidden_act != 'silu':",
                       "does": "refuses the draft at start: ValueError: Unsupported activation: {value}."},
        "max_position_embeddings": {"file": "model_executor/models/llama.py", "line": 266, "text": "x",
                                    "does": "collapses past position {value}"}}, "missing": []}
    read = dict(reading("vllm"), limits=limits)
    found = field_findings(dict(CONFIG, hidden_act="gelu", max_position_embeddings=64), TENSORS,
                           dict(TARGET, max_position_embeddings=1024), read)[0]
    assert found["severity"] == "error"
    assert found["details"]["fixes"] == {"hidden_act": "silu", "max_position_embeddings": 1024}
    fields = by_field(found)
    assert "Unsupported activation: gelu" in fields["hidden_act"]["message"]
    assert "collapses past position 64" in fields["max_position_embeddings"]["message"]
    assert not fields["max_position_embeddings"]["details"].get("candidate")  # judged, not a candidate
    # a longer table than the target's, and silu, are nothing
    ok = field_findings(dict(CONFIG, max_position_embeddings=4096), TENSORS, TARGET, read)[0]
    assert not [f for f in ok["details"]["findings"] if f["details"].get("limit")]


def test_a_model_type_vllm_rewrites_as_mtp_is_read_from_its_source_and_fixed(
        sglang_trees: Callable[[str], Path]) -> None:
    """vLLM turns a draft of DeepSeek's model types into DeepSeek MTP before the EAGLE-3 config reads it (the seed's
    MLA draft, saved with its target's model_type, is refused at start): the types come from the condition above each
    rewrite in the tree, the finding names the line and writes the model_type the published Kimi-K2.5 draft carries;
    SGLang has no such rewrite, and the lab standing in for vLLM refuses with vLLM's words, SGLang's does not."""
    from orchestrator.lab.stand_in.field_fidelity import refused
    from remote_probes.draft_reading.engine_limits import limit_findings, limits_reading

    mla = {"model_type": "deepseek_v3", "architectures": ["Eagle3DeepseekV2ForCausalLM"]}
    for version in VLLM_VERSIONS:
        read = limits_reading(str(install_vllm_tree(version) / "vllm"), "vllm")
        limit = read["limits"]["model_type"]
        assert {"deepseek_v3", "deepseek_v32"} <= set(limit["values"]), (version, limit)
        assert "llama" not in limit["values"] and "kimi_k2" not in limit["values"]
        [found] = limit_findings(mla, None, read, f"vLLM {version}")
        assert found["details"]["fix"] == {"model_type": "kimi_k2"}
        assert f"config/speculative.py:{limit['line']}" in found["message"]
        assert limit_findings(dict(mla, model_type="kimi_k2"), None, read, f"vLLM {version}") == []
        assert "Eagle3DeepSeekMTPModel" in (refused(mla, tuple(limit["values"])) or "")
    sglang = limits_reading(str(sglang_trees(SGLANG_VERSIONS[0]) / "sglang"), "sglang")
    assert "model_type" not in sglang["limits"] and limit_findings(mla, None, sglang, "SGLang") == []
    assert refused(mla) is None  # the SGLang stand-in: no model types to rewrite
