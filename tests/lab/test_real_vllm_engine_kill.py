"""A real vLLM's EngineCore SIGKILLed in the middle of a benchmark (issue 25; tests/reliability/engine_kill.py):
the bench step fails with vLLM's own error read from its log, the investigation goes on, and nothing of the
server's three processes is left. bench/reliability.py engine-kill repeats it, for the Worker too."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.lab.building.build import LabPaths
from orchestrator.lab.vllm_host.host import VllmHost
from tests.reliability.engine_kill import kill_engine_mid_bench

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.mark.timeout(1200)
def test_engine_core_killed_mid_benchmark_fails_the_step_with_vllms_error(lab: LabPaths, vllm_host: VllmHost,
                                                                          tmp_path: Path) -> None:
    run = kill_engine_mid_bench(tmp_path, vllm_host, lab.root, "EngineCore")
    assert run.killed, f"the benchmark never got two answers: {run.steps}"
    assert {name.split()[0] for name in run.processes.values()} >= {"VLLM::EngineCore", "VLLM::Worker"}, run
    status, error = run.step("Benchmark")[1:]
    assert status == "failed" and "the server's own error" in error, run.steps
    assert "died" in error or "EngineDeadError" in error or "EngineCore" in error, error  # vLLM's words
    assert run.step("The investigation goes on")[1] == "ok", run.steps
    assert run.left == [], f"server processes left: {run.left} of {run.processes}"
