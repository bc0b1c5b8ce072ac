"""SGLang's capture path without a server (issues 38, 43): what a capture server is started with, how the draft test
picks the engine's reader, and how ``/generate``'s hidden states are read (the answer's shape as the real SGLang
0.5.15.post1 gives it: tests/lab/test_engine_capture_sglang.py holds the real server to transformers)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from remote_probes.agent.protocol import ProbeFailure
from remote_probes.engine import sglang_states
from remote_probes.engine.engine_states import capture, capture_for
from remote_probes.engine.sglang_capture_model import capturing_target
from remote_probes.evaluation.draft_test import parse_states_from
from tests import realparts

torch = realparts.importorskip("torch")  # the reader builds tensors

def test_the_server_is_told_the_package_the_layers_and_the_architecture() -> None:
    env = sglang_states.capture_env([12, 0, 5, 5], ["LlamaForCausalLM"])
    assert env["SGLANG_EXTERNAL_MODEL_PACKAGE"] == "remote_probes.engine.sglang_capture_model"
    assert os.path.isdir(os.path.join(env["PYTHONPATH"], *env["SGLANG_EXTERNAL_MODEL_PACKAGE"].split(".")))
    # the names the server's module reads are the ones set here
    assert json.loads(env[capturing_target.LAYERS_ENV]) == [0, 5, 12]
    assert env[capturing_target.ARCHS_ENV] == "LlamaForCausalLM"
    assert sglang_states.capture_env(None, ["A", "B"])[capturing_target.LAYERS_ENV] == "default"
    with pytest.raises(ProbeFailure, match="architectures"):
        sglang_states.capture_env([1], [])
    assert sglang_states.capture_argv() == ["--enable-return-hidden-states", "--disable-radix-cache"]
    assert sglang_states.capture_argv(1024)[-2:] == ["--chunked-prefill-size", "1024"]


@pytest.mark.parametrize(("raw", "ids"), [(None, None), ("default", None), ("", None), ("[9, 0, 9]", [0, 9])])
def test_the_server_side_reads_the_layers(raw: str | None, ids: list[int] | None) -> None:
    assert capturing_target.requested_ids(raw) == ids


@pytest.mark.parametrize("raw", ["[]", "[-1]", "{\"a\": 1}", "[1.5]"])
def test_bad_layers_stop_the_server_at_its_model_build(raw: str) -> None:
    with pytest.raises(ValueError, match=capturing_target.LAYERS_ENV):
        capturing_target.requested_ids(raw)


def test_no_architecture_named_registers_nothing() -> None:
    assert capturing_target.EntryClass == []  # imported here without sglang: nothing asked


def test_states_from_names_the_engine_whose_reader_runs() -> None:
    named = parse_states_from({"url": "http://h:1", "layers": [2], "engine": "sglang"})
    assert named is not None and named["engine"] == "sglang"
    with pytest.raises(ProbeFailure, match="states_from.engine must be one of vllm, sglang") as info:
        parse_states_from({"url": "http://h:1", "layers": [2], "engine": "tgi"})
    assert info.value.details["field"] == "states_from"
    assert capture_for(None) is capture and capture_for("vllm") is capture
    assert capture_for("sglang") is not capture
    with pytest.raises(ProbeFailure, match="states_from.engine"):
        capture_for("lab")


def answer(prompt: int, generated: list[int], width: int, prefill_rows: int | None = None) -> dict[str, Any]:
    """``/generate``'s answer as SGLang 0.5.15.post1 gives it: the prompt's rows as one list, then one row per
    decode step."""
    row = [0.5] * width
    rows = [[row] * (prompt if prefill_rows is None else prefill_rows)] + [row] * (len(generated) - 1)
    return {"text": "x", "output_ids": generated, "meta_info": {"hidden_states": rows, "completion_tokens": 3}}


def test_the_rows_are_the_prompts_then_one_per_decode_step() -> None:
    assert len(sglang_states.rows_of(answer(4, [7, 8, 9], 6), 4)) == 6
    with pytest.raises(ProbeFailure, match="2 rows for a 4-token prompt"):
        sglang_states.rows_of(answer(4, [7, 8, 9], 6, prefill_rows=2), 4)
    with pytest.raises(ProbeFailure, match="--enable-return-hidden-states"):
        sglang_states.rows_of({"meta_info": {}}, 4)


def test_the_rows_are_split_by_layer_and_checked_against_the_layers_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    got = answer(3, [7, 8], 8)
    got["meta_info"]["hidden_states"][0] = [[float(i)] * 4 + [float(-i)] * 4 for i in range(3)]
    monkeypatch.setattr(sglang_states, "post_json", lambda *_a: got)
    [run] = sglang_states.capture("http://h:1", [[1, 2, 3]], 2, [9, 2], hidden_size=4)
    assert run["token_ids"] == [1, 2, 3, 7] and run["generated"] == [7, 8]
    assert sorted(run["states"]) == [2, 9] and run["states"][2].shape == (4, 4)
    assert torch.equal(run["states"][2][:3, 0], torch.tensor([0.0, 1.0, 2.0]))  # the lower id first
    assert torch.equal(run["states"][9][:3, 0], torch.tensor([0.0, -1.0, -2.0]))
    # a server capturing other layers (or none: the final state alone) than the draft test was told
    with pytest.raises(ProbeFailure, match="was it started with other capture layers"):
        sglang_states.capture("http://h:1", [[1, 2, 3]], 2, [2, 6, 9], hidden_size=4)


def test_an_sglang_that_does_not_answer_is_said() -> None:
    with pytest.raises(ProbeFailure, match="no answer from the engine") as info:
        sglang_states.capture("http://127.0.0.1:9", [[1, 2]], 2, [2])
    assert info.value.kind == "engine_capture"
