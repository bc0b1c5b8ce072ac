"""The sglang_flags probe on the real 0.5.12.post1 and 0.5.23 trees: SGLang's parser rebuilt from the source, and the
start-up rules that crash or adjust, with each rule's citation read back from the tree it names."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.probes import PROBES
from tests.probes.conftest import SGLANG_VERSIONS, ProbeRun

pytestmark = pytest.mark.sglang_source

SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/d"]
#: the flagship's seed flags (playbooks/eagle3.yaml via the lab scenario): valid in both versions
FLAGSHIP = ["--model-path", "/m", "--host", "127.0.0.1", "--port", "30000", *SPEC, "--speculative-num-steps", "1",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "16", "--mem-fraction-static", "0.8",
            "--trust-remote-code", "--tp", "1"]


@pytest.fixture
def flags(run_probe: Callable[..., ProbeRun], sglang_trees: Callable[[str], Path]) -> Callable[..., dict[str, Any]]:
    def check(version: str, argv: list[str]) -> dict[str, Any]:
        run = run_probe("sglang_flags", {"argv": argv, "sys_path": [str(sglang_trees(version))]})
        result = run.result
        PROBES["sglang_flags"][1].model_validate(result)  # the orchestrator's model reads it
        assert result["version"] == version and result["route"] == "static"  # no SGLang deps here: static decided
        assert "import sglang.srt.server_args failed" in result["runtime_note"]
        return result
    return check


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_flagship_flags_pass_with_the_topk1_adjustment(flags, version: str) -> None:
    result = flags(version, FLAGSHIP)
    assert result["ok"] and result["exit_code"] == 0 and result["errors"] == []
    [adjusted] = result["adjustments"]
    assert (adjusted["field"], adjusted["requested"], adjusted["effective"]) == ("speculative_num_draft_tokens", 16, 2)
    assert adjusted["message"] == ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                                   "speculative_eagle_topk == 1")


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_unknown_flag_is_argparses_own_message(flags, version: str) -> None:
    result = flags(version, ["--model-path", "/m", "--speculative-algorithim", "EAGLE3"])
    assert not result["ok"] and result["exit_code"] == 2
    [error] = result["errors"]
    assert error["kind"] == "unknown_flag"
    assert error["message"] == "sglang serve: error: unrecognized arguments: --speculative-algorithim EAGLE3"


def test_cuda_graph_max_bs_is_ambiguous_on_0523_only(flags) -> None:
    argv = ["--model-path", "/m", "--cuda-graph-max-bs", "8"]
    assert flags("0.5.12.post1", argv)["ok"]
    result = flags("0.5.23", argv)
    assert result["exit_code"] == 2 and result["layout"] == "fields"
    assert result["errors"][0]["kind"] == "ambiguous_flag"
    assert result["errors"][0]["message"] == ("sglang serve: error: ambiguous option: --cuda-graph-max-bs could "
                                              "match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill")
    # and the other way round: 0.5.12.post1 has no -decode spelling
    refused = flags("0.5.12.post1", ["--model-path", "/m", "--cuda-graph-max-bs-decode", "8"])
    assert refused["errors"][0]["message"] == \
        "sglang serve: error: unrecognized arguments: --cuda-graph-max-bs-decode 8"


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_values_and_required_flags_are_checked_as_argparse_does(flags, version: str) -> None:
    bad = flags(version, ["--model-path", "/m", "--speculative-num-steps", "two"])
    assert bad["errors"][0] == {"kind": "invalid_flag", "exception": "SystemExit", "where": "argparse", "detail": "",
                                "message": "sglang serve: error: argument --speculative-num-steps: invalid int "
                                           "value: 'two'"}
    missing = flags(version, ["--port", "1"])
    assert missing["errors"][0]["message"].startswith("sglang serve: error: the following arguments are required: "
                                                      "--model-path")
    # argparse's abbreviations are SGLang's too: --mem-frac is --mem-fraction-static, -- a unique prefix
    assert flags(version, ["--model", "/m", "--mem-frac", "0.7"])["ok"]


# Where each version really raises, per rule (read from the trees when this was written; the probe finds them again)
CITED = {
    "0.5.12.post1": {"steps_without_topk": "srt/server_args.py:3838", "topk_without_steps": "srt/server_args.py:3808",
                     "unknown_algorithm": "srt/speculative/spec_info.py:54"},
    "0.5.23": {"steps_without_topk": "srt/arg_groups/speculative_hook.py:1274",
               "topk_without_steps": "srt/arg_groups/speculative_hook.py:1160",
               "unknown_algorithm": "srt/speculative/spec_info.py:65"},
}


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_steps_without_topk_crashes_in_both_versions(flags, sglang_trees, version: str) -> None:
    result = flags(version, ["--model-path", "/m", *SPEC, "--speculative-num-steps", "3"])
    assert not result["ok"] and result["exit_code"] == 1
    [error] = result["errors"]
    assert (error["kind"], error["exception"]) == ("steps_without_topk", "TypeError")
    assert error["message"] == "'>' not supported between instances of 'NoneType' and 'int'"
    assert error["where"] == CITED[version]["steps_without_topk"]
    _assert_line_says(sglang_trees(version), error["where"], "speculative_eagle_topk > 1")


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_topk_without_steps_is_a_bare_assertion(flags, sglang_trees, version: str) -> None:
    result = flags(version, ["--model-path", "/m", *SPEC, "--speculative-eagle-topk", "4"])
    [error] = result["errors"]
    assert (error["kind"], error["exception"], error["message"]) == ("topk_without_steps", "AssertionError", "")
    assert error["where"] == CITED[version]["topk_without_steps"]
    _assert_line_says(sglang_trees(version), error["where"], "assert (")


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_unknown_algorithm_and_nextn(flags, sglang_trees, version: str) -> None:
    result = flags(version, ["--model-path", "/m", "--speculative-algorithm", "medusa"])
    [error] = result["errors"]
    assert (error["exception"], error["message"]) == ("ValueError", "Unknown speculative algorithm name: MEDUSA")
    assert error["where"] == CITED[version]["unknown_algorithm"]
    _assert_line_says(sglang_trees(version), error["where"], "Unknown speculative algorithm name")
    # NEXTN is EAGLE in both (0.5.12.post1 maps it before from_string, 0.5.23 inside it): its rules apply
    nextn = flags(version, ["--model-path", "/m", "--speculative-algorithm", "nextn", "--speculative-num-steps", "2"])
    assert nextn["errors"][0]["kind"] == "steps_without_topk"


def test_anchors_match_the_cited_lines_in_the_comments(sglang_trees) -> None:
    # The rules' comments cite file:line; the anchors must still find exactly those lines in both trees.
    from remote_probes.engine.sglang_argparse import ANCHORS, detect_layout, where

    for version in SGLANG_VERSIONS:
        root = str(sglang_trees(version) / "sglang")
        layout = detect_layout(root)
        for rule in ANCHORS:
            assert not where(root, layout, rule).endswith(":?"), (version, rule)
        assert where(root, layout, "draft_tokens_adjusted") == {
            "0.5.12.post1": "srt/server_args.py:3829", "0.5.23": "srt/arg_groups/speculative_hook.py:1256"}[version]


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_the_static_check_imports_nothing_heavy(run_probe: Callable[..., ProbeRun], sglang_trees: Callable[[str], Path],
                                                version: str) -> None:
    """What keeps the check to seconds (bench/preflight.py has the figures): the static route parses SGLang's source
    and imports neither sglang.srt nor torch, numpy or transformers (Python's own import log says what it loaded)."""
    run = run_probe("sglang_flags", {"argv": ["--model-path", "/m", "--no-such-flag"],
                                     "sys_path": [str(sglang_trees(version))]}, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert run.result["exit_code"] == 2 and run.result["route"] == "static"
    imported = {line.rsplit("|", 1)[-1].strip() for line in run.proc.stderr.splitlines() if line.startswith("import time:")}
    assert len(imported) > 10, "the import log was not captured"
    heavy = sorted(m for m in imported if m.split(".")[0] in ("torch", "numpy", "transformers")
                   or m.startswith("sglang.srt"))
    assert heavy == [], heavy


def _assert_line_says(tree: Path, where: str, text: str) -> None:
    path, line = where.rsplit(":", 1)
    lines = (tree / "sglang" / path).read_text().splitlines()
    assert text in lines[int(line) - 1], f"{where} no longer says {text!r}: {lines[int(line) - 1]!r}"
