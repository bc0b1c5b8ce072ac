"""draft_inspect on drafts written by the real libraries (SpecForge, vLLM speculators) with transformers 5 configs,
checked against the model registries of the real SGLang 0.5.12.post1 and 0.5.23 source trees (scanned, never
imported)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.probes import parse_result
from orchestrator.probes.models import DraftInspectResult
from tests import realparts
from tests.draft.libraries import VD, H, save_specforge_draft, save_speculators_draft, save_target_config
from tests.probes.conftest import SGLANG_VERSIONS

realparts.importorskip("torch")
realparts.importorskip("transformers")
pytestmark = pytest.mark.torch
N = 12


def inspect(run_probe, path: Path, tree: Path | None, **args: Any) -> DraftInspectResult:
    if tree is not None:
        args["engine_sys_path"] = [str(tree)]
    run = run_probe("draft_inspect", dict({"path": str(path)}, **args))
    result = parse_result("draft_inspect", run.outcome)
    assert isinstance(result, DraftInspectResult), run.outcome
    return result


@pytest.fixture(scope="module")
def specforge_drafts(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("specforge")
    out = {"specforge": root / "specforge", "specforge_fc_norm": root / "specforge_fc_norm",
           "target": root / "target", "target_500k": root / "target_500k"}
    save_specforge_draft(out["specforge"], aux_ids=[1, 5, 8])
    save_specforge_draft(out["specforge_fc_norm"], aux_ids=[1, 5, 8], fc_norm=True)
    save_target_config(out["target"], num_layers=N)
    save_target_config(out["target_500k"], num_layers=N, rope_theta=500000.0)
    return out


@pytest.fixture(scope="module")
def speculators_draft(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("speculators") / "speculators"
    save_speculators_draft(path, norm_before_residual=True, fc_norm=True)
    return path


@pytest.fixture
def drafts(specforge_drafts) -> dict[str, Path]:
    return specforge_drafts


def test_configs_are_transformers5_shaped(drafts, speculators_draft):
    """The fixtures are what the libraries really write: RoPE only as rope_parameters, speculators nests."""
    sf = json.loads((drafts["specforge"] / "config.json").read_text())
    assert sf["rope_parameters"] == {"rope_theta": 10000.0, "rope_type": "default"} and "rope_theta" not in sf
    sp = json.loads((speculators_draft / "config.json").read_text())
    assert sp["architectures"] == ["Eagle3DraftModel"] and "hidden_size" not in sp
    assert sp["transformer_layer_config"]["rope_parameters"]["rope_theta"] == 10000.0
    assert sp["speculators_config"]["algorithm"] == "eagle3" and sp["eagle_aux_hidden_state_layer_ids"] == [1, 5, 8]
    tgt = json.loads((drafts["target"] / "config.json").read_text())
    assert "rope_theta" not in tgt and tgt["rope_parameters"]["rope_theta"] == 10000.0


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_specforge_draft_is_clean_against_the_real_registry(run_probe, sglang_trees, drafts, version):
    res = inspect(run_probe, drafts["specforge"], sglang_trees(version), target_path=str(drafts["target"]))
    assert res.engine is not None and res.engine["version"] == version
    arch = res.finding("architecture")
    assert arch.severity == "info" and arch.details["source"] == "engine registry"
    assert arch.details["loader_module"] == "srt/models/llama_eagle3.py" and version in arch.message
    rope = res.finding("rope")  # transformers 5 wrote rope_parameters only: no false "missing" warning
    assert rope.severity == "info" and rope.details["rope_theta_source"] == "rope_parameters"
    assert res.target["rope_theta"] == 10000.0 and res.target["rope_theta_source"] == "rope_parameters"
    assert res.worst == "info", [(f.id, f.message) for f in res.findings if f.severity != "info"]


def test_rope_mismatch_is_read_from_rope_parameters_on_both_sides(run_probe, drafts):
    res = inspect(run_probe, drafts["specforge"], None, target_path=str(drafts["target_500k"]))
    rope = res.finding("rope")
    assert rope.severity == "warning" and "differs" in rope.message and rope.details["target_rope_theta"] == 500000.0


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_speculators_draft_against_the_real_registry(run_probe, sglang_trees, speculators_draft, version):
    res = inspect(run_probe, speculators_draft, sglang_trees(version), target_num_layers=N)
    arch = res.finding("architecture")  # neither SGLang registers a class named Eagle3DraftModel
    assert arch.severity == "error" and "no model class named Eagle3DraftModel" in arch.message
    assert "LlamaForCausalLMEagle3" in arch.details["eagle3_loaders"]
    layout = res.finding("config_layout")
    assert layout.severity == "error" and "hidden_size" in layout.details["nested_only"]
    assert layout.details["engine_reads_transformer_layer_config"] is False
    # The nested config is read here: hidden size, fc width, lm_head, d2t, rope, naming all check out.
    assert res.finding("fc_width").severity == "info" and res.finding("fc_width").details["shape"] == [H, 3 * H]
    assert res.finding("lm_head").severity == "info" and res.finding("d2t").details["verdict"] == "offsets"
    assert res.finding("rope").severity == "info" and res.finding("rope").details["rope_theta"] == 10000.0
    assert res.naming.speculators_config and res.naming.variant == "layers"
    assert res.feeds.vllm == [1, 5, 8] and res.feeds.sglang == [2, 6, 9]
    flags = res.finding("variant_flags")
    assert flags.severity == "warning" and flags.details["flags"] == ["fc_norm", "norm_before_residual"]


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
@pytest.mark.parametrize("flags, ignored", [
    ({"norm_before_residual": True}, {"0.5.12.post1": ["norm_before_residual"], "0.5.23": ["norm_before_residual"]}),
    ({"norm_before_fc": True}, {"0.5.12.post1": ["norm_before_fc"], "0.5.23": []}),
    ({"fc_norm": True}, {"0.5.12.post1": [], "0.5.23": []}),
    ({"norm_output": True}, {"0.5.12.post1": [], "0.5.23": []}),
])
def test_variant_flags_each_sglang_ignores(run_probe, sglang_trees, tmp_path, version, flags, ignored):
    """A speculators draft relabelled LlamaForCausalLMEagle3 (how such drafts get onto SGLang): which flags the
    real loader of each version reads decides whether it serves the trained network."""
    path = tmp_path / "d"
    save_speculators_draft(path, **flags)
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(cfg.pop("transformer_layer_config"), architectures=["LlamaForCausalLMEagle3"])
    (path / "config.json").write_text(json.dumps(cfg))
    res = inspect(run_probe, path, sglang_trees(version), target_num_layers=N)
    assert res.finding("architecture").severity == "info"
    found = res.finding("variant_flags")
    assert found.details["ignored_by_engine"] == ignored[version]
    assert found.severity == ("error" if ignored[version] else "info")
    if ignored[version]:
        assert version in found.message and ignored[version][0] in found.message


def test_specforge_fc_norm_and_no_engine(run_probe, drafts):
    """Without an SGLang to scan, the architecture goes by name and flags are reported as unchecked."""
    res = inspect(run_probe, drafts["specforge_fc_norm"], None, target_num_layers=N)
    assert res.engine is None
    assert res.finding("architecture").severity == "info" and "source" not in res.finding("architecture").details
    assert res.finding("variant_flags").severity == "warning" and res.finding("variant_flags").details["flags"] == [
        "fc_norm"]
    assert {f"fc_norm.{i}.weight" for i in range(3)} <= set(res.tensors)
    assert res.config["draft_vocab_size"] == VD


@pytest.mark.parametrize("fmt", ["speculators", "specforge_fc_norm"])
def test_draft_test_probe_runs_on_library_drafts(request, run_probe, drafts, tmp_path, fmt):
    """The whole draft_test probe (target capture, draft load, wiring scores) on each library's draft."""
    from orchestrator.probes import probes_dir
    from tests.draft.libraries import save_tiny_target

    prompts = json.loads((probes_dir() / "evaluation" / "draft_test_prompts.json").read_text())
    texts = [p if isinstance(p, str) else json.dumps(p) for p in (prompts if isinstance(prompts, list) else
                                                                  prompts.get("prompts", []))]
    target = save_tiny_target(tmp_path / "target", texts, num_layers=N)
    draft = request.getfixturevalue("speculators_draft") if fmt == "speculators" else drafts[fmt]
    run = run_probe("draft_test", {"target": str(target), "draft": str(draft), "num_prompts": 3,
                                   "max_new_tokens": 8, "steps": 2, "device": "cpu", "wirings": "auto"},
                    timeout=600)
    res = run.result
    flags = {"speculators": ["fc_norm", "norm_before_residual"], "specforge_fc_norm": ["fc_norm"]}[fmt]
    assert res["draft"]["hidden_size"] == H and res["draft"]["variant_flags"] == flags
    assert res["draft"]["num_aux"] == 3 and res["server_wiring"] == [2, 6, 9]
    assert res["prompts"] == 3 and res["wirings"] and all(r["tau_serving"] is not None for r in res["wirings"])


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_fallback_names_are_the_real_eagle3_loaders(sglang_trees, version):
    """Without an installed SGLang the architecture check falls back to KNOWN_SGLANG_EAGLE3: it must be exactly
    what each real tree registers from its *eagle3* modules; and Eagle3DraftModel is registered by neither."""
    from remote_probes.checks.findings import KNOWN_SGLANG_EAGLE3
    from remote_probes.engine.registry import scan_sglang

    reg = scan_sglang([str(sglang_trees(version))])
    assert reg is not None and reg["version"] == version and not reg["unresolved"]
    eagle3 = {a for a, m in reg["architectures"].items() if "eagle3" in m.rsplit("/", 1)[-1]}
    assert eagle3 == KNOWN_SGLANG_EAGLE3
    assert "Eagle3DraftModel" not in reg["architectures"] and "LlamaForCausalLM" in reg["architectures"]
