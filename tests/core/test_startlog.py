"""The start-failure log reader over log excerpts shaped the way SGLang 0.5.x writes them
(research/sglang-interface.md: ``[%Y-%m-%d %H:%M:%S{ TPn}] message``, uvicorn access lines, a child's traceback
as one multi-line log record). Pure: no processes."""

from __future__ import annotations

from orchestrator.servers.startlog import analyse_start_failure, is_noise, strip_prefix

HEALTH_503 = '[2026-11-30 10:00:{s:02d}] INFO:     127.0.0.1:{p} - "GET /health HTTP/1.1" 503 Service Unavailable'


def _polls(n: int) -> str:
    return "\n".join(HEALTH_503.format(s=10 + i, p=54321 + i) for i in range(n)) + "\n"


USAGE = """usage: launch_server.py [-h] --model-path MODEL_PATH
                        [--tokenizer-path TOKENIZER_PATH]
                        [--host HOST] [--port PORT]
                        [--speculative-algorithm SPECULATIVE_ALGORITHM]
                        [--speculative-num-steps SPECULATIVE_NUM_STEPS]
"""

SCHEDULER_TRACEBACK = """[2026-11-30 10:00:05 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 4020, in run_scheduler_process
    scheduler = Scheduler(
                ^^^^^^^^^^
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 703, in __init__
    self.draft_worker = DraftWorkerClass(**draft_worker_kwargs)
                        ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/speculative/eagle_worker.py", line 131, in __init__
    super().__init__(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/tp_worker.py", line 247, in __init__
    self.model_runner = ModelRunner(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 412, in load_model
    self.model = get_model(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/models/llama_eagle3.py", line 327, in load_weights
    param = params_dict[name]
            ~~~~~~~~~~~^^^^^^
KeyError: 'layers.0.self_attn.qkv_proj.weight'

[2026-11-30 10:00:05] Received sigquit from a child process. It usually means the child failed.
"""


def test_access_lines_and_progress_bars_are_noise() -> None:
    assert is_noise('[2026-11-30 10:00:10] INFO:     127.0.0.1:54321 - "GET /health HTTP/1.1" 503 Service Unavailable')
    assert is_noise('INFO:     127.0.0.1:54321 - "GET /health HTTP/1.1" 503')  # uvicorn's own format
    assert is_noise('[2026-11-30 10:00:10] INFO:     127.0.0.1:40000 - "POST /generate HTTP/1.1" 200 OK')
    assert is_noise("Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.2it/s]")
    assert is_noise("   ")
    assert not is_noise("[2026-11-30 10:00:05] Received sigquit from a child process. It usually means the child failed.")
    assert strip_prefix("[2026-11-30 10:00:05 TP0] Load weight begin.") == "Load weight begin."


def test_unknown_flag_argparse_exit_2() -> None:
    log = USAGE + "launch_server.py: error: unrecognized arguments: --speculative-num-stepz 3\n"
    failure = analyse_start_failure(log, reason="exited", exit_code=2)
    assert failure.cause == "unknown_flag" and failure.label == "unknown flag"
    assert failure.error_lines == ["launch_server.py: error: unrecognized arguments: --speculative-num-stepz 3"]
    assert "unrecognized arguments: --speculative-num-stepz 3" in failure.summary


def test_ambiguous_option_is_an_unknown_flag() -> None:
    # sglang 0.5.23 splits --cuda-graph-max-bs into -decode/-prefill; the old name is ambiguous (prefix matching)
    log = ("usage: sglang serve [-h] [--model-path MODEL_PATH]\n"
           "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
           "--cuda-graph-max-bs-prefill\n")
    failure = analyse_start_failure(log, reason="exited", exit_code=2)
    assert failure.cause == "unknown_flag"
    assert "ambiguous option: --cuda-graph-max-bs" in failure.summary


def test_bad_flag_value_is_an_invalid_flag() -> None:
    log = USAGE + ("launch_server.py: error: argument --speculative-num-steps: invalid int value: 'three'\n")
    failure = analyse_start_failure(log, reason="exited", exit_code=2)
    assert failure.cause == "invalid_flag"
    assert "invalid int value: 'three'" in failure.summary


def test_draft_load_traceback_above_health_polls() -> None:
    log = ("[2026-11-30 10:00:00] server_args=ServerArgs(model_path='/models/llama', speculative_algorithm='EAGLE3', "
           "crash_dump_folder=None, enable_trace=False)\n"
           "[2026-11-30 10:00:02 TP0] Load weight begin. avail mem=78.50 GB\n"
           "[2026-11-30 10:00:04 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.10 GB\n"
           + _polls(3) + SCHEDULER_TRACEBACK + _polls(12))
    failure = analyse_start_failure(log, reason="exited", exit_code=137, draft_path="/models/llama-eagle3")
    assert failure.cause == "draft_load"
    assert "KeyError: 'layers.0.self_attn.qkv_proj.weight'" in failure.summary
    lines = failure.error_lines
    assert lines[0] == "[2026-11-30 10:00:05 TP0] Scheduler hit an exception: Traceback (most recent call last):"
    # the last frame and its source line, then the exception
    assert lines[1].startswith('File "/usr/local/lib/python3.12/dist-packages/sglang/srt/models/llama_eagle3.py"')
    assert lines[2] == "    param = params_dict[name]"
    assert lines[3] == "KeyError: 'layers.0.self_attn.qkv_proj.weight'"
    assert lines[4].endswith("Received sigquit from a child process. It usually means the child failed.")
    assert not any("GET /health" in line for line in lines + failure.last_lines)
    assert not any("server_args=" in line for line in lines)


def test_error_naming_the_draft_path_is_a_draft_load_error() -> None:
    log = ("[2026-11-30 10:00:02 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
           '  File "/opt/sglang/srt/managers/scheduler.py", line 4020, in run_scheduler_process\n'
           "    scheduler = Scheduler(\n"
           '  File "/opt/sglang/srt/configs/model_config.py", line 180, in __init__\n'
           "    self.hf_config = get_config(\n"
           "OSError: /models/kimi-eagle3 does not appear to have a file named config.json.\n\n")
    failure = analyse_start_failure(log, reason="exited", exit_code=1, draft_path="/models/kimi-eagle3")
    assert failure.cause == "draft_load"
    assert "OSError: /models/kimi-eagle3 does not appear" in failure.summary


def test_cuda_oom() -> None:
    log = ("[2026-11-30 10:00:02 TP0] Load weight begin. avail mem=10.20 GB\n"
           "[2026-11-30 10:00:09 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
           '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 4020, '
           "in run_scheduler_process\n"
           "    scheduler = Scheduler(\n"
           '  File "/usr/local/lib/python3.12/dist-packages/torch/nn/modules/module.py", line 1355, in convert\n'
           "    return t.to(\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of "
           "79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.16 GiB memory in "
           "use.\n\n"
           "[2026-11-30 10:00:09] Received sigquit from a child process. It usually means the child failed.\n"
           + _polls(5))
    failure = analyse_start_failure(log, reason="exited", exit_code=-9)
    assert failure.cause == "out_of_memory" and failure.label == "out of memory"
    assert "torch.OutOfMemoryError: CUDA out of memory" in failure.summary
    assert any(line.startswith("torch.OutOfMemoryError") for line in failure.error_lines)


def test_not_enough_memory_for_the_kv_cache() -> None:
    log = ("[2026-11-30 10:00:09 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
           '  File "/opt/sglang/srt/model_executor/pool_configurator.py", line 53, in __post_init__\n'
           "    raise RuntimeError(msg)\n"
           "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
           "Current value: mem_fraction_static=0.3\n\n")
    assert analyse_start_failure(log, reason="exited", exit_code=1).cause == "out_of_memory"


def test_port_in_use_after_the_model_loaded() -> None:
    log = ("[2026-11-30 10:00:30] The server is starting on 127.0.0.1:30000\n"
           "[2026-11-30 10:00:30] ERROR:    [Errno 98] error while attempting to bind on address "
           "('127.0.0.1', 30000): address already in use\n")
    failure = analyse_start_failure(log, reason="exited", exit_code=1)
    assert failure.cause == "port_in_use"
    assert "address already in use" in failure.summary
    assert failure.error_lines == [log.splitlines()[1]]


def test_sglang_picking_its_internal_ports_is_not_a_port_clash() -> None:
    # network.py logs this at INFO on every start that finds a port taken and moves on
    log = ("[2026-11-30 10:00:01] Port 30001 is already in use, trying port 30002\n"
           "[2026-11-30 10:00:09 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
           '  File "/opt/sglang/srt/model_executor/model_runner.py", line 412, in load_model\n'
           "    self.model = get_model(\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n\n")
    assert analyse_start_failure(log, reason="exited", exit_code=-9).cause == "out_of_memory"


def test_a_bare_error_line_is_shown() -> None:
    log = "[2026-11-30 10:00:01] loading\nError: the NCCL library is missing\n" + _polls(3)
    failure = analyse_start_failure(log, reason="exited", exit_code=1)
    assert failure.cause == "error" and failure.error_lines == ["Error: the NCCL library is missing"]


def test_timeout_with_nothing_in_the_log() -> None:
    log = ("[2026-11-30 10:00:02 TP0] Load weight begin. avail mem=78.50 GB\n"
           "Loading safetensors checkpoint shards:  10% Completed | 3/30 [00:40<06:00, 13.3s/it]\n" + _polls(20))
    failure = analyse_start_failure(log, reason="timeout", timeout=600)
    assert failure.cause == "timeout"
    assert failure.summary == "not ready within 600s"
    assert failure.error_lines == []
    assert failure.last_lines == ["[2026-11-30 10:00:02 TP0] Load weight begin. avail mem=78.50 GB"]


def test_unknown_speculative_algorithm_is_an_invalid_flag() -> None:
    log = ("[2026-11-30 10:00:00] Traceback (most recent call last):\n"
           '  File "/opt/sglang/srt/server_args.py", line 3560, in _handle_speculative_decoding\n'
           "    raise ValueError(\n"
           "ValueError: Unknown speculative algorithm name: EAGLE4\n")
    failure = analyse_start_failure(log, reason="exited", exit_code=1)
    assert failure.cause == "invalid_flag"
    assert "Unknown speculative algorithm name: EAGLE4" in failure.summary


def test_chained_exceptions_keep_the_first_and_the_last() -> None:
    log = ("Traceback (most recent call last):\n"
           '  File "/opt/a.py", line 1, in f\n'
           "    g()\n"
           "ZeroDivisionError: division by zero\n"
           "\n"
           "During handling of the above exception, another exception occurred:\n"
           "\n"
           "Traceback (most recent call last):\n"
           '  File "/opt/b.py", line 2, in h\n'
           "    raise RuntimeError('wrapped')\n"
           "RuntimeError: wrapped\n")
    failure = analyse_start_failure(log, reason="exited", exit_code=1)
    assert failure.cause == "error" and failure.summary == "RuntimeError: wrapped"
    assert failure.error_lines == ['File "/opt/a.py", line 1, in f', "    g()", "ZeroDivisionError: division by zero",
                                   'File "/opt/b.py", line 2, in h', "    raise RuntimeError('wrapped')",
                                   "RuntimeError: wrapped"]


def test_exit_without_any_error() -> None:
    failure = analyse_start_failure("[2026-11-30 10:00:00] bye\n" + _polls(2), reason="exited", exit_code=0)
    assert failure.cause == "exited" and failure.error_lines == []
    assert failure.last_lines == ["[2026-11-30 10:00:00] bye"]
    assert failure.as_dict()["label"] == "exited"


def test_the_lab_servers_startup_error() -> None:
    # what orchestrator.lab.stand_in.server prints when the draft does not load
    log = ("[2026-11-30 10:00:00] orchestrator lab server: a CPU stand-in for SGLang 0.5.12.post1's launch_server\n"
           "[2026-11-30 10:00:01] Load weight begin. target=/lab/target draft=/lab/broken\n"
           "[2026-11-30 10:00:02] lab server start-up failed\n"
           "ValueError: cannot load the draft model /lab/broken: no model.safetensors\n")
    failure = analyse_start_failure(log, reason="exited", exit_code=1, draft_path="/lab/broken")
    assert failure.cause == "draft_load"
    assert failure.error_lines[-1] == "ValueError: cannot load the draft model /lab/broken: no model.safetensors"


def test_eagle_on_a_cpu_backend_is_named_for_what_it_is() -> None:
    """SGLang's speculative path on a host with no GPU, as the real 0.5.15.post1 and 0.5.23 say it on this project's
    CPUs (research/sglang-cpu.md): not a bare "server error" but the backend, and what would run it."""
    log_0515 = ("[2026-12-04 07:58:40] speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                "speculative_eagle_topk == 1\n"
                "[2026-12-04 07:58:42] Scheduler hit an exception: Traceback (most recent call last):\n"
                '  File "/venv/site-packages/triton/runtime/driver.py", line 20, in _create_driver\n'
                '    raise RuntimeError(f"{len(active_drivers)} active drivers ({active_drivers}). There should only '
                'be one.")\n'
                "RuntimeError: 0 active drivers ([]). There should only be one.\n\n"
                "[2026-12-04 07:58:42] Received sigquit from a child process. It usually means the child failed.\n")
    failure = analyse_start_failure(log_0515, reason="exited", exit_code=137)
    assert failure.cause == "no_accelerator" and failure.label == "a CPU backend without EAGLE"
    assert failure.summary.startswith("RuntimeError: 0 active drivers ([]). There should only be one. (the "
                                      "speculative path needs a GPU"), failure.summary
    log_0523 = ("[2026-12-04 08:00:00] Traceback (most recent call last):\n"
                '  File "/venv/site-packages/sglang/srt/server_args.py", line 3300, in _handle_speculative_decoding\n'
                "    raise ValueError(\n"
                "ValueError: EAGLE is not supported in decode attention backend torch_native\n")
    assert analyse_start_failure(log_0523, reason="exited", exit_code=1).cause == "no_accelerator"


def test_a_pydantic_validation_error_says_what_its_validator_raised() -> None:
    """vLLM validates its config classes with pydantic in the API server: the exception line says only "1 validation
    error for SpeculativeConfig"; the refusal is the line under it (real vLLM 0.32 on a draft of model_type
    deepseek_v3, which its speculative config rewrites as DeepSeek MTP)."""
    log = "\n".join([
        "(APIServer pid=14849) INFO 12-04 11:03:23 [api_utils.py:286] non-default args: {'host': '127.0.0.1'}",
        "Traceback (most recent call last):",
        '  File "/venv/lib/python3.11/site-packages/vllm/engine/arg_utils.py", line 2099, in create_speculative_config',
        "    return SpeculativeConfig(**self.speculative_config)",
        '  File "/venv/lib/python3.11/site-packages/pydantic/_internal/_dataclasses.py", line 121, in __init__',
        "    s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)",
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig",
        "  Value error, Model architectures ['Eagle3DeepSeekMTPModel'] are not supported for now. Supported "
        "architectures: dict_keys(['AfmoeForCausalLM', 'ApertusForCausalLM'])",
        "    For further information visit https://errors.pydantic.dev/2.14/v/value_error",
    ])
    failure = analyse_start_failure(log, reason="exited", exit_code=1)
    assert "1 validation error for SpeculativeConfig: Model architectures ['Eagle3DeepSeekMTPModel'] are not " \
           "supported for now" in failure.summary, failure.summary
