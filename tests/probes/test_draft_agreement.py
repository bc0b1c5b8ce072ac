"""Draft <-> target agreement (remote_probes/checks/agreement.py) on a draft saved by the real SpecForge, one config
field broken per case: each must give its own finding, name the engine that reads the field, and predict SGLang's
load failure where the weight loaders would assert. The served-parts rules are checked against both SGLang trees."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from orchestrator.probes import parse_result, probes_dir
from orchestrator.probes.models import DraftInspectResult
from tests import realparts
from tests.draft.libraries import H, save_specforge_draft, save_target_config
from tests.probes.conftest import SGLANG_VERSIONS

realparts.importorskip("torch")
realparts.importorskip("transformers")
pytestmark = pytest.mark.torch
N = 12
FAIL = "SGLang will fail to load"

# field broken -> (finding id, severity, text the message must hold)
CASES: dict[str, tuple[dict[str, Any], str, str, str]] = {
    "target_hidden_size": ({"target_hidden_size": 40}, "agree_hidden_size", "error", FAIL),
    "target_hidden_size_null": ({"target_hidden_size": None}, "agree_hidden_size", "error", "TypeError"),
    "vocab_size": ({"vocab_size": 300}, "agree_vocab_size", "error", FAIL),
    "draft_vocab_size": ({"draft_vocab_size": 32}, "agree_draft_vocab_size", "error", FAIL),
    "head_dim": ({"head_dim": 8}, "agree_attention", "error", FAIL),
    "num_key_value_heads": ({"num_key_value_heads": 4}, "agree_attention", "error", "k_proj"),
    "max_position_embeddings": ({"max_position_embeddings": 64}, "agree_max_position_embeddings", "warning", "64"),
    "torch_dtype": ({"torch_dtype": "bfloat16", "dtype": "bfloat16"}, "agree_torch_dtype", "warning", "bfloat16"),
    "tie_word_embeddings": ({"tie_word_embeddings": True}, "served_parts_eagle", "error", "AttributeError"),
}


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("agree")
    save_specforge_draft(root / "draft", aux_ids=[1, 5, 8])
    save_target_config(root / "target", num_layers=N)
    cfg = json.loads((root / "target" / "config.json").read_text())
    draft_dtype = json.loads((root / "draft" / "config.json").read_text()).get("dtype") or "float32"
    (root / "target" / "config.json").write_text(json.dumps(dict(cfg, dtype=draft_dtype)))  # as a trained one has
    return root / "draft", root / "target"


def inspect(run_probe, draft: Path, target: Path) -> DraftInspectResult:
    run = run_probe("draft_inspect", {"path": str(draft), "target_path": str(target)})
    result = parse_result("draft_inspect", run.outcome)
    assert isinstance(result, DraftInspectResult), run.outcome
    return result


def broken(pair: tuple[Path, Path], tmp_path: Path, change: dict[str, Any]) -> Path:
    dst = tmp_path / "broken"
    shutil.copytree(pair[0], dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(change)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_the_saved_draft_agrees_with_its_target(run_probe, pair):
    res = inspect(run_probe, *pair)
    agree = [f for f in res.findings if f.id.startswith(("agree_", "served_parts"))]
    assert len(agree) == 8 and all(f.severity == "info" for f in agree), [(f.id, f.message) for f in agree]
    assert all(f.details["read_by"].startswith("SGLang") for f in agree)
    # SpecForge saves its (frozen) embed_tokens; SGLang swaps in the target's: said, not flagged
    served = res.finding("served_parts")
    assert [s["part"] for s in served.details["swapped"]] == ["embedding"] and served.details["fails"] is None
    eagle = res.finding("served_parts_eagle")
    assert {s["part"] for s in eagle.details["swapped"]} == {"embedding", "head", "d2t", "fc", "feed"}


@pytest.mark.parametrize("case", list(CASES))
def test_a_broken_field_gives_its_finding(run_probe, pair, tmp_path, case):
    change, fid, severity, text = CASES[case]
    res = inspect(run_probe, broken(pair, tmp_path, change), pair[1])
    finding = res.finding(fid)
    assert finding is not None and finding.severity == severity and text in finding.message, finding
    assert "SGLang" in finding.details["read_by"]
    others = [f.id for f in res.findings if f.id.startswith("agree_") and f.id != fid and f.severity != "info"]
    assert others == [] or case in ("vocab_size", "head_dim"), others  # one field, one finding (vocab also moves
    # the t2d/d2t readings; head_dim also changes o_proj)


def test_target_hidden_size_mismatch_with_the_real_target(run_probe, pair, tmp_path):
    """The draft's config agrees with its weights but the target is wider: the first forward fails."""
    wide = tmp_path / "wide"
    save_target_config(wide, num_layers=N)
    cfg = json.loads((wide / "config.json").read_text())
    (wide / "config.json").write_text(json.dumps(dict(cfg, hidden_size=2 * H)))
    finding = inspect(run_probe, pair[0], wide).finding("agree_hidden_size")
    assert finding.severity == "error" and f"target has {2 * H}" in finding.message


# (file under sglang/srt, the line range cited, a pattern that must be inside it)
CITED = {
    "0.5.12.post1": [("speculative/eagle_worker.py", 177, 194, r"set_embed_and_head\(embed, head\)"),
                     ("speculative/eagle_worker.py", 196, 204, r"set_embed_and_head\(embed, head\)"),
                     ("models/llama_eagle3.py", 268, 282, r"load_lm_head_from_target = True"),
                     ("models/llama.py", 779, 785, r"target_hidden_size != self.config.hidden_size"),
                     ("models/llama.py", 764, 768, r"del self.lm_head.weight"),
                     ("layers/logits_processor.py", 993, 996, r"logits\[:, : self.vocab_size\]"),
                     ("models/llama_eagle3.py", 218, 218, r"hidden_states.shape\[-1\] != embeds.shape\[-1\]"),
                     ("speculative/eagle_worker.py", 865, 865, r"hot_token_id\[topk_index\]")],
    "0.5.23": [("speculative/eagle_worker_v2.py", 353, 369, r"set_embed_and_head\(embed, head\)"),
               ("speculative/eagle_worker_v2.py", 371, 378, r"set_embed_and_head\(embed, head\)"),
               ("models/llama_eagle3.py", 300, 314, r"load_lm_head_from_target = True"),
               ("models/llama.py", 910, 916, r"target_hidden_size != self.config.hidden_size"),
               ("models/llama.py", 895, 899, r"del self.lm_head.weight"),
               ("layers/logits_processor.py", 1346, 1347, r"logits\[:, : self.vocab_size\]"),
               ("models/llama_eagle3.py", 238, 238, r"hidden_states.shape\[-1\] != embeds.shape\[-1\]"),
               ("speculative/eagle_worker_v2.py", 758, 758, r"hot_token_id\[topk_index\]")],
}


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_served_parts_rules_cite_the_real_trees(sglang_trees, version):
    """Every rule eagle3_served applies is where its docstring says, in each real tree."""
    text = (probes_dir() / "eagle3" / "served.py").read_text()
    root = Path(sglang_trees(version)) / "sglang" / "srt"
    for path, first, last, pattern in CITED[version]:
        lines = (root / path).read_text().splitlines()[first - 1:last]
        assert re.search(pattern, "\n".join(lines)), (version, path, first, last)
        name = path.rsplit("/", 1)[1]
        cited = f"{first}-{last}" if first != last else str(first)
        assert f"{name}:{cited}" in text or f":{cited}" in text, (name, cited)


def test_draft_test_scores_as_served_and_as_trained(run_probe, pair, tmp_path):
    """The draft test under --speculative-algorithm EAGLE: SGLang feeds hidden_states[N] (fc skipped) and serves the
    target's head and embedding without d2t; every aux wiring also carries its as-trained score."""
    from tests.draft.libraries import save_tiny_target

    texts = json.loads((probes_dir() / "evaluation" / "draft_test_prompts.json").read_text())
    texts = [t if isinstance(t, str) else json.dumps(t) for t in texts]
    target = save_tiny_target(tmp_path / "target", texts, num_layers=N)
    res = run_probe("draft_test", {"target": str(target), "draft": str(pair[0]), "num_prompts": 3,
                                   "max_new_tokens": 8, "steps": 2, "device": "cpu", "algorithm": "EAGLE",
                                   "wirings": {"trained": [2, 6, 9]}}, timeout=600).result
    assert res["algorithm"] == "EAGLE" and res["server_wiring"] == [N] and res["server"]["wiring"] == [N]
    served = res["parts"]["served"]
    assert (served["head"], served["d2t"], served["fc"], served["head_rows"]) == ("target_head", False, "skipped", 64)
    rows = {r["name"]: r for r in res["wirings"]}
    assert "as_trained" in rows["trained"] and rows["trained"]["as_trained"]["tau_serving"] is not None
    assert "as_trained" not in rows["server(sglang)"]  # one hidden state: the draft's own parts cannot take it
    assert "scored as served" in res["verdict"]
