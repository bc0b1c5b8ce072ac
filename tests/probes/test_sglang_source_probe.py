"""sglang_source against real sglang trees: 0.5.12.post1 (eagle_worker.py) and 0.5.23 (eagle_worker_v2.py)."""

from __future__ import annotations

import pytest

from orchestrator.probes import parse_result
from orchestrator.probes.models import SglangSourceResult

pytestmark = pytest.mark.sglang_source

OLD, NEW = "0.5.12.post1", "0.5.23"
WORKER = "srt/speculative/eagle_worker.py"


def _source(run_probe, sglang_trees, version: str, reads: list[dict]) -> SglangSourceResult:
    run = run_probe("sglang_source", {"package": "sglang", "sys_path": [str(sglang_trees(version))], "reads": reads})
    assert run.proc.returncode == 0, run.outcome.error
    result = parse_result("sglang_source", run.outcome)
    assert isinstance(result, SglangSourceResult)
    assert result.version == version
    assert result.root == str((sglang_trees(version) / "sglang").resolve())
    return result


def test_seed_range_on_0_5_12(run_probe, sglang_trees):
    res = _source(run_probe, sglang_trees, OLD, [
        {"file": WORKER, "lines": "155,200", "expect": {"contains": "get_embed_and_head"}},
        {"file": "sglang/" + WORKER, "lines": "155,+45"},
    ])
    first, second = res.reads
    assert first.error is None and (first.start, first.end) == (155, 200)
    assert [n for n, _ in first.lines] == list(range(155, 201))
    text = "\n".join(t for _, t in first.lines)
    assert "get_embed_and_head()" in text and "set_embed_and_head" in text
    assert first.expect is not None and first.expect.passed
    assert second.lines == first.lines  # "155,+45" is the same range, and the package prefix is accepted
    assert first.total_lines == 1316


def test_regex_ranges_last_line_and_expect_failures(run_probe, sglang_trees):
    res = _source(run_probe, sglang_trees, OLD, [
        {"file": WORKER, "lines": r"/get_embed_and_head\(\)/,/hot_token_id = /"},
        {"file": WORKER, "lines": "$"},
        {"file": WORKER, "lines": "1310,$"},
        {"file": WORKER, "lines": "/def forward_batch_generation/,+2"},
        {"file": WORKER, "lines": "155,200", "expect": {"not_contains": "get_embed_and_head"}},
        {"file": WORKER, "lines": "155,200", "expect": {"regex": r"^\s+embed, head = "}},
    ])
    regex, last, tail, plus, neg, rx = res.reads
    assert regex.start == 177 and "get_embed_and_head" in regex.lines[0][1]
    assert "hot_token_id = " in regex.lines[-1][1] and regex.end > regex.start
    assert (last.start, last.end) == (1316, 1316)
    assert (tail.start, tail.end) == (1310, 1316) and len(tail.lines) == 7
    assert plus.lines[0][1].lstrip().startswith("def forward_batch_generation") and len(plus.lines) == 3
    assert neg.expect is not None and not neg.expect.passed
    assert rx.expect is not None and rx.expect.passed


def test_symbol_and_pattern_on_both_versions(run_probe, sglang_trees):
    old = _source(run_probe, sglang_trees, OLD, [
        {"symbol": "EAGLEWorker.__init__", "file": WORKER},
        {"symbol": "EAGLEWorker.__init__"},  # whole package
    ])
    by_file, anywhere = old.reads
    assert by_file.symbol == "EAGLEWorker.__init__" and by_file.start < 177 < by_file.end
    assert any("get_embed_and_head()" in t for _, t in by_file.lines)
    assert anywhere.matches and anywhere.matches[0].file == WORKER
    assert anywhere.matches[0].start == by_file.start

    new = _source(run_probe, sglang_trees, NEW, [
        {"symbol": "_resolve_shared_embed_and_head"},
        {"symbol": "EagleDraftWorker.init_lm_head", "file": "srt/speculative/eagle_worker_v2.py",
         "expect": {"contains": "set_embed_and_head"}},
        {"pattern": r"get_embed_and_head\(\)", "file": "srt/speculative/pp_draft_embedding.py", "context": 2},
        {"pattern": "get_embed_and_head", "max_matches": 3},
    ])
    resolve, lm_head, pattern, capped = new.reads
    assert resolve.matches and resolve.matches[0].symbol == "EagleDraftWorker._resolve_shared_embed_and_head"
    assert resolve.file == "srt/speculative/eagle_worker_v2.py"
    assert lm_head.error is None and lm_head.expect is not None and lm_head.expect.passed
    assert "def init_lm_head" in lm_head.lines[0][1]
    hunk = pattern.matches[0]
    assert all("get_embed_and_head()" in pattern_line for n, pattern_line in hunk.lines if n in hunk.match_lines)
    assert hunk.start == hunk.match_lines[0] - 2
    assert sum(len(m.match_lines) for m in capped.matches) == 3 and capped.truncated


def test_missing_code_is_not_found_and_broken_reads_are_errors(run_probe, sglang_trees):
    """What a version lacks is ``not_found`` (a fact, named with the version); a broken read is an ``error``."""
    res = _source(run_probe, sglang_trees, NEW, [
        {"file": WORKER, "lines": "155,200", "expect": {"contains": "get_embed_and_head"}},
        {"file": "srt/speculative/eagle_worker_v2.py", "pattern": "([unclosed"},
        {"file": "srt/speculative/eagle_worker_v2.py", "symbol": "EagleDraftWorker.init_lm_hed"},
        {"file": "srt/speculative/eagle_worker_v2.py", "lines": "99999,+1"},
        {"file": "srt/speculative/eagle_worker_v2.py", "lines": "abc"},
        {"file": "srt/speculative/eagle_worker_v2.py", "lines": "1,2"},
        {"file": "srt/speculative/eagle_worker_v2.py", "lines": "5,2"},
    ])
    missing, bad_regex, no_symbol, past_end, bad_lines, fine, reversed_range = res.reads
    assert missing.not_found is not None and missing.not_found.kind == "file_not_found" and missing.error is None
    assert missing.not_found.message.startswith(f"not found in sglang {NEW}: {WORKER} does not exist")
    successors = missing.not_found.model_extra["successors"]
    assert "srt/speculative/eagle_worker_v2.py" in successors
    assert "srt/speculative/eagle_worker_common.py" in successors
    assert missing.expect is not None and not missing.expect.passed and not missing.found
    assert bad_regex.error is not None and bad_regex.error.kind == "bad_regex" and bad_regex.not_found is None
    assert no_symbol.not_found is not None and no_symbol.not_found.kind == "symbol_not_found"
    assert "EagleDraftWorker.init_lm_head" in no_symbol.not_found.model_extra["similar"]
    assert past_end.not_found is not None and past_end.not_found.kind == "out_of_range"
    assert bad_lines.error is not None and bad_lines.error.kind == "bad_lines"
    assert fine.error is None and fine.found and [n for n, _ in fine.lines] == [1, 2]
    assert reversed_range.error is not None and reversed_range.error.kind == "bad_lines"  # a mistake, not a fact


def test_under_limits_a_search_to_a_directory(run_probe, sglang_trees):
    res = _source(run_probe, sglang_trees, OLD, [
        {"under": "srt/speculative", "pattern": r"get_embed_and_head\(\)", "context": 0},
        {"under": "sglang/srt/speculative/", "symbol": "EagleDraftWorker.init_lm_head"},
        {"under": "srt/arg_groups", "pattern": "adjusted to speculative_num_steps"},
        {"under": "srt/speculative", "pattern": "zzz_no_such_line_zzz"},
        {"under": "../etc", "pattern": "x"},
        {"under": "srt/no_such_dir", "symbol": "A.b"},
    ])
    grep, symbol, no_hook, no_line, escape, no_dir = res.reads
    files = {m.file for m in grep.matches or []}
    assert files and all(f.startswith("srt/speculative/") for f in files)  # never srt/models/gemma3_mm.py
    assert {"srt/speculative/eagle_worker.py", "srt/speculative/eagle_worker_v2.py"} <= files
    assert symbol.found and symbol.file == "srt/speculative/eagle_worker_v2.py" and symbol.start == 212
    # 0.5.12.post1 has srt/arg_groups, but its speculative flags are still resolved in server_args.py
    assert no_hook.not_found is not None and no_hook.not_found.kind == "no_match" and not no_hook.found
    assert no_hook.not_found.message.startswith(f"not found in sglang {OLD}: no line matches ")
    assert no_hook.not_found.message.endswith(" in srt/arg_groups/")
    assert no_dir.not_found is not None and no_dir.not_found.kind == "dir_not_found"
    assert no_dir.not_found.message.startswith(f"not found in sglang {OLD}: srt/no_such_dir/ does not exist")
    assert no_line.not_found is not None and no_line.not_found.kind == "no_match" and not no_line.found
    assert "srt/speculative/" in no_line.not_found.message
    assert escape.error is not None and escape.error.kind == "bad_read"


def test_any_of_takes_the_first_alternative_that_finds_something(run_probe, sglang_trees):
    topk = {"id": "topk", "pattern": r"adjusted to speculative_num_steps \+ 1", "context": 1,
            "any_of": [{"under": "srt/arg_groups"}, {"file": "srt/server_args.py"}], "expect": {"contains": "topk"}}
    nothing = {"id": "none", "under": "srt/speculative", "expect": {"contains": "x"},
               "any_of": [{"symbol": "NoSuchWorker.init"}, {"file": WORKER, "pattern": "no such line at all"}]}
    broken = {"id": "broken", "any_of": [{"file": WORKER, "pattern": "([bad"}, {"file": WORKER, "lines": "1"}]}
    for version, file, alternative in ((OLD, "srt/server_args.py", 1), (NEW, "srt/arg_groups/speculative_hook.py", 0)):
        res = _source(run_probe, sglang_trees, version, [topk, nothing, broken])
        found, missed, error = res.reads
        assert found.found and found.file == file and found.alternative == alternative
        assert found.under is None or found.alternative == 0  # the winner's own address, not the shared keys
        assert [t.alternative for t in found.tried or []] == list(range(alternative))
        assert found.expect is not None and found.expect.passed
        assert not missed.found and missed.not_found is not None and missed.not_found.kind == "not_found"
        assert missed.not_found.message.startswith(f"not found in sglang {version}: (1) no class or function")
        assert "(2) " in missed.not_found.message and [t.alternative for t in missed.tried or []] == [0, 1]
        assert missed.expect is not None and not missed.expect.passed
        # a broken alternative is never skipped over as if the version lacked it
        assert error.error is not None and error.error.kind == "bad_regex" and not error.found


def test_unknown_package_says_where_it_looked(run_probe, tmp_path):
    run = run_probe("sglang_source", {"package": "surely_not_installed_pkg", "sys_path": [str(tmp_path)],
                                      "reads": [{"file": "x.py", "lines": "1"}]})
    assert run.proc.returncode == 3
    assert run.outcome.error is not None and run.outcome.error.kind == "package_not_found"
    assert str(tmp_path) in run.outcome.error.details["sys_path"]


def test_any_package_without_importing_it(run_probe, tmp_path):
    """A package whose import would fail is still read: find_spec never runs its __init__."""
    pkg = tmp_path / "site" / "boompkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('imported!')\n")
    (pkg / "mod.py").write_text("class A:\n    def f(self):\n        return 1\n")
    dist = tmp_path / "site" / "boompkg-1.2.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: boompkg\nVersion: 1.2.3\n")
    run = run_probe("sglang_source", {"package": "boompkg", "sys_path": [str(tmp_path / "site")],
                                      "reads": [{"symbol": "A.f"}]})
    res = run.result
    assert res["version"] == "1.2.3"
    assert res["reads"][0]["lines"] == [[2, "    def f(self):"], [3, "        return 1"]]
