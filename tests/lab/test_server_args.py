"""SGLang's start-up rules as the lab server applies them (server_args.resolve): no models needed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.lab.stand_in.sglang_args import (
    W_DRAFT_TOKENS,
    W_MAX_RUNNING,
    W_SPEC_V2,
    StartupError,
    build_parser,
    resolve,
)

REPO = Path(__file__).resolve().parents[2]


def _resolve(*argv: str, arch: str = "LlamaForCausalLM"):
    ns = build_parser().parse_args(["--model-path", "/m", *argv])
    return resolve(ns, target_architecture=arch)


SPEC = ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/d")


def test_topk1_forces_draft_tokens_to_steps_plus_one_with_sglangs_warning():
    args = _resolve(*SPEC, "--speculative-num-steps", "1", "--speculative-eagle-topk", "1",
                    "--speculative-num-draft-tokens", "16")
    assert (args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens) == (1, 1, 2)
    assert W_DRAFT_TOKENS in args.warnings
    assert W_DRAFT_TOKENS == ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                              "speculative_eagle_topk == 1")


def test_consistent_flags_are_kept_without_warning():
    args = _resolve(*SPEC, "--speculative-num-steps", "7", "--speculative-eagle-topk", "1",
                    "--speculative-num-draft-tokens", "8")
    assert args.speculative_num_draft_tokens == 8 and W_DRAFT_TOKENS not in args.warnings


def test_max_running_requests_reset_to_48_only_when_unset():
    args = _resolve(*SPEC, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1")
    assert args.max_running_requests == 48 and W_MAX_RUNNING in args.warnings
    args = _resolve(*SPEC, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--max-running-requests", "4")
    assert args.max_running_requests == 4 and W_MAX_RUNNING not in args.warnings
    assert _resolve().max_running_requests is None  # no speculative decoding: untouched


def test_auto_params_for_llama_are_a_tree_the_lab_drafts():
    args = _resolve(*SPEC)
    assert (args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens) == (5, 4, 8)
    # SGLang 0.5.12.post1 decides spec v1/v2 (server_args.py:3748-3771) before it auto-chooses topk (3807-3816)
    assert not args.disable_overlap_schedule and W_SPEC_V2 in args.warnings
    args = _resolve(*SPEC, "--speculative-num-steps", "5", "--speculative-eagle-topk", "4",
                    "--speculative-num-draft-tokens", "8")
    assert args.disable_overlap_schedule and W_SPEC_V2 not in args.warnings
    with pytest.raises(StartupError, match="set --speculative-num-draft-tokens") as info:  # SGLang leaves it None
        _resolve(*SPEC, "--speculative-num-steps", "5", "--speculative-eagle-topk", "4")
    assert info.value.kind == "TypeError"


@pytest.mark.parametrize(("version", "fields", "words"), [
    ("0.5.12.post1", {"attention_backend": "trtllm_mha"}, "^trtllm_mha backend only supports topk = 1"),
    ("0.5.12.post1", {"page_size": 16}, "^speculative_eagle_topk > 1 with page_size > 1 is unstable"),
    ("0.5.23", {"page_size": 16}, r"^speculative_eagle_topk > 1 with page_size > 1 is only supported on "
                                  r"\('flashinfer', 'fa3', 'triton'\); got attention_backend=None"),
])
def test_tree_drafting_is_refused_where_sglang_refuses_it(version, fields, words):
    from orchestrator.lab.stand_in.sglang_args import LabServerArgs, _tree_rules

    args = LabServerArgs(model_path="/m", tokenizer_path="/m", served_model_name="/m", speculative_num_steps=3,
                         speculative_eagle_topk=4, speculative_num_draft_tokens=8, sglang_version=version, **fields)
    with pytest.raises(StartupError, match=words) as info:
        _tree_rules(args)
    assert info.value.kind == "ValueError"
    _tree_rules(LabServerArgs(model_path="/m", tokenizer_path="/m", served_model_name="/m", speculative_num_steps=3,
                              speculative_eagle_topk=4, speculative_num_draft_tokens=8, sglang_version=version,
                              page_size=16, attention_backend="flashinfer"))  # the backend SGLang allows


def test_page_size_reaches_the_tree_rules_from_the_command_line():
    with pytest.raises(StartupError, match="page_size > 1"):
        _resolve(*SPEC, "--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
                 "--speculative-num-draft-tokens", "8", "--page-size", "16")


def test_auto_params_for_other_architectures_are_3_1_4():
    args = _resolve(*SPEC, arch="Qwen2ForCausalLM")
    assert (args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens) == (3, 1, 4)
    assert W_DRAFT_TOKENS not in args.warnings


def test_steps_unset_with_topk_set_is_sglangs_assertion():
    with pytest.raises(StartupError) as info:
        _resolve(*SPEC, "--speculative-eagle-topk", "1")
    assert info.value.kind == "AssertionError"


def test_steps_set_without_topk_is_sglangs_type_error():
    # SGLang (both versions) compares speculative_eagle_topk > 1 with topk still None; the lab accepted it once
    with pytest.raises(StartupError, match="^'>' not supported between instances of 'NoneType' and 'int'") as info:
        _resolve(*SPEC, "--speculative-num-steps", "3")
    assert info.value.kind == "TypeError"


@pytest.mark.parametrize(("given", "resolved"), [("eagle3", "EAGLE3"), ("NextN", "EAGLE"), ("eagle", "EAGLE")])
def test_algorithm_is_uppercased_and_nextn_is_eagle(given, resolved):
    args = _resolve("--speculative-algorithm", given, "--speculative-draft-model-path", "/d",
                    "--speculative-num-steps", "2", "--speculative-eagle-topk", "1")
    assert args.speculative_algorithm == resolved


def test_unknown_algorithm_is_sglangs_value_error():
    # SGLang uppercases the name before from_string, so its message shows it uppercased
    with pytest.raises(StartupError, match="^Unknown speculative algorithm name: MEDUSA$"):
        _resolve("--speculative-algorithm", "medusa")


def test_lab_capture_layers_parse_and_reject_garbage():
    chain = ("--speculative-num-steps", "2", "--speculative-eagle-topk", "1")
    assert _resolve(*SPEC, *chain, "--lab-capture-layers", "0,6,11").lab_capture_layers == [0, 6, 11]
    with pytest.raises(StartupError, match="comma-separated integers"):
        _resolve(*SPEC, *chain, "--lab-capture-layers", "0;rm -rf")


def _run_server(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "orchestrator.lab.stand_in.server", *argv], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd="/")


def test_unknown_flag_exits_2_with_usage_like_argparse():
    proc = _run_server("--model-path", "/m", "--speculative-algorithim", "EAGLE3")
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: ") and "unrecognized arguments: --speculative-algorithim" in proc.stderr


def test_startup_errors_exit_1_with_sglangs_exception_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    proc = _run_server("--model-path", str(tmp_path), "--speculative-algorithm", "bogus")
    assert proc.returncode == 1
    assert "ValueError: Unknown speculative algorithm name: BOGUS" in proc.stderr
    assert "NOT SGLang" in proc.stderr.splitlines()[0]  # the banner comes first, even on failure
