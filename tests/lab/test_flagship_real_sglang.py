"""The flagship on a REAL SGLang CPU host (issue 43): the user's inventory of a CPU box with SGLang 0.5.15.post1
(`orchestrator lab sglang-host`), the lab's target and its seed-wiring draft, the seed's EAGLE-3 flags. The baseline
and its benchmark are real SGLang's; the speculative start is refused by SGLang itself (Triton finds no GPU driver),
and the verdict names that refusal as a CPU backend without EAGLE, says what a GPU host would add, and still carries
what this host could decide: the seed's 16 -> 2 adjustment SGLang logged before it refused, and the draft test's
wiring mismatch. One run through the CLI's runner, reduced in prompts (CI time), its processes all stopped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.hypotheses.board import HypothesisBoard
from orchestrator.inventory import Inventory
from orchestrator.lab.building.build import LabPaths
from orchestrator.lab.sglang_host.host import SGLANG_VERSION, SglangHost
from orchestrator.playbook.loader import load_playbook
from orchestrator.session.reader import read_session
from orchestrator.session.recording import build_runner, run_session, write_reports
from tests.servers.conftest import processes_with
from tests.servers.test_real_sglang_adapter import cpu_flags, inventory_doc

pytestmark = [pytest.mark.lab, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
#: SGLang's own log line for the topk-1 adjustment (srt/arg_groups/speculative_hook.py:444-446 in 0.5.15.post1)
ADJUSTED = "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
#: how 0.5.15.post1 refuses EAGLE-3 on this CPU (measured): no argument check stops it; the scheduler process crashes
#: at KV-pool init, where a speculative server's pool warms up a Triton copy kernel (enable_kv_cache_copy,
#: srt/model_executor/model_runner_kv_cache_mixin.py:1013-1015; srt/mem_cache/memory_pool.py:1385-1388 and 1438) and
#: Triton has no CPU driver (triton/runtime/driver.py:20). The scheduler logs it (srt/managers/scheduler.py:4345) and
#: SIGQUITs the launcher, which logs its own line (srt/entrypoints/engine.py:1327-1329) and kills its process tree.
SCHEDULER_FAILED = "Scheduler hit an exception: Traceback (most recent call last):"
REFUSAL = "RuntimeError: 0 active drivers ([]). There should only be one."
WHERE = "in _init_kv_copy_and_warmup"
LAUNCHER_SAW = "Received sigquit from a child process. It usually means the child failed."


@pytest.mark.timeout(1200)
def test_the_flagship_on_a_real_sglang_cpu_host_names_the_backends_refusal(
        lab: LabPaths, sglang_host: SglangHost, tmp_path: Path) -> None:
    marker = f"orch-test-flagship-sglang-{tmp_path.name}"
    draft = lab.root / "drafts" / "seed-wiring"
    doc = inventory_doc(sglang_host, {"target": str(lab.target), "draft": str(draft)}, tmp_path, marker)
    cpu = cpu_flags()
    doc["hosts"]["sglang"]["vars"].update({
        "draft": str(draft),  # the adapter tests' inventory serves the healthy draft
        "baseline_flags": cpu,
        # the seed's flags: one step, topk 1, 16 draft tokens (SGLang makes them 2)
        "candidate_flags": {**cpu, "speculative-algorithm": "EAGLE3", "speculative-draft-model-path": str(draft),
                            "speculative-num-steps": 1, "speculative-eagle-topk": 1,
                            "speculative-num-draft-tokens": 16},
        "bench_n": 4, "bench_ladder": 0, "dt_prompts": 8, "dt_tokens": 32, "server_ready_timeout": 600})
    inventory = Inventory.model_validate(doc)
    playbook = load_playbook(REPO / "playbooks" / "eagle3.yaml", extra_names=inventory.host_vars("sglang"))
    engine, directory = build_runner(playbook, inventory, sinks=[], sessions_dir=tmp_path / "sessions")
    run = run_session(engine, directory)
    write_reports(directory)
    session = read_session(directory)
    board = HypothesisBoard.from_events(session.events).entries

    def said(hid: str) -> str:  # every reason the hypothesis was given
        return " | ".join(h.evidence or "" for h in board[hid].history)

    assert run.outcome.status == "ok", run.outcome

    def result(name: str) -> dict:
        (found,) = [r.result for e in session.events if getattr(e, "name", "") == name
                    for r in getattr(e, "results", [])]
        return found

    base_srv, base = result("Baseline server (no speculation)"), result("Baseline benchmark")
    assert base_srv["status"] == "ready" and base_srv["engine"] == "sglang", base_srv
    assert base_srv["command"][1:3] == ["-m", "sglang.launch_server"]  # real SGLang, not the lab's stand-in
    assert base["tok_s"] and base["completed"] == 4, base
    # the speculative start, as the adapter saw it: SGLang's own parser (the pre-flight, on the host) accepts the
    # flags and resolves 16 draft tokens to steps + 1 = 2 (topk 1), so the server is started; the launcher kills its
    # own tree, itself last (SIGKILL: 128 + 9 through the setsid wrapper); SGLang's own lines, from the process that
    # raised (the scheduler), then the launcher's; what it changed first, from its log (no /server_info)
    spec_srv = result("Speculative server with the candidate flags")
    check = spec_srv["preflight"]
    assert check["ok"] and check["route"] == "runtime" and check["version"] == SGLANG_VERSION, check
    assert [(a["field"], a["requested"], a["effective"]) for a in check["adjustments"]] == \
        [("speculative_num_draft_tokens", 16, 2)], check
    assert spec_srv["status"] == "failed" and spec_srv["exit_code"] == 137, spec_srv["exit_code"]
    failure = spec_srv["failure"]
    assert failure["reason"] == "exited" and failure["cause"] == "no_accelerator", failure
    lines = failure["error_lines"]
    order = [next((i for i, line in enumerate(lines) if text in line), -1)
             for text in (SCHEDULER_FAILED, REFUSAL, LAUNCHER_SAW)]
    assert -1 not in order and order == sorted(order), lines
    assert [(o["flag"], o["requested"], o["effective"], o["source"]) for o in spec_srv["overrides"]] == \
        [("speculative_num_draft_tokens", 16, 2, "log")], spec_srv["overrides"]
    assert ADJUSTED in spec_srv["overrides"][0]["detail"] and spec_srv["effective"] == {}
    # in the order the server's log (streamed into the session) said it: the adjustment, then the crash
    streamed = [json.loads(line) for line in (directory / "events.jsonl").read_text().splitlines() if line.strip()]
    log = "".join(e.get("text", "") for e in streamed if e.get("type") == "output" and e.get("stream") == "server_log")
    order = [log.find(text) for text in (ADJUSTED, SCHEDULER_FAILED, WHERE, REFUSAL, LAUNCHER_SAW)]
    assert -1 not in order and order == sorted(order), order
    # the speculative start: refused by SGLang itself, named as a CPU backend without EAGLE
    assert board["server_start"].state == "confirmed", said("server_start")
    assert "a CPU backend without EAGLE — RuntimeError: 0 active drivers" in said("server_start")
    assert "A GPU host would add the speculative benchmark" in said("server_start")
    # what SGLang changed before it refused: the seed's red herring, from its own log
    assert board["flags_override"].state == "supported", said("flags_override")
    assert "speculative_num_draft_tokens: requested 16, effective 2 (log)" in said("flags_override")
    # what this host could decide: the draft test on the embedding-first draft
    assert board["wiring"].state == "supported", said("wiring")
    dt = result("Standalone draft test over candidate wirings")
    assert dt["decision"] == "mismatch" and dt["server_wiring"] == [2, lab.num_layers // 2, lab.num_layers - 3]
    verdict = (directory / "report.md").read_text().split("## Verdict", 1)[1].split("\n## ", 1)[0]
    assert "**Root cause: The server cannot serve the candidate configuration" in verdict, verdict
    assert "a CPU backend without EAGLE" in verdict and f"SGLang {SGLANG_VERSION}" in verdict, verdict
    assert processes_with(marker) == []
    print("\nflagship on real SGLang: " + json.dumps({"base_tok_s": base["tok_s"], "ready_s": base_srv["ready_s"]}))
