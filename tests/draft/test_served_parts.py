"""The served-parts resolution (remote_probes/eagle3/served.py) and the draft it builds: the parts SGLang serves
per algorithm, and build_from_state putting exactly those tensors in (a SpecForge-saved draft)."""

from __future__ import annotations

import json

import pytest

from tests import realparts

torch = realparts.importorskip("torch")

from remote_probes.eagle3.checkpoint import read_state_dict  # noqa: E402
from remote_probes.eagle3.served import served_parts  # noqa: E402
from remote_probes.eagle3.validate import build_from_state  # noqa: E402
from tests.draft.libraries import VD, H, V, save_specforge_draft  # noqa: E402

BASE = {"hidden_size": 128, "vocab_size": 1024, "draft_vocab_size": 512, "tie_word_embeddings": False}
HEAD = {"fc.weight": [128, 384], "lm_head.weight": [512, 128], "d2t": [512]}

# (config change, tensors, algorithm) -> served (embedding, head, head_rows, d2t, fc), swapped parts, fails contains
RULES = [
    ({}, HEAD, "EAGLE3", ("target", "draft_head", None, True, "applied"), set(), None),
    ({}, HEAD, "EAGLE", ("target", "target_head", 512, False, "skipped"), {"head", "d2t", "fc", "feed"}, None),
    ({"draft_vocab_size": None}, {"fc.weight": [128, 384]}, "EAGLE3",
     ("target", "target_head", None, False, "applied"), set(), None),
    ({"draft_vocab_size": None}, HEAD, "EAGLE3", ("target", "target_head", None, True, "applied"), {"head"},
     "d2t has 512 entries"),
    ({"tie_word_embeddings": True}, {"fc.weight": [128, 384]}, "EAGLE3",
     ("target", "target_embedding", 512, False, "applied"), set(), None),
    ({"tie_word_embeddings": True}, {"fc.weight": [128, 384]}, "EAGLE", None, None, "AttributeError"),
    ({"target_hidden_size": 96}, dict(HEAD, **{"embed_tokens.weight": [1024, 128]}), "EAGLE3",
     ("draft", "draft_head", None, True, "applied"), set(), None),
    ({"target_hidden_size": 96}, HEAD, "EAGLE3", ("random", "draft_head", None, True, "applied"), {"embedding"},
     None),
    ({"target_hidden_size": 96, "draft_vocab_size": None}, {"fc.weight": [128, 288]}, "EAGLE3", None, None,
     "whatever target_hidden_size says"),
    ({}, {"fc.weight": [128, 384], "d2t": [512]}, "EAGLE3", ("target", "random", None, True, "applied"), set(), None),
    ({"eagle_config": {"use_aux_hidden_state": False}}, HEAD, "EAGLE3", ("target", "draft_head", None, True, "skipped"),
     {"fc", "feed"}, None),
]


@pytest.mark.parametrize("change,tensors,algorithm,served,swapped,fails", RULES)
def test_served_parts_rules(change, tensors, algorithm, served, swapped, fails):
    config = {k: v for k, v in dict(BASE, **change).items() if v is not None or k == "target_hidden_size"}
    parts = served_parts(config, tensors, algorithm, target_hidden_size=128)
    if fails:
        assert parts["fails"] and fails in parts["fails"], parts
        return
    s = parts["served"]
    assert parts["fails"] is None, parts["fails"]
    assert (s["embedding"], s["head"], s["head_rows"], s["d2t"], s["fc"]) == served
    assert {x["part"] for x in parts["swapped"]} == swapped
    assert all(x["why"] for x in parts["swapped"])  # every swap says why (with its sglang file:line)


def test_build_puts_the_served_tensors_in(tmp_path):
    save_specforge_draft(tmp_path / "d", aux_ids=[1, 5, 8])
    config, state, notes = read_state_dict(str(tmp_path / "d"))
    assert "embed_tokens.weight" in state  # SpecForge saves its (frozen) embedding
    gen = torch.Generator().manual_seed(3)
    t_embed, t_head = torch.randn(V, H, generator=gen), torch.randn(V, H, generator=gen)

    def build(parts):
        return build_from_state(config, state, notes, strict=True, embed_tokens=t_embed, lm_head=t_head,
                                target_vocab_size=V, target_hidden_size=H, device="cpu", dtype=torch.float32,
                                parts=parts)

    eagle = served_parts(json.loads((tmp_path / "d" / "config.json").read_text()), state, "EAGLE")
    served, trained = build(eagle["served"]), build(eagle["trained"])
    assert torch.equal(served.embed_tokens.weight, t_embed)
    assert torch.equal(served.lm_head.weight, t_head[:VD]) and not served.d2t.any()
    assert torch.equal(trained.embed_tokens.weight, state["embed_tokens.weight"].float())
    assert torch.equal(trained.lm_head.weight, state["lm_head.weight"].float())
    assert torch.equal(trained.d2t, state["d2t"].long()) and trained.d2t.any()
    assert served.load_report["parts"]["head"] == "target_head"


def test_the_table_shows_as_trained_only_where_parts_differ():
    from orchestrator.actions.draft_test import _row

    row = {"tier": 1, "name": "trained", "wiring": [2, 6, 9], "tau_serving": 1.1, "tau_serving_ci": [1.0, 1.2],
           "vs_server": {"ratio": 1.05}, "acc": [0.1], "as_trained": {"tau_serving": 2.5}}
    assert "2.50" in _row(row, True) and "2.50" not in _row(row, False)
    assert _row(dict(row, as_trained=None), True).split()[-2] == "-"  # a row the draft's own parts cannot take
