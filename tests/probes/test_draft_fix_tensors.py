"""Fixes to the checkpoint's tensors, written beside the draft like config fixes so the flagship can serve and verify
them (issue 61): a weight with a few non-finite values mended in a copy (and one with many left a blocker), and a d2t
that disagrees with the checkpoint's own t2d rebuilt from it — on drafts saved by SpecForge, read by the real probes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import realparts
from tests.draft.libraries import save_specforge_draft, save_target_config
from tests.probes.test_draft_fix_probe import fix_args

torch = realparts.importorskip("torch")
safetensors_torch = realparts.importorskip("safetensors.torch")


def planted(tmp_path: Path, name: str, change) -> tuple[Path, Path, dict]:
    good, target = tmp_path / "good", tmp_path / "target"
    save_specforge_draft(good)
    save_target_config(target, num_layers=12)
    weights = safetensors_torch.load_file(str(good / "model.safetensors"))
    draft = tmp_path / name
    draft.mkdir()
    (draft / "config.json").write_bytes((good / "config.json").read_bytes())
    bad = change({k: v.clone() for k, v in weights.items()})
    safetensors_torch.save_file(bad, str(draft / "model.safetensors"))
    return draft, target, weights


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_few_non_finite_values_are_zeroed_in_a_copy_and_nothing_else_changes(run_probe, sglang_trees, tmp_path,
                                                                              dtype: str) -> None:
    positions = [3, 99, 1000, 2001]

    def poison(w: dict) -> dict:
        w = {k: v.to(getattr(torch, dtype)) if v.is_floating_point() else v for k, v in w.items()}
        flat = w["fc.weight"].view(-1)
        flat[positions[:2]] = float("nan")
        flat[positions[2:]] = float("inf")
        return w

    draft, target, _ = planted(tmp_path, "nan-fc", poison)
    before = (draft / "model.safetensors").read_bytes()
    found = run_probe("draft_inspect", {"path": str(draft), "target_path": str(target)}).result["findings"]
    res = run_probe("draft_fix", fix_args(draft, target, sglang_trees("0.5.12.post1"), findings=found)).result
    assert res["fix_status"] == "fix", res["summary"]
    [change] = [c for c in res["changes"] if c["what"] == "tensor fc.weight"]
    assert change["from"].startswith("4 non-finite of") and "re-export fc.weight" in change["why"]
    mended = safetensors_torch.load_file(str(Path(res["draft"]) / "model.safetensors"))
    original = safetensors_torch.load_file(str(draft / "model.safetensors"))
    fc, was = mended["fc.weight"].view(-1), original["fc.weight"].view(-1)
    assert torch.isfinite(fc).all() and fc[positions].eq(0).all()
    keep = torch.ones_like(was, dtype=torch.bool)
    keep[positions] = False
    assert torch.equal(fc[keep], was[keep])  # every other value as trained
    assert all(torch.equal(mended[k], original[k]) for k in original if k != "fc.weight")
    assert (draft / "model.safetensors").read_bytes() == before  # the draft itself is never changed


def test_a_weight_mostly_non_finite_stays_a_blocker(run_probe, sglang_trees, tmp_path) -> None:
    def poison(w: dict) -> dict:
        w["fc.weight"].view(-1)[::10] = float("nan")  # 10%: a copy with them zeroed is not the trained tensor
        return w

    draft, target, _ = planted(tmp_path, "nan-heavy", poison)
    found = run_probe("draft_inspect", {"path": str(draft), "target_path": str(target)}).result["findings"]
    res = run_probe("draft_fix", fix_args(draft, target, sglang_trees("0.5.12.post1"), findings=found)).result
    assert res["fix_status"] == "blocked" and res["draft"] is None
    [blocker] = [b for b in res["blockers"] if b["what"] == "tensor fc.weight"]
    assert "would not be the trained tensor" in blocker["why"] and "re-export" in blocker["remedies"][0]


def test_a_d2t_shifted_off_its_t2d_is_rebuilt_from_t2d(run_probe, sglang_trees, tmp_path) -> None:
    draft, target, weights = planted(tmp_path, "d2t-plus1", lambda w: {**w, "d2t": w["d2t"] + 1})
    found = run_probe("draft_inspect", {"path": str(draft), "target_path": str(target)}).result["findings"]
    assert any(f["id"] in ("d2t", "t2d") and f["severity"] != "info" for f in found), found
    res = run_probe("draft_fix", fix_args(draft, target, sglang_trees("0.5.12.post1"), findings=found)).result
    assert res["fix_status"] == "fix", res["summary"]
    [change] = [c for c in res["changes"] if c["what"] == "d2t"]
    assert "disagrees with t2d" in change["from"] and "nonzero(t2d)" in change["to"]
    fixed = safetensors_torch.load_file(str(Path(res["draft"]) / "model.safetensors"))
    assert torch.equal(fixed["d2t"], weights["d2t"])  # the map training saved, recovered from t2d
