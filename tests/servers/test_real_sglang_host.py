"""A REAL SGLang (0.5.15.post1, built by ``orchestrator lab sglang-host``) on this machine's CPU, serving the lab's
target with the research's command line (research/sglang-cpu.md): it serves greedy without speculation, and stopping
a server leaves none of its processes (the launcher, the scheduler and the detokenizer share its process group). One
real server start for the file (~20 s ready on 2 loaded cores). How SGLang refuses EAGLE-3 on this CPU is held
through the orchestrator's adapter (test_real_sglang_adapter.py), with the lines below."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.lab.sglang_host.host import SGLANG_VERSION, SglangHost, server_argv
from tests import vllm_differential as vd

pytestmark = [pytest.mark.lab, pytest.mark.slow]
READY_S = 600  # a loaded 2-core machine; ~20-40 s alone
#: EAGLE-3 as issue 43 starts it: one step, topk 1, 16 draft tokens (SGLang adjusts them to steps + 1 = 2)
EAGLE3 = ("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "1", "--speculative-eagle-topk", "1",
          "--speculative-num-draft-tokens", "16")
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


def sglang_server(host: SglangHost, target: Path, work: Path, *extra: str) -> vd.ServerProcess:
    port = vd.sglang_port()  # SGLang refuses a port above 55535
    return vd.ServerProcess("sglang", server_argv(host.python, target, port, *extra),
                            {**os.environ, **host.env(work / "run")}, work / "sglang.log", port)


@pytest.fixture(scope="module")
def server(sglang_host: SglangHost, lab_models: dict[str, str],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[vd.ServerProcess]:
    """A real SGLang server on the lab's target, no speculation, started once for this file's serving tests;
    stopped (its whole group) by the last of them, and again here in case that one did not run."""
    srv = sglang_server(sglang_host, Path(lab_models["target"]), tmp_path_factory.mktemp("sglang-host"))
    srv.start()
    yield srv
    srv.stop()


@pytest.mark.timeout(900)
def test_the_host_serves_the_lab_target_greedy(server: vd.ServerProcess) -> None:
    assert server.wait_ready(READY_S), f"SGLang exited before it served:\n{server.log_text()[-3000:]}"
    body = {"text": "def main():\n", "sampling_params": {"temperature": 0, "max_new_tokens": 16, "ignore_eos": True}}
    first, second = (vd.http(server.url + "/generate", body, timeout=120) for _ in range(2))
    assert first[0] == 200, first
    answer = json.loads(first[1])
    assert answer["meta_info"]["completion_tokens"] == 16, answer
    assert answer["text"] and second[0] == 200 and json.loads(second[1])["text"] == answer["text"]  # greedy
    status, text = vd.http(server.url + "/server_info")
    assert status == 200, (status, text[:500])
    info = json.loads(text)
    assert info["version"] == SGLANG_VERSION and info["device"] == "cpu"
    # the resolved speculative flags are top-level keys (dataclasses.asdict(server_args)); none without speculation
    assert info["speculative_algorithm"] is None and info["speculative_num_draft_tokens"] is None


@pytest.mark.timeout(300)
def test_stopping_the_server_leaves_none_of_its_processes(server: vd.ServerProcess) -> None:
    assert server.wait_ready(READY_S), f"SGLang exited before it served:\n{server.log_text()[-3000:]}"
    before = server.group_pids()
    assert len(before) >= 3, before  # the launcher (HTTP + tokenizer), the scheduler and the detokenizer
    left = server.stop()
    assert left == [], f"processes of the server's group outlived its stop: {left}"
    assert server.proc is not None and server.proc.poll() is not None
    assert not [pid for pid in before if alive(pid)], before  # none left its group to outlive the stop either


def alive(pid: int) -> bool:
    """A process that runs (a zombie has ended: only its parent's wait is missing)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
