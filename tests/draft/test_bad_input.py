"""Bad drafts and bad probe arguments give a clear error naming the tensor/field, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests import realparts

torch = realparts.importorskip("torch")
realparts.importorskip("safetensors")

from remote_probes.eagle3.draft import DraftLoadError, DraftOutput  # noqa: E402
from remote_probes.eagle3.validate import load_draft  # noqa: E402
from tests.draft.conftest import REPO, save_checkpoint  # noqa: E402


def _state(cfg: dict) -> dict:
    g = torch.Generator().manual_seed(0)
    h, i, v, vd, th = (cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["draft_vocab_size"],
                       cfg["target_hidden_size"])
    kv = cfg["num_key_value_heads"] * h // cfg["num_attention_heads"]
    shapes = {"fc.weight": (h, 3 * th), "norm.weight": (h,), "lm_head.weight": (vd, h),
              "midlayer.input_layernorm.weight": (h,), "midlayer.hidden_norm.weight": (h,),
              "midlayer.post_attention_layernorm.weight": (h,), "midlayer.self_attn.q_proj.weight": (h, 2 * h),
              "midlayer.self_attn.k_proj.weight": (kv, 2 * h), "midlayer.self_attn.v_proj.weight": (kv, 2 * h),
              "midlayer.self_attn.o_proj.weight": (h, h), "midlayer.mlp.gate_proj.weight": (i, h),
              "midlayer.mlp.up_proj.weight": (i, h), "midlayer.mlp.down_proj.weight": (h, i)}
    state = {k: torch.randn(s, generator=g) for k, s in shapes.items()}
    hot = torch.arange(0, v, v // vd)[:vd]
    state["d2t"] = hot - torch.arange(vd)
    return state


def _load(tmp_path, cfg, state, **kw):
    kw.setdefault("embed_tokens", torch.randn(cfg["vocab_size"], 64))
    return load_draft(str(save_checkpoint(tmp_path / "d", cfg, state)), target_vocab_size=cfg["vocab_size"],
                      target_hidden_size=cfg["target_hidden_size"], **kw)


def test_good_draft_loads_with_renamed_layouts(tmp_path, tiny_config):
    state = {("model.layers.0." + k[len("midlayer."):]) if k.startswith("midlayer.") else k: t
             for k, t in _state(tiny_config).items()}
    draft = _load(tmp_path, tiny_config, state)
    assert any("renamed" in n for n in draft.load_report["notes"])
    assert any("embed_tokens taken from the target" in n for n in draft.load_report["notes"])
    out = draft(torch.tensor([[1, 2, 3]]), torch.randn(1, 3, 3 * 48))
    assert isinstance(out, DraftOutput) and out.logits.shape == (1, 3, 64) and out.hidden.shape == (1, 3, 64)


@pytest.mark.parametrize(("mutate", "field", "words"), [
    (lambda c, s: s.pop("midlayer.mlp.up_proj.weight"), "midlayer.mlp.up_proj.weight", "missing tensor"),
    (lambda c, s: s.__setitem__("midlayer.self_attn.q_proj.weight", torch.zeros(64, 64)),
     "midlayer.self_attn.q_proj.weight", "shape [64, 64]"),
    (lambda c, s: s.__setitem__("fc.weight", torch.zeros(64, 100)), "fc.weight", "target_hidden_size"),
    (lambda c, s: s.pop("lm_head.weight"), "lm_head.weight", "draft_vocab_size=64"),
    (lambda c, s: s.__setitem__("d2t", s["d2t"] + torch.arange(64) * 3), "d2t", "direct target ids"),
    (lambda c, s: s.pop("d2t"), "d2t", "no d2t"),
    (lambda c, s: c.pop("hidden_size"), "hidden_size", "no hidden_size"),
    (lambda c, s: c.__setitem__("rope_scaling", {"rope_type": "yarn", "factor": 4}), "rope_scaling", "yarn"),
])
def test_broken_draft_names_the_field(tmp_path, tiny_config, mutate, field, words):
    state = _state(tiny_config)
    mutate(tiny_config, state)
    with pytest.raises(DraftLoadError) as err:
        _load(tmp_path, tiny_config, state)
    assert err.value.field == field
    assert words in err.value.message


def test_draft_for_another_vocab_or_width(tmp_path, tiny_config):
    path = save_checkpoint(tmp_path / "d", tiny_config, _state(tiny_config))
    embed = torch.randn(256, 64)
    with pytest.raises(DraftLoadError, match="another tokenizer") as err:
        load_draft(str(path), embed_tokens=embed, target_vocab_size=32000)
    assert err.value.field == "vocab_size"
    with pytest.raises(DraftLoadError) as err:
        load_draft(str(path), embed_tokens=embed, target_vocab_size=256, target_hidden_size=4096)
    assert err.value.field == "target_hidden_size"
    with pytest.raises(DraftLoadError) as err:
        load_draft(str(path), embed_tokens=torch.randn(256, 32))
    assert err.value.field == "embed_tokens.weight"
    with pytest.raises(DraftLoadError) as err:
        load_draft(str(path))
    assert err.value.field == "embed_tokens.weight"


def test_non_strict_mimics_sglang(tmp_path, tiny_config):
    state = _state(tiny_config)
    state.pop("lm_head.weight")
    state["d2t"] = state["d2t"] + torch.arange(64) * 3
    draft = _load(tmp_path, tiny_config, state, strict=False)
    notes = " ".join(draft.load_report["notes"])
    assert "left randomly initialised" in notes and "clamped" in notes
    assert int(draft.to_target_ids(torch.arange(64)).max()) < 256


def test_missing_directory_and_config(tmp_path):
    with pytest.raises(DraftLoadError, match="not a directory"):
        load_draft(str(tmp_path / "nope"))
    (tmp_path / "d").mkdir()
    with pytest.raises(DraftLoadError) as err:
        load_draft(str(tmp_path / "d"))
    assert err.value.field == "config.json"


def _probe(tmp_path, args: dict) -> tuple[int, dict, str]:
    (tmp_path / "args.json").write_text(json.dumps(args))
    proc = subprocess.run([sys.executable, "-m", "remote_probes.evaluation.draft_test", str(tmp_path / "args.json")],
                          capture_output=True, text=True, cwd=str(REPO), timeout=120)
    doc = json.loads(proc.stdout.strip().splitlines()[-2])
    return proc.returncode, doc, proc.stderr


@pytest.mark.parametrize(("args", "field"), [
    ({"draft": "/x"}, "target"),
    ({"target": "/nonexistent-target", "draft": "/tmp"}, "target"),
    ({"target": "/tmp", "draft": "/tmp", "steps": 0}, "steps"),
    ({"target": "/tmp", "draft": "/tmp", "engine": "trt"}, "engine"),
    ({"target": "/tmp", "draft": "/tmp", "bogus": 1}, "bogus"),
])
def test_probe_bad_args(tmp_path, args, field):
    code, doc, stderr = _probe(tmp_path, args)
    assert code == 3 and doc["ok"] is False
    assert doc["error"]["kind"] == "bad_args" and doc["error"]["details"]["field"] == field
    assert "Traceback" not in stderr


def test_probe_unloadable_target(tmp_path):
    (tmp_path / "t").mkdir()
    code, doc, _ = _probe(tmp_path, {"target": str(tmp_path / "t"), "draft": str(tmp_path / "t")})
    assert code == 3 and doc["error"]["kind"] == "target_load"
    assert str(tmp_path / "t") in doc["error"]["message"]
