"""Issue 40: the traffic file as users' logs hold it — three line shapes, categories, sampling settings — with
file:line:col for every line that is not a request, and acceptance per group that stays inside its range."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.errors import UserInputError
from orchestrator.traffic.acceptance import MIN_REQUESTS, below_best, groups, traffic_acceptance
from orchestrator.traffic.requests import CHAT_PATH, COMPLETION_PATH, load_traffic


def write(tmp_path: Path, *lines: object) -> Path:
    path = tmp_path / "traffic.jsonl"
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def test_the_three_shapes_of_a_line(tmp_path: Path) -> None:
    path = write(tmp_path,
                 "# exported 2026-12-01",
                 {"messages": [{"role": "user", "content": "hi"}], "temperature": 0.6, "top_p": 0.95,
                  "category": "chat", "model": "prod"},
                 "",
                 {"custom_id": "a", "method": "POST", "url": COMPLETION_PATH,
                  "body": {"prompt": "def f(", "max_tokens": 16, "metadata": {"category": "code"}}},
                 {"request": {"messages": [{"role": "user", "content": "x"}],
                              "chat_template_kwargs": {"enable_thinking": False}}, "response": {"id": "r"}})
    chat, batch, logged = load_traffic(path)
    assert (chat.line, chat.kind, chat.path, chat.category) == (2, "chat", CHAT_PATH, "chat")
    assert chat.sampling == "temperature=0.6 top_p=0.95"
    assert (batch.line, batch.kind, batch.category, batch.sampling) == (4, "completion", "code", "server defaults")
    assert logged.category == "uncategorized" and logged.sampling == 'chat_template_kwargs={"enable_thinking": false}'
    sent = chat.sent("served", 64)
    assert sent["model"] == "served" and sent["stream"] is False and sent["max_tokens"] == 64
    assert sent["top_p"] == 0.95 and "category" not in sent
    assert batch.sent(None, 64)["max_tokens"] == 16  # as written
    assert "content" not in json.dumps(chat.public()) and "hi" not in json.dumps(chat.public())


@pytest.mark.parametrize(("line", "where", "said"), [
    ('{"prompt": "a",', ":1:16", "not JSON"),
    ('[1, 2]', ":1:1", "a JSON object"),
    ('{"temperature": 0}', ":1:1", "needs either messages"),
    ('{"prompt": "a", "messages": [{"role": "user", "content": "b"}]}', ":1:1", "not both"),
    ('{"prompt": ""}', ":1:1", "non-empty string"),
    ('{"messages": []}', ":1:1", "non-empty list"),
    ('{"prompt": "a", "temperature": "hot"}', ":1:1", "temperature must be a number"),
    ('{"prompt": "a", "max_tokens": 0}', ":1:1", "max_tokens must be a positive integer"),
    ('{"prompt": "a", "category": 3}', ":1:1", "category must be a non-empty string"),
    ('{"url": "/v1/embeddings", "body": {"prompt": "a"}}', ":1:1", "replays"),
    ('{"url": "/v1/chat/completions", "body": {"prompt": "a"}}', ":1:1", "does not take a prompt"),
])
def test_a_line_that_is_not_a_request_is_named_by_its_place(tmp_path: Path, line: str, where: str,
                                                             said: str) -> None:
    path = write(tmp_path, line)
    with pytest.raises(UserInputError) as caught:
        load_traffic(path)
    assert f"{path}{where}" in str(caught.value) and said in str(caught.value)


def test_a_missing_or_empty_file_is_said(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="cannot read"):
        load_traffic(tmp_path / "none.jsonl")
    with pytest.raises(UserInputError, match="holds no request"):
        load_traffic(write(tmp_path, "# nothing"))


def test_a_sample_is_the_same_every_run_and_in_file_order(tmp_path: Path) -> None:
    path = write(tmp_path, *({"prompt": f"p{i}"} for i in range(40)))
    first, again = load_traffic(path, sample=7), load_traffic(path, sample=7)
    assert [r.line for r in first] == [r.line for r in again] == sorted(r.line for r in first)
    assert len(first) == 7 and len(load_traffic(path, sample=100)) == 40


def test_groups_say_too_few_and_name_those_below_the_best_only_when_apart() -> None:
    rows = ([{"category": "code", "sampling": "greedy", "accept_length": a} for a in (3.0, 3.2, 3.4, 3.1)]
            + [{"category": "de", "sampling": "greedy", "accept_length": a} for a in (1.2, 1.3, 1.1, 1.25)]
            + [{"category": "few", "sampling": "t", "accept_length": 1.0}])
    table = traffic_acceptance(rows, [{"category": "gone", "sampling": "t", "error": "HTTP 400: no"}])
    by = {e["category"]: e for e in table["by_category"]}
    assert by["few"]["too_few"] and by["few"]["accept_length_ci"] is None
    assert by["gone"] == {**by["gone"], "requests": 1, "measured": 0, "failed": 1, "error": "HTTP 400: no"}
    apart = table["below_best_category"]
    assert apart["best"]["category"] == "code" and [e["category"] for e in apart["below"]] == ["de"]
    overlapping = [{"category": c, "accept_length": a} for c, a in
                   (("a", 2.0), ("a", 3.0), ("a", 2.5), ("b", 2.2), ("b", 2.9), ("b", 2.6))]
    assert below_best(groups(overlapping, "category"), "category") is None
    # two groups both below the best are both named, the lower first
    three = overlapping + [{"category": "c", "accept_length": a} for a in (4.0, 4.1, 4.2)]
    [first, second] = below_best(groups(three, "category"), "category")["below"]
    assert (first["category"], second["category"]) == ("a", "b")


def test_each_group_gives_its_prompts_mean_length_from_its_measured_requests() -> None:
    rows = ([{"category": "short", "accept_length": a, "prompt_tokens": n} for a, n in ((3.8, 40), (3.6, 42), (3.9, 38))]
            + [{"category": "long", "accept_length": a, "prompt_tokens": n} for a, n in ((2.4, 600), (2.5, 610), (2.3, 590))]
            # a request the server did not measure, and a length the server did not say (0), count in no length
            + [{"category": "long", "accept_length": None, "prompt_tokens": 5000},
               {"category": "long", "accept_length": 2.4, "prompt_tokens": 0}])
    table = traffic_acceptance(rows)
    by = {e["category"]: e for e in table["by_category"]}
    assert by["short"]["prompt_tokens"] == 40.0 and by["long"]["prompt_tokens"] == 600.0
    lo, hi = by["long"]["prompt_tokens_ci"]
    assert 1.0 <= lo < 600.0 < hi and by["short"]["prompt_tokens_ci"][1] < lo
    below = table["below_best_category"]["below"][0]
    assert below["category"] == "long" and below["prompt_tokens_ci"] == by["long"]["prompt_tokens_ci"]
    # fewer than MIN_REQUESTS lengths: a mean, no interval
    [few] = groups([{"category": "c", "accept_length": 2.0, "prompt_tokens": 9}], "category")
    assert few["prompt_tokens"] == 9.0 and few["prompt_tokens_ci"] is None


@given(st.lists(st.floats(min_value=1.0, max_value=16.0), min_size=MIN_REQUESTS, max_size=40))
def test_an_accept_length_interval_never_leaves_its_range(values: list[float]) -> None:
    [entry] = groups([{"category": "c", "accept_length": v} for v in values], "category")
    lo, hi = entry["accept_length_ci"]
    assert 1.0 <= lo <= hi and lo <= entry["accept_length"] + 1e-9 and entry["accept_length"] <= hi + 1e-9


def test_a_replay_reconciles_group_by_group_with_its_offline_prediction(tmp_path: Path) -> None:
    """orchestrator/traffic/reconciled.py: each measured group beside the same group predicted offline; a group
    whose intervals are disjoint is a discrepancy; the penalised-draft counterfactual is paired per request."""
    from orchestrator.traffic.acceptance import traffic_acceptance
    from orchestrator.traffic.reconciled import reconcile_traffic

    path = tmp_path / "t.jsonl"
    lines = [{"prompt": f"p{i}", "temperature": 0, "category": "code"} for i in range(4)]
    lines += [{"prompt": f"q{i}", "temperature": 0, "frequency_penalty": 1, "category": "code"} for i in range(4)]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    requests = load_traffic(path)
    measured = [3.0, 3.2, 2.8, 3.1, 1.8, 1.9, 1.7, 1.8]
    rows = [{**r.public(), "accept_length": a} for r, a in zip(requests, measured, strict=True)]
    bench = {"traffic": traffic_acceptance(rows)}
    same = [{"index": i, "accept_length": a, **({"draft_penalised": a + 0.3} if i >= 4 else {})}
            for i, a in enumerate(measured)]
    rc = reconcile_traffic(same, [], requests, bench)
    assert rc["decision"] == "reconciled" and all(r["disjoint"] is False for r in rc["by_sampling"]), rc
    [cf] = rc["draft_penalised"]
    assert cf["sampling"] == "temperature=0 frequency_penalty=1" and cf["requests"] == 4
    assert cf["gain_ci"][0] > 1.0 and cf["draft_penalised"] == pytest.approx(2.1), cf
    higher = [{"index": i, "accept_length": a + (1.0 if i >= 4 else 0.0)} for i, a in enumerate(measured)]
    off = reconcile_traffic(higher, [{"index": 8, "reason": "samples"}], requests, bench)
    assert off["decision"] == "discrepancy" and "temperature=0 frequency_penalty=1" in off["verdict"], off
    assert off["skipped"] == 1 and "1 request(s) not replayed offline (samples)" in off["verdict"]
    # a group the server refused (a min_p on a speculative vLLM) carries the server's reason beside the prediction
    refused = {"traffic": traffic_acceptance(rows, [{"category": "code", "sampling": "temperature=0.8 min_p=0.1",
                                                     "error": "HTTP 400: not yet supported"}])}
    rc = reconcile_traffic(same, [{"index": 8, "reason": "min_p"}], requests, refused)
    [row] = [r for r in rc["by_sampling"] if r["sampling"] == "temperature=0.8 min_p=0.1"]
    assert row["failed"] == 1 and row["measured_requests"] == 0 and row["error"] == "HTTP 400: not yet supported"
    assert row["disjoint"] is None


def test_a_longer_category_is_cut_to_the_best_ones_length_and_paired_offline(tmp_path: Path) -> None:
    """acceptance.py ``longer_than_best``: the categories below the best whose prompts are longer, each with the best
    one's mean length to cut them to; reconciled.py ``cut_to_length``: the cut requests beside the whole ones, paired."""
    from orchestrator.traffic.acceptance import longer_than_best, traffic_acceptance
    from orchestrator.traffic.reconciled import reconcile_traffic, traffic_lines

    path = tmp_path / "t.jsonl"
    lines = [{"prompt": f"s{i}", "temperature": 0, "category": "short"} for i in range(4)]
    lines += [{"prompt": f"l{i}", "temperature": 0, "category": "long"} for i in range(4)]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    requests = load_traffic(path)
    measured = [3.8, 3.6, 3.9, 3.7, 2.3, 2.5, 2.2, 2.4]
    lengths = [40, 41, 39, 40, 600, 610, 590, 600]
    rows = [{**r.public(), "accept_length": a, "prompt_tokens": n}
            for r, a, n in zip(requests, measured, lengths, strict=True)]
    table = traffic_acceptance(rows)
    [cut] = longer_than_best(table["below_best_category"])
    assert cut["category"] == "long" and cut["keep_last"] == 40
    # shorter, or overlapping in length, or no lengths: nothing to cut
    assert longer_than_best(None) == []
    flipped = traffic_acceptance([{**r, "prompt_tokens": 1000 - r["prompt_tokens"]} for r in rows])
    assert longer_than_best(flipped["below_best_category"]) == []
    assert longer_than_best(traffic_acceptance([{k: v for k, v in r.items() if k != "prompt_tokens"}
                                                for r in rows])["below_best_category"]) == []
    per_request = [{"index": i, "accept_length": a, **({"cut_accept_length": a + 1.2, "cut_prompt_tokens": 40}
                                                       if i >= 4 else {})} for i, a in enumerate(measured)]
    rc = reconcile_traffic(per_request, [], requests, {"traffic": table})
    [row] = rc["cut_to_length"]
    assert row["category"] == "long" and row["requests"] == 4 and row["kept_tokens"] == 40
    assert row["cut"] == pytest.approx(3.55) and row["served"] == pytest.approx(2.35)
    assert row["gain_ci"][0] > 1.0 and row["cut_ci"][0] > row["served_ci"][1], row
    assert any("long: prompts cut to their last 40 tokens 3.55" in line for line in traffic_lines("fixed", rc))


def _bins(counts: dict[int, tuple[int, int]]) -> list[list[int]]:
    from remote_probes.evaluation.confidence_match import BIN_EDGES

    return [list(counts.get(b, (0, 0))) for b in range(len(BIN_EDGES) - 1)]


def test_a_category_below_the_best_is_matched_with_it_by_the_targets_confidence(tmp_path: Path) -> None:
    """reconciled.py ``confidence_matched``: each request of a category below the best weighted by the best
    category's first-proposal rate in the bin of each of its tokens (expected), against what the draft got right
    (observed); the ratio's interval runs over the category's requests. A draft that misses the category where the
    target is as sure sits below 1; a category whose tokens the target is less sure of, drafted as well as the best
    category's tokens of that confidence, sits at 1."""
    from orchestrator.traffic.acceptance import traffic_acceptance
    from orchestrator.traffic.reconciled import confidence_matched, reconcile_traffic, traffic_lines

    path = tmp_path / "t.jsonl"
    lines = [{"prompt": f"c{i}", "temperature": 0, "category": "code"} for i in range(4)]
    lines += [{"prompt": f"r{i}", "temperature": 0, "category": "rot13"} for i in range(4)]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    requests = load_traffic(path)
    table = traffic_acceptance([{**r.public(), "accept_length": a} for r, a in
                                zip(requests, [4.0, 4.2, 3.9, 4.1, 1.2, 1.3, 1.25, 1.1], strict=True)])
    apart = table["below_best_category"]
    assert apart["best"]["category"] == "code"
    # code: bin 8 (p >= .97) right 9 of 10, bin 1 (.05 <= p < .1) right 2 of 10
    code = {"bins": _bins({8: (9, 10), 1: (2, 10)}), "target_probability": 0.5}
    missed = [{"bins": _bins({8: (2 + i % 2, 10), 1: (0, 10)}), "target_probability": 0.5} for i in range(4)]
    per_request = [{"index": i, "accept_length": 4.0, "first_step": code} for i in range(4)]
    per_request += [{"index": 4 + i, "accept_length": 1.2, "first_step": m} for i, m in enumerate(missed)]
    [row] = confidence_matched(per_request, requests, apart)
    assert row["category"] == "rot13" and row["best"] == "code" and row["requests"] == 4
    assert row["expected"] == pytest.approx(0.55) and row["first_step"] == pytest.approx(0.125)
    assert row["ratio"] == pytest.approx(0.125 / 0.55, abs=1e-3) and row["ratio_ci"][1] < 1.0, row
    # a harder text drafted as well at the same confidence: most of its tokens in the low bin, the ratio at 1
    harder = [{"bins": _bins({8: (9, 10), 1: (8 + i % 3, 40)}), "target_probability": 0.2 + 0.01 * i}
              for i in range(4)]
    per_request[4:] = [{"index": 4 + i, "accept_length": 1.5, "first_step": h} for i, h in enumerate(harder)]
    [row] = confidence_matched(per_request, requests, apart)
    assert row["ratio_ci"][0] <= 1.0 <= row["ratio_ci"][1], row
    assert row["target_probability_ci"][1] < 0.5 == row["best_target_probability"], row
    # a token in a bin the best category has none of is left out, and said
    per_request[4] = {"index": 4, "accept_length": 1.5, "first_step": {"bins": _bins({8: (9, 10), 3: (1, 5)}),
                                                                       "target_probability": 0.2}}
    assert confidence_matched(per_request, requests, apart)[0]["unmatched_tokens"] == 5
    assert confidence_matched(per_request, requests, None) == []
    rc = reconcile_traffic(per_request, [], requests, {"traffic": table})
    assert rc["confidence_matched"][0]["category"] == "rot13"
    assert any(line.startswith("  rot13: the draft's first proposal right ") for line in traffic_lines("fixed", rc))


def test_a_chat_categorys_requests_without_their_template_are_paired_with_the_templated_ones(tmp_path: Path) -> None:
    """reconciled.py ``without_template``: per category, the requests replayed without their chat template beside
    the templated ones, paired; a request replayed only once is left out."""
    from orchestrator.traffic.reconciled import reconcile_traffic, traffic_lines, without_template

    path = tmp_path / "t.jsonl"
    lines = [{"prompt": f"c{i}", "temperature": 0, "category": "code"} for i in range(4)]
    lines += [{"messages": [{"role": "user", "content": f"m{i}"}], "temperature": 0, "category": "chat"}
              for i in range(4)]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    requests = load_traffic(path)
    per_request = [{"index": i, "accept_length": 4.0 + 0.1 * i} for i in range(4)]
    per_request += [{"index": 4 + i, "accept_length": 2.0 + 0.1 * i, "untemplated_accept_length": 4.0 + 0.15 * i,
                     "untemplated_prompt_tokens": 9} for i in range(4)]
    [row] = without_template(per_request, requests)
    assert row["category"] == "chat" and row["requests"] == 4
    assert row["served"] == pytest.approx(2.15) and row["untemplated"] == pytest.approx(4.225)
    assert row["gain_ci"][0] > 1.0, row
    rc = reconcile_traffic(per_request, [], requests, {"traffic": {}})
    assert rc["without_template"] == [row]
    assert any(line.startswith("  chat: without the chat template 4.22") for line in traffic_lines("fixed", rc))


def test_a_chat_categorys_requests_with_thinking_off_are_paired_with_the_thinking_ones(tmp_path: Path) -> None:
    """reconciled.py ``thinking_off``: per category, the requests replayed with the template's thinking switched
    off beside the thinking ones, paired, the switch named; a category whose template has no switch has no row."""
    from orchestrator.traffic.reconciled import reconcile_traffic, thinking_off, traffic_lines

    path = tmp_path / "t.jsonl"
    lines = [{"messages": [{"role": "user", "content": f"m{i}"}], "temperature": 0, "category": "chat"}
             for i in range(4)]
    lines += [{"messages": [{"role": "user", "content": f"s{i}"}], "temperature": 0, "category": "plain"}
              for i in range(2)]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    requests = load_traffic(path)
    per_request = [{"index": i, "accept_length": 2.0 + 0.1 * i, "thinking_switch": "thinking",
                    "thinking_off_accept_length": 3.0 + 0.1 * i, "thinking_off_prompt_tokens": 7} for i in range(4)]
    per_request += [{"index": 4 + i, "accept_length": 2.0} for i in range(2)]
    [row] = thinking_off(per_request, requests)
    assert row["category"] == "chat" and row["switch"] == "thinking" and row["requests"] == 4
    assert row["served"] == pytest.approx(2.15) and row["thinking_off"] == pytest.approx(3.15)
    assert row["gain_ci"][0] > 1.0, row
    rc = reconcile_traffic(per_request, [], requests, {"traffic": {}})
    assert rc["thinking_off"] == [row]
    assert any(line.startswith("  chat: with thinking: false 3.15") for line in traffic_lines("fixed", rc))
