"""Issue 40: a traffic file of the user's own requests replayed by `bench` against the lab's vLLM stand-in, as
written (chat and completion bodies, each with its category and sampling), acceptance per category read from
vLLM's /metrics counters around each request, with intervals; the session keeps categories and figures, never a
prompt. The lab's models were trained on Python source only: English prose is a category it never saw."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.inventory import Inventory
from tests.servers.conftest import REPO, make_inventory, run_playbook
from tests.vllm_differential import length_traffic

pytestmark = [pytest.mark.lab, pytest.mark.slow]

TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")
SECRET = "the-user's-private-prompt-7d3f"
PROSE = ["Tell me about the history of the city of Lyon and its bridges.",
         "Write a short letter thanking a friend for a birthday present.",
         "What do people usually eat for breakfast in Norway?",
         "Describe the weather on a cold autumn morning by the sea.",
         "Why do leaves change colour in the autumn?",
         "Explain how a bicycle stays upright when it moves."]


def traffic_file(path: Path, penalised: bool = False) -> Path:
    """Greedy code completions, greedy chat (a batch-API line each), three sampled requests (one with a top_p, one
    with a min_p, which a speculative vLLM refuses);
    ``penalised``: the code
    prompts again with ``frequency_penalty: 1``."""
    code = [p["text"] for p in json.loads((REPO / "orchestrator/data/bench_prompts.json").read_text())["prompts"]
            if p["kind"].startswith("code")]
    lines = [{"prompt": text, "temperature": 0, "max_tokens": 32, "category": "python"} for text in code]
    if penalised:
        lines += [{"prompt": text, "temperature": 0, "max_tokens": 32, "category": "python",
                   "frequency_penalty": 1} for text in code]
    lines += [{"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions",
               "body": {"model": "prod-model", "messages": [{"role": "user", "content": text}], "temperature": 0,
                        "max_tokens": 32, "metadata": {"category": "prose"}}} for i, text in enumerate(PROSE)]
    lines.append({"request": {"messages": [{"role": "user", "content": SECRET}], "temperature": 0.7,
                              "max_tokens": 8}, "category": "sampled"})
    lines.append({"request": {"messages": [{"role": "user", "content": SECRET}], "temperature": 0.7, "top_p": 0.9,
                              "max_tokens": 8}, "category": "sampled"})
    lines.append({"request": {"messages": [{"role": "user", "content": SECRET}], "temperature": 0.7, "min_p": 0.1,
                              "max_tokens": 8}, "category": "sampled"})
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


@pytest.fixture
def vllm_inventory(state_dir: Path, lab_models: dict[str, str]) -> Inventory:
    inv = make_inventory(state_dir, **lab_models)
    inv.hosts["localhost"].vars["engine"] = "lab-vllm"
    inv.hosts["localhost"].env["PYTHONPATH"] = str(REPO)
    return inv


def test_a_traffic_file_is_replayed_as_written_and_read_per_category(vllm_inventory: Inventory,
                                                                     tmp_path: Path) -> None:
    traffic = traffic_file(tmp_path / "traffic.jsonl")
    template = tmp_path / "template.jinja"
    template.write_text(TEMPLATE)
    ran = run_playbook(f"""
name: traffic
steps:
  - server: {{name: v, model: "{{{{ target }}}}", ready_timeout: 180,
             flags: {{speculative-config: {{method: eagle3, model: "{{{{ draft }}}}", num_speculative_tokens: 5}},
                     lab-capture-layers: "0,6,11", chat-template: "{template}"}}}}
  - bench: {{server: v, traffic: "{traffic}"}}
    register: b
  - server: {{action: stop, name: v}}
""", vllm_inventory, tmp_path / "sessions")
    assert ran.status == "ok", [e.get("error") for e in ran.of_type("step_finished")]
    b = ran.result("s2")["result"]
    table = b["traffic"]
    assert table["requests"] == 14 and b["n"] == 14 and b["completed"] == 13
    groups = {e["category"]: e for e in table["by_category"]}
    assert list(groups) == ["python", "prose", "sampled"]
    for name, count in (("python", 5), ("prose", 6)):
        entry = groups[name]
        assert entry["requests"] == entry["measured"] == count and not entry["too_few"], entry
        lo, hi = entry["accept_length_ci"]
        assert 1.0 <= lo <= entry["accept_length"] <= hi, entry  # an accept length is at least 1
    # a request that samples is sampled (vLLM's rejection rule, its top_p cutting the target's distribution first);
    # one with a min_p is refused as a speculative vLLM refuses it, never served another way in its place
    assert groups["sampled"]["measured"] == 2 and groups["sampled"]["failed"] == 1
    assert "not yet supported with speculative decoding" in groups["sampled"]["error"], groups["sampled"]
    settings = {e["sampling"]: e for e in table["by_sampling"]}
    assert set(settings) == {"temperature=0", "temperature=0.7", "temperature=0.7 top_p=0.9",
                             "temperature=0.7 min_p=0.1"}
    assert settings["temperature=0.7 top_p=0.9"]["measured"] == 1
    # each request's row names its category and setting, and every answered one its accept length
    assert sorted(r["line"] for r in b["per_request"]) == list(range(1, 14))
    assert all(r["accept_length"] >= 1.0 for r in b["per_request"])
    # the console says it per category, the failed request with its reason
    said = "".join(e.get("text", "") for e in ran.of_type("output"))
    assert "bench v by category: python " in said and "prose " in said and "sampled" in said
    # the TUI's servers pane: the server's row carries the replay's categories (its acc/tok/s stay the bundled ones')
    from orchestrator.events import parse_event
    from orchestrator.tui.model import SessionModel

    model = SessionModel()
    for logged in ran.events:
        event = parse_event(logged)
        if event is not None:
            model.apply(event)
    [row] = [r for r in model.servers.values() if r.by_category]
    assert [(name, few) for name, _value, few, _tokens in row.by_category] == [("python", False), ("prose", False),
                                                                      ("sampled", True)]
    assert row.by_category[0][1] == groups["python"]["accept_length"]
    assert row.by_category[0][3] == groups["python"]["prompt_tokens"] > 0
    # the report shows the groups and the chart; no prompt text anywhere in the session
    report = (ran.directory / "report.md").read_text()
    assert "## Acceptance on your traffic" in report and "| v | prose | 6 / 6 |" in report
    assert (ran.directory / "artifacts" / "acceptance-traffic-by-category.svg").is_file()
    for path in ran.directory.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert SECRET not in text and PROSE[0] not in text, path
    # only when asked, and only printed: each request with the start of its prompt, read from the file now
    from typer.testing import CliRunner

    from orchestrator.cli import app

    printed = CliRunner().invoke(app, ["report", str(ran.directory), "--with-prompts"])
    assert printed.exit_code == 0, printed.output
    assert "### Your traffic on v, request by request" in printed.output and PROSE[0] in printed.output
    assert not [p for p in ran.directory.rglob("*") if p.is_file() and PROSE[0] in p.read_text(errors="replace")]


def sglang_inventory(state_dir: Path, lab_models: dict[str, str], tree: Path) -> Inventory:
    inv = make_inventory(state_dir, **lab_models)
    inv.hosts["localhost"].env["PYTHONPATH"] = f"{REPO}:{tree}"  # the stand-in speaks that SGLang's flags and API
    return inv


@pytest.mark.parametrize(("version", "measured"), [("0.5.23", True), ("0.5.12.post1", False)])
def test_the_sglang_stand_in_replays_traffic_as_its_version_answers(
        state_dir: Path, lab_models: dict[str, str], sglang_trees: Any, tmp_path: Path, version: str,
        measured: bool) -> None:
    """SGLang's OpenAI routes carry per-request speculative stats from the 0.5.23 tree on
    (``sglext.spec_tokens_details``, asked by ``return_spec_tokens_details``); 0.5.12.post1's carry none, and the
    replay says so rather than guess. A greedy request's penalty is served, by SGLang's relaxed rule."""
    inventory = sglang_inventory(state_dir, lab_models, sglang_trees(version))
    traffic = traffic_file(tmp_path / "traffic.jsonl", penalised=True)
    template = tmp_path / "template.jinja"
    template.write_text(TEMPLATE)
    ran = run_playbook(f"""
name: traffic on sglang
steps:
  - server: {{name: s, model: "{{{{ target }}}}", ready_timeout: 180,
             flags: {{speculative-algorithm: EAGLE3, speculative-draft-model-path: "{{{{ draft }}}}",
                     speculative-num-steps: 5, speculative-eagle-topk: 1, speculative-num-draft-tokens: 6,
                     lab-capture-layers: "0,6,11", chat-template: "{template}"}}}}
  - bench: {{server: s, traffic: "{traffic}"}}
    register: b
  - server: {{action: stop, name: s}}
""", inventory, tmp_path / "sessions")
    assert ran.status == "ok", [e.get("error") for e in ran.of_type("step_finished")]
    b = ran.result("s2")["result"]
    table = b["traffic"]
    groups = {e["category"]: e for e in table["by_category"]}
    # a sampled request is sampled as SGLang verifies a chain (its target-only rule); one with a min_p, which
    # SGLang's speculative verify leaves out, is refused by the lab, never served another way in its place
    assert b["completed"] == 18 and groups["sampled"]["failed"] == 1
    assert "lab (NOT SGLang)" in groups["sampled"]["error"] and "min_p" in groups["sampled"]["error"]
    if measured:
        assert groups["sampled"]["measured"] == 2, groups["sampled"]
        for name, count in (("python", 10), ("prose", 6)):
            entry = groups[name]
            assert entry["measured"] == count and 1.0 <= entry["accept_length_ci"][0], entry
        penalised = next(e for e in table["by_sampling"] if e["sampling"] == "temperature=0 frequency_penalty=1")
        assert penalised["measured"] == 5 and penalised["failed"] == 0, penalised
        assert "unmeasured" not in table
    else:
        assert table["unmeasured"] == "the server gave no per-request accept length"
        assert all(e["measured"] == 0 for e in table["by_category"])
        said = "".join(e.get("text", "") for e in ran.of_type("output"))
        assert "no acceptance by category: the server gave no per-request accept length" in said


@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_sampled_traffic_on_sglang_is_replayed_offline_by_its_own_rule(state_dir: Path, lab_models: dict[str, str],
                                                                        sglang_trees: Any, tmp_path: Path,
                                                                        shape: str) -> None:
    """SGLang verifies a sampled chain, and a draft tree, with sgl-kernel's target-only rule
    (remote_probes/evaluation/decoding.py), its acceptance threshold from the server's flags: the stand-in (0.5.23
    tree) serves sampled requests by it at ``--speculative-accept-threshold-acc 0.5``, and the reconcile simulates
    each one offline with that threshold and that shape (none skipped as "not modelled"): the offline prediction
    and the server's figure overlap on intervals."""
    code = [p["text"] for p in json.loads((REPO / "orchestrator/data/bench_prompts.json").read_text())["prompts"]]
    lines = [{"prompt": text, "temperature": 0.8, "top_p": 0.95, "seed": 100 + i, "max_tokens": 24,
              "category": "code"} for i, text in enumerate(code[:8])]
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    flags = SPEC_FLAGS["sglang"] if shape == "chain" else (
        'speculative-algorithm: EAGLE3, speculative-draft-model-path: "{{ draft }}", speculative-num-steps: 3, '
        "speculative-eagle-topk: 4, speculative-num-draft-tokens: 8")
    ran = run_playbook(f"""
name: sampled traffic on sglang
steps:
  - server: {{name: fixed, model: "{{{{ target }}}}", ready_timeout: 180,
             flags: {{{flags}, speculative-accept-threshold-acc: 0.5, lab-capture-layers: "0,6,11"}}}}
    register: fixed_srv
  - bench: {{server: fixed, traffic: "{traffic}"}}
    register: fixed_traffic
  - reconcile: {{target: "{{{{ target }}}}", engine: sglang, max_new_tokens: 24, traffic: "{traffic}",
                 servers: "{{{{ fact('reconciled_traffic_servers') }}}}"}}
  - server: {{action: stop, name: fixed}}
""", sglang_inventory(state_dir, lab_models, sglang_trees("0.5.23")), tmp_path / "sessions")
    assert ran.status == "ok", [e.get("error") for e in ran.of_type("step_finished")]
    [setting] = ran.result("s2")["result"]["traffic"]["by_sampling"]
    assert setting["sampling"] == "temperature=0.8 top_p=0.95" and setting["measured"] == 8, setting
    [server] = ran.result("s3")["result"]["servers"]
    assert server["accept_thresholds"]["acc"] == 0.5 and server.get("topk", 1) == (4 if shape == "tree" else 1)
    assert server["skipped"] == 0 and server["predicted_requests"] == 8, server["verdict"]
    [offline] = server["by_sampling"]
    assert offline["disjoint"] is False, offline


#: the speculative flags of each engine's stand-in: vLLM's config, SGLang's EAGLE-3 chain
SPEC_FLAGS = {"vllm": 'speculative-config: {method: eagle3, model: "{{ draft }}", num_speculative_tokens: 5}',
              "sglang": 'speculative-algorithm: EAGLE3, speculative-draft-model-path: "{{ draft }}", '
                        "speculative-num-steps: 5, speculative-eagle-topk: 1, speculative-num-draft-tokens: 6"}


def category_playbook(name: str, traffic: Path, capture: str, max_new_tokens: int, extra_flags: str = "",
                      engine: str = "vllm") -> str:
    """One speculative server ``fixed``: the traffic replayed, then reconciled offline, traffic_category judged on
    both (the rule's two moments: the replay alone, then with the reconcile's counterfactuals)."""
    return f"""
name: {name}
hypotheses:
  - {{id: traffic_category, title: a category of the traffic is served worse}}
steps:
  - server: {{name: fixed, model: "{{{{ target }}}}", ready_timeout: 180,
             flags: {{{SPEC_FLAGS[engine]}, lab-capture-layers: "{capture}"{extra_flags}}}}}
    register: fixed_srv
  - bench: {{server: fixed, traffic: "{traffic}"}}
    register: fixed_traffic
    evidence:
      traffic_category: {{rule: traffic_category_apart}}
  - reconcile: {{target: "{{{{ target }}}}", engine: {engine}, max_new_tokens: {max_new_tokens}, traffic: "{traffic}",
                 servers: "{{{{ fact('reconciled_traffic_servers') }}}}"}}
    register: traffic_rc
    evidence:
      traffic_category: {{rule: traffic_category_apart}}
  - server: {{action: stop, name: fixed}}
"""


def test_a_category_of_longer_prompts_is_not_blamed_on_the_draft(vllm_inventory: Inventory, tmp_path: Path,
                                                                  lab_models: dict[str, str]) -> None:
    """The lab's draft accepts less the longer its context (it trained on 131-token sequences): a category whose
    prompts are longer than the best-served one's trails it on intervals. On the replay alone traffic_category says
    the length may be the cause (inconclusive) instead of blaming the category's content (these two categories are
    cut from the same files); the reconcile then replays the long requests offline cut to the short ones' length,
    they recover, and the verdict names the length."""
    traffic = length_traffic(tmp_path / "traffic.jsonl", lab_models["target"])
    ran = run_playbook(category_playbook("traffic by length", traffic, "0,6,11", 48), vllm_inventory,
                       tmp_path / "sessions")
    assert ran.status == "ok", [e.get("error") for e in ran.of_type("step_finished")]
    table = ran.result("s2")["result"]["traffic"]
    by = {e["category"]: e for e in table["by_category"]}
    assert by["snippets"]["measured"] >= 10 and by["files"]["measured"] >= 10, by
    assert by["snippets"]["prompt_tokens_ci"][1] < by["files"]["prompt_tokens_ci"][0], by
    apart = table["below_best_category"]
    assert apart and apart["best"]["category"] == "snippets" and [e["category"] for e in apart["below"]] == ["files"]
    first, second = [e for e in ran.of_type("hypothesis_updated") if e.get("hypothesis_id") == "traffic_category"]
    assert first["state"] == "inconclusive", first
    assert "the prompts of files are longer than those of snippets" in first["evidence"], first
    # offline, the long requests cut to the short ones' mean length (40 tokens) recover: the length, not the files
    [server] = ran.result("s3")["result"]["servers"]
    [cut] = server["cut_to_length"]
    assert cut["category"] == "files" and cut["kept_tokens"] == 40 and cut["requests"] == by["files"]["measured"]
    assert cut["gain_ci"][0] > 1.0 and cut["cut_ci"][1] >= by["snippets"]["accept_length_ci"][0], cut
    assert second["state"] == "supported", second
    assert "cut to their last 40 tokens" in second["evidence"] and "the context's length costs" in second["evidence"]
    said = "".join(e.get("text", "") for e in ran.of_type("output"))
    assert "prompt tok)" in said and "files: prompts cut to their last 40 tokens" in said
    report = (ran.directory / "report.md").read_text()
    assert "prompt tokens, mean [95%]" in report and "| fixed | files | " in report and "tokens kept" in report
    # the TUI's servers pane: each category with its prompts' length beside its accept length
    from orchestrator.events import parse_event
    from orchestrator.tui.model import SessionModel
    from orchestrator.tui.widgets.detail.servers import _flags

    model = SessionModel()
    for logged in ran.events:
        if (event := parse_event(logged)) is not None:
            model.apply(event)
    [row] = [r for r in model.servers.values() if r.by_category]
    assert f"files={by['files']['accept_length']:.2f}(600t)" in _flags(row).plain


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_category_and_a_template_the_draft_never_learned_are_each_named(state_dir: Path, tmp_path: Path,
                                                                          sglang_trees: Any, engine: str) -> None:
    """The lab of a category the draft never learned (orchestrator/lab/building/unseen_lab.py): the target learned
    the lab's code and its ROT13 copy, the served draft only the code, and the server renders chat requests with a
    template whose generation prompt ends in a ROT13 "thinking" suffix. The same held-out snippets as code
    completions, in ROT13, and as chat requests, greedy: rot13 and chat trail code on intervals. On the replay
    alone traffic_category cannot tell the draft from the text (inconclusive). The reconcile replays the chat
    requests with the template's thinking switched off (enable_thinking: false, as Qwen3's template takes it) and
    without their template: with thinking off they recover up to code, and thinking is named; it matches the draft's
    first proposal on rot13 with code's at the target's same confidence: far below, and the draft's training is
    named. The same on each engine's stand-in (SGLang's from its 0.5.23 tree, whose OpenAI answers carry each
    request's accept length)."""
    from orchestrator.lab.building import unseen_lab
    from orchestrator.lab.building.unseen_lab import CATEGORY, RECIPE, shipped

    lab = shipped()
    inv = make_inventory(state_dir, target=str(lab.target), draft=str(lab.plain))
    if engine == "vllm":
        inv.hosts["localhost"].vars["engine"] = "lab-vllm"
        inv.hosts["localhost"].env["PYTHONPATH"] = str(REPO)
    else:  # the stand-in speaks that SGLang's flags and API
        inv.hosts["localhost"].env["PYTHONPATH"] = f"{REPO}:{sglang_trees('0.5.23')}"
    chat = [line for line in unseen_lab.chat_traffic(lab, tmp_path / "chat.jsonl").read_text().splitlines()
            if json.loads(line)["category"] == "chat"]
    path = unseen_lab.traffic(lab, tmp_path / "traffic.jsonl")
    path.write_text(path.read_text() + "\n".join(chat) + "\n")
    template = tmp_path / "thinking.jinja"
    template.write_text(unseen_lab.THINKING_TEMPLATE)
    layers = ",".join(str(i) for i in RECIPE["wiring"])
    ran = run_playbook(category_playbook("a category and a template the draft never learned", path, layers, 32,
                                         f', chat-template: "{template}"', engine), inv, tmp_path / "sessions")
    assert ran.status == "ok", [e.get("error") for e in ran.of_type("step_finished")]
    apart = ran.result("s2")["result"]["traffic"]["below_best_category"]
    assert apart and apart["best"]["category"] == "code", apart
    assert sorted(e["category"] for e in apart["below"]) == ["chat", CATEGORY], apart
    first, second = [e for e in ran.of_type("hypothesis_updated") if e.get("hypothesis_id") == "traffic_category"]
    assert first["state"] == "inconclusive" and "the draft or the text of rot13 may cost it" in first["evidence"]
    [server] = ran.result("s3")["result"]["servers"]
    [bare] = server["without_template"]
    assert bare["category"] == "chat" and bare["requests"] == 24 and bare["gain_ci"][0] > 1.0, bare
    # the template's thinking switch off, its other parts kept: the suffix alone is what costs chat
    [off] = server["thinking_off"]
    assert off["category"] == "chat" and off["switch"] == "enable_thinking" and off["requests"] == 24, off
    assert off["gain_ci"][0] > 1.0, off
    matched = {m["category"]: m for m in server["confidence_matched"]}
    assert matched[CATEGORY]["requests"] == 24 and matched[CATEGORY]["ratio_ci"][1] < 1.0, matched
    assert second["state"] == "supported", second
    assert "thinking costs chat its acceptance (what the template's enable_thinking switch adds" \
        in second["evidence"] and "enable_thinking: false where" in second["evidence"], second
    assert "the draft predicts rot13 worse than code: it did not learn rot13" in second["evidence"], second
    assert "did not learn chat" not in second["evidence"], second
    said = "".join(e.get("text", "") for e in ran.of_type("output"))
    assert "rot13: the draft's first proposal right " in said and "chat: without the chat template " in said
    assert "chat: with enable_thinking: false " in said
    report = (ran.directory / "report.md").read_text()
    assert "| fixed | rot13 | 24 | " in report and "| without the template |" in report
    assert "| enable_thinking: false |" in report
    assert "acceptance-traffic-by-confidence.svg" in report
    chart = (ran.directory / "artifacts" / "acceptance-traffic-by-confidence.svg").read_text()
    assert "rot13 (fixed)" in chart and "code (fixed)" in chart
