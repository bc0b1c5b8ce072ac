"""Unit tests of remote_probes/eagle3_wiring (which hidden states each engine feeds; auto candidates)."""

from __future__ import annotations

import pytest

from remote_probes.eagle3.wiring import auto_wirings, default_wiring, validate_wiring
from remote_probes.engine.served_wiring import server_wiring

N = 12


def test_sglang_adds_one_to_nested_ids_and_ignores_top_level():
    cfg = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 5, 8]}, "eagle_aux_hidden_state_layer_ids": [0, 6, 11]}
    assert server_wiring(cfg, N, "sglang") == [2, 6, 9]
    assert server_wiring(cfg, N, "vllm") == [0, 6, 11]


@pytest.mark.parametrize("cfg", [{}, {"eagle_config": {"use_aux_hidden_state": True}},
                                 {"eagle_config": {"eagle_aux_hidden_state_layer_ids": "bad"}}])
def test_default_when_no_usable_ids(cfg):
    assert server_wiring(cfg, N, "sglang") == [2, 6, 9] == default_wiring(N)
    assert server_wiring(cfg, 61, "vllm") == [2, 30, 58]


def test_out_of_range_ids_give_none_and_bad_engine_raises():
    assert server_wiring({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 5, 12]}}, N) is None
    with pytest.raises(ValueError, match="engine"):
        server_wiring({}, N, "trt")


def test_auto_wirings_cover_the_bug_classes_without_duplicates():
    cfg = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 5, 8]}}
    cands = auto_wirings(cfg, N)
    wirings = [tuple(c["wiring"]) for c in cands]
    assert len(wirings) == len(set(wirings))
    assert wirings[0] == (2, 6, 9)  # nested +1 first
    names = {c["name"]: c["wiring"] for c in cands}
    assert names["nested-as-is"] == [1, 5, 8]
    assert [0, 2, 6] in names.values() and [0, 6, 9] in names.values() and [0, 6, 11] in names.values()
    assert [1, 5, 8] in names.values() and [3, 7, 10] in names.values() and [9, 6, 2] in names.values()
    assert all(0 <= i <= N for w in wirings for i in w)
    assert all(c["why"] for c in cands)


def test_auto_wirings_top_level_and_range_filter():
    cands = auto_wirings({"eagle_aux_hidden_state_layer_ids": [0, 6, 11]}, N)
    by_name = {c["name"]: c["wiring"] for c in cands}
    assert by_name["top-level"] == [0, 6, 11]
    assert "top-level-1" not in by_name  # [-1, 5, 10] is not a hidden_states index
    assert by_name["top-level+1"] == [1, 7, 12]


def test_validate_wiring_messages():
    assert validate_wiring([0, 6, 12], N) == [0, 6, 12]
    with pytest.raises(ValueError, match="outside 0..12"):
        validate_wiring([0, 6, 13], N)
    with pytest.raises(ValueError, match="list of integers"):
        validate_wiring("0,6,11", N)
