"""Flag -> argv building and requested-vs-effective diffs, from data files (one case per entry)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.errors import UserInputError
from orchestrator.servers.base import LaunchSpec
from orchestrator.servers.flags import flags_to_argv, parse_adjustments, requested_vs_effective
from orchestrator.servers.registry import get_adapter

CASES = Path(__file__).with_name("cases")
ARGV = json.loads((CASES / "argv_cases.json").read_text())
OVERRIDES = json.loads((CASES / "override_cases.json").read_text())


@pytest.mark.parametrize("case", ARGV, ids=[c["id"] for c in ARGV])
def test_flags_to_argv(case: dict) -> None:
    style = case.get("style", "nargs")
    if "error" in case:
        with pytest.raises(UserInputError, match=case["error"]):
            flags_to_argv(case["flags"], list_style=style)
    else:
        assert flags_to_argv(case["flags"], list_style=style) == case["argv"]


@pytest.mark.parametrize("case", OVERRIDES, ids=[c["id"] for c in OVERRIDES])
def test_requested_vs_effective(case: dict) -> None:
    diff = requested_vs_effective(case["requested"], case["effective"], log_text=case["log"],
                                  aliases=get_adapter("sglang").aliases)
    got = [{k: o[k] for k in ("flag", "requested", "effective", "source")} for o in diff["overrides"]]
    assert got == case["overrides"]
    assert [a["flag"] for a in diff["adjustments"]] == case["adjustments"]


def test_log_override_carries_the_line() -> None:
    case = OVERRIDES[0]
    diff = requested_vs_effective(case["requested"], None, log_text=case["log"])
    assert "is adjusted to speculative_num_steps + 1" in diff["overrides"][0]["detail"]
    assert set(diff["unverified"]) >= {"speculative_num_steps", "speculative_num_draft_tokens"}


@pytest.mark.parametrize("line", [
    "[2026-11-29 10:00:05] Decode batch, #running-req: 1, #token: 90, token usage: 0.00, accept len: 1.60, "
    "accept rate: 0.04, cuda graph: True, gen throughput (token/s): 56.80, #queue-req: 0",
    "[2026-11-29 10:00:05] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
    "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 0.00",
    "[2026-11-29 10:00:01] Mixed chunked prefill is disabled because of using eagle speculative decoding.",
    "[2026-11-29 10:00:01] Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding.",
    "[2026-11-29 10:00:09] The server is fired up and ready to roll!",
])
def test_ordinary_log_lines_are_not_adjustments(line: str) -> None:
    assert parse_adjustments(line) == []


def test_adjustment_word_value() -> None:
    (adj,) = parse_adjustments("[t] attention_backend is set to triton because of the draft model")
    assert (adj.flag, adj.effective) == ("attention_backend", "triton")


@pytest.mark.parametrize(("engine", "launcher", "head"), [
    ("sglang", None, ["/venv/bin/python", "-m", "sglang.launch_server"]),
    ("sglang", "sglang serve", ["sglang", "serve"]),
    ("sglang", "python -m sglang.launch_server", ["/venv/bin/python", "-m", "sglang.launch_server"]),
    ("sglang", ["/opt/bin/sglang", "serve"], ["/opt/bin/sglang", "serve"]),
    ("lab", None, ["/venv/bin/python", "-m", "orchestrator.lab.stand_in.server"]),
])
def test_launch_argv(engine: str, launcher: object, head: list[str]) -> None:
    spec = LaunchSpec(model="/m/target", flags={"speculative-num-steps": 3, "trust-remote-code": True}, port=30001,
                      python="/venv/bin/python", launcher=launcher)  # type: ignore[arg-type]
    argv = get_adapter(engine).build_argv(spec)
    assert argv == [*head, "--model-path", "/m/target", "--host", "127.0.0.1", "--port", "30001",
                    "--speculative-num-steps", "3", "--trust-remote-code"]


@pytest.mark.parametrize("flag", ["port", "--port", "model-path", "host", "model"])
def test_reserved_flags_refused(flag: str) -> None:
    with pytest.raises(UserInputError, match="set by the step itself"):
        get_adapter("sglang").build_argv(LaunchSpec(model="m", flags={flag: 1}, port=1))


def test_unknown_engine() -> None:
    with pytest.raises(UserInputError, match=r"unknown engine 'trtllm' \(known: lab, lab-vllm, sglang, vllm\)"):
        get_adapter("trtllm")


@pytest.mark.parametrize(("flags", "invalid"), [
    ({"speculative-num-steps": 1, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 16}, True),
    ({"speculative-num-steps": 3, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 4}, False),
    ({"speculative-num-steps": 2, "speculative-eagle-topk": 4, "speculative-num-draft-tokens": 8}, False),
    ({"speculative-num-steps": 3}, False),
])
def test_invalid_combinations(flags: dict, invalid: bool) -> None:
    assert (get_adapter("lab").invalid_reason(flags) is not None) is invalid
