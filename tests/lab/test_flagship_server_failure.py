"""A server that cannot start is evidence: the flagship, run against the lab with a candidate flag the lab (SGLang
0.5.12.post1's CLI) refuses, shows the server's own error, goes on with the static checks, SGLang's code and the
draft test, and ends with a verdict that names why the server could not serve."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.console import ConsoleSink
from orchestrator.hypotheses.board import HypothesisBoard
from orchestrator.lab.building.build import LabPaths
from orchestrator.lab.building.inventory import lab_inventory
from orchestrator.playbook.loader import load_playbook
from orchestrator.session.reader import read_session
from orchestrator.session.recording import build_runner, run_with_signals, write_reports

FLAGSHIP = Path(__file__).resolve().parents[2] / "playbooks" / "eagle3.yaml"
# small samples: this test is about the path through the playbook, not about the draft test's power
SMALL = {"bench_n": 2, "bench_tokens": 16, "dt_prompts": 4, "dt_tokens": 16}


@pytest.mark.lab
@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_flagship_goes_on_when_the_speculative_server_cannot_start(lab: LabPaths, tmp_path: Path) -> None:
    inventory = lab_inventory("seed-wiring", root=lab.root)
    host = inventory.hosts["lab"]
    # SGLang 0.5.23 split --cuda-graph-max-bs into -decode/-prefill; 0.5.12.post1's argparse refuses the new name
    host.vars["candidate_flags"] = {**host.vars["candidate_flags"], "cuda-graph-max-bs-decode": 8}
    playbook = load_playbook(FLAGSHIP, extra_names=inventory.host_vars("lab"))
    screen = StringIO()
    engine, directory = build_runner(playbook, inventory, extra_vars=SMALL, sessions_dir=tmp_path / "sessions",
                                     sinks=[ConsoleSink(Console(file=screen, width=300, highlight=False))])
    outcome = await run_with_signals(engine)
    write_reports(directory)
    session = read_session(directory)
    steps = {e.name: e for e in session.of_type("step_finished")}

    assert outcome.status == "ok"
    spec_start = steps["Speculative server with the candidate flags"]
    assert spec_start.status == "failed" and spec_start.ignored
    failure = spec_start.results[0].result["failure"]
    assert failure["cause"] == "unknown_flag" and failure["exit_code"] == 2
    assert steps["Speculative benchmark"].status == "skipped"
    # the investigation went on: static checks, SGLang's code, the draft test, the fix
    for name in ("Static checks of the draft checkpoint", "SGLang: which target layers are captured for the draft",
                 "Standalone draft test over candidate wirings", "Benchmark the fix", "Weigh the evidence"):
        assert steps[name].status == "ok", (name, steps[name].error)
    assert not [n.text for n in session.of_type("note_added") if "evidence rule failed" in n.text]

    board = HypothesisBoard.from_events(session.events)
    assert board.entries["server_start"].state == "confirmed"
    assert board.entries["lm_head_missing"].state == "refuted"  # the static checks still decided

    shown = screen.getvalue()
    assert "cause: unknown flag — the server does not accept a flag (unrecognized arguments: " \
        "--cuda-graph-max-bs-decode 8)" in shown
    # refused by the pre-flight check with SGLang 0.5.12.post1's own parser (the lab's tree), before any start
    assert "sglang serve: error: unrecognized arguments: --cuda-graph-max-bs-decode 8" in shown
    assert failure["reason"] == "preflight"
    assert "hypothesis server_start → confirmed" in shown

    verdict = (directory / "report.md").read_text().split("## Verdict", 1)[1].split("\n## ", 1)[0]
    assert ("**Root cause: The server cannot serve the candidate configuration (it fails to start, or fails every "
            "request)** [`server_start`]") in verdict
    assert "the speculative server did not start (preflight, exit code 2): unknown flag — the server does not " \
        "accept a flag (unrecognized arguments: --cuda-graph-max-bs-decode 8)" in verdict
