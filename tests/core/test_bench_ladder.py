"""A benchmark's context ladder (orchestrator/actions/bench_ladder.py): where the serving context is read (the
server's resolved args, then its flags, then the model's config on its host), how the rungs are cut (growing, above
the bundled prompts, under the context less the generation), and that the reconcile counts the rungs by prompt
length only, never in the headline it decides on."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from orchestrator.actions.bench_ladder import (
    HEADROOM,
    chars_per_token,
    ladder_line,
    ladder_prompts,
    serving_context,
)
from orchestrator.actions.reconcile import compare
from orchestrator.servers.base import LaunchSpec
from orchestrator.transport.local import LocalTransport

PROMPTS = ["def add(a, b):\n    return a + b", "Explain the cache in one line.", "x" * 40]


def _record(tmp_path: Path, effective: dict[str, Any], flags: dict[str, Any], config: Any) -> Any:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    if config is not None:
        (model / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    transport = LocalTransport("localhost", session_id="ladder", state_dir=str(tmp_path / "state"))
    return SimpleNamespace(effective=effective, spec=LaunchSpec(model=str(model), flags=flags, port=0), transport=transport)


async def test_the_serving_context_is_what_the_server_resolved_then_its_flags_then_the_models_config(
        tmp_path: Path) -> None:
    config = {"max_position_embeddings": 4096}
    assert await serving_context(_record(tmp_path, {"max_model_len": "512"}, {"max-model-len": 256}, config)) == (
        512, "the server's resolved max_model_len")
    assert await serving_context(_record(tmp_path, {}, {"context-length": 2048}, config)) == (
        2048, "the launch flag context-length")
    found, where = await serving_context(_record(tmp_path, {}, {}, config))
    assert found == 4096 and where.startswith("max_position_embeddings in ") and where.endswith("config.json")
    nested = {"text_config": {"max_position_embeddings": 8192}}  # a multimodal target nests its text config
    assert (await serving_context(_record(tmp_path, {}, {}, nested)))[0] == 8192
    for bad in ("{not json", "[1024]", {"hidden_size": 8}, None):
        (tmp_path / str(id(bad))).mkdir()
        found, why = await serving_context(_record(tmp_path / str(id(bad)), {}, {}, bad))
        assert found is None and "no context in the server's args or flags" in why, why


def test_rungs_grow_from_above_the_bundled_prompts_to_under_the_context_less_the_generation() -> None:
    rows = [{"prompt_tokens": 10}, {"prompt_tokens": 8}, {"prompt_tokens": 10}, {"prompt_tokens": None}]
    cpt = chars_per_token(PROMPTS, rows)
    assert cpt == (len(PROMPTS[0]) + len(PROMPTS[1]) + len(PROMPTS[2])) / 28
    rungs = ladder_prompts(PROMPTS, context=1024, max_new_tokens=64, rungs=3, cpt=cpt, longest=237)
    aims = [aim for aim, _text in rungs]
    top = int((1024 - 64) * HEADROOM)
    assert len(rungs) == 3 and aims == sorted(aims) and aims[0] > 237 and aims[-1] == top
    lengths = [len(text) for _aim, text in rungs]
    assert lengths == sorted(lengths) and all(len(text) <= aim * cpt for aim, text in rungs)
    assert all(length >= aim * cpt / 2 for (aim, _t), length in zip(rungs, lengths, strict=True))
    assert rungs[0][1].startswith(PROMPTS[0])  # cut from the bundled prompts joined end to end
    # no budget above the bundled prompts: no ladder; nothing counted: no estimate
    assert ladder_prompts(PROMPTS, context=300, max_new_tokens=64, rungs=3, cpt=cpt, longest=237) == []
    assert chars_per_token(PROMPTS, [{"prompt_tokens": None}]) is None
    line = ladder_line("spec", {"skipped": "the server counted no prompt tokens"})
    assert line == "bench spec: no context ladder: the server counted no prompt tokens\n"


def test_the_reconcile_counts_the_ladder_by_length_only() -> None:
    predicted = {"tau_request": 3.0, "tau_request_ci": [2.8, 3.2], "prompts": 3,
                 "by_length": [{"bucket": [0, 32], "prompts": 3, "tau_serving": 3.0, "tau_serving_ci": [2.8, 3.2]},
                               {"bucket": [512, 2048], "prompts": 2, "tau_serving": 1.2,
                                "tau_serving_ci": [1.1, 1.3]}]}
    short = [{"accept_length": a, "prompt_tokens": 10} for a in (2.9, 3.0, 3.1)]
    ladder = {"per_request": [{"accept_length": a, "prompt_tokens": t} for a, t in ((1.2, 600), (1.25, 900))]}
    bench = {"accept_length": 3.0, "accept_length_ci": [2.75, 3.25], "completed": 3, "per_request": short,
             "ladder": ladder}
    out = compare(predicted, bench)
    assert out["decision"] == "reconciled" and out["measured"]["accept_length"] == 3.0
    by = {tuple(b["bucket"]): b for b in out["by_length"]}
    assert by[(0, 32)]["requests"] == 3 and by[(512, 2048)]["requests"] == 2
    assert by[(512, 2048)]["measured"] == 1.225 and by[(512, 2048)]["disjoint"] is False
    # the same benchmark without its ladder measures nothing in the long bucket
    assert {tuple(b["bucket"]): b for b in compare(predicted, {**bench, "ladder": None})["by_length"]}[
        (512, 2048)]["requests"] == 0
