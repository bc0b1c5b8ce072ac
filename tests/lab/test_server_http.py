"""The lab server as a process: SGLang's HTTP shapes and log lines, start/stop through the LocalTransport."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from orchestrator.lab.building.build import LabPaths
from orchestrator.lab.building.inventory import lab_env
from orchestrator.lab.stand_in.process import free_port, http_json
from orchestrator.servers.flags import flags_to_argv
from tests.waiting import wait_until

pytestmark = [pytest.mark.lab, pytest.mark.torch]
READY = "The server is fired up and ready to roll!"
LOG_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] ")


@pytest.fixture(scope="module")
def served(lab: LabPaths, tmp_path_factory):
    """One seed-wiring server with the topk-override flags' neighbour (steps 3, draft tokens 16: adjusted)."""
    from orchestrator.transport.local import LocalTransport

    state = tmp_path_factory.mktemp("state")
    transport = LocalTransport("localhost", session_id="labtest", state_dir=str(state))
    port = free_port()
    flags = {"speculative-algorithm": "EAGLE3", "speculative-draft-model-path": str(lab.drafts["seed-wiring"]),
             "speculative-num-steps": 3, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 16,
             "decode-log-interval": 5}
    argv = [sys.executable, "-m", "orchestrator.lab.stand_in.server", "--model-path", str(lab.target), "--port", str(port),
            *flags_to_argv(flags)]
    env = lab_env(lab.root)
    handle = asyncio.run(transport.spawn_detached(argv, name="labserver", env=env))
    base = f"http://127.0.0.1:{port}"
    codes: list[int] = []

    def ready() -> bool:
        try:
            codes.append(http_json(base + "/health_generate", timeout=30)[0])
        except OSError:
            return False
        return codes[-1] == 200

    wait_until(ready, 120, interval=0.1)
    log = Path(handle.log_path)
    if not codes or codes[-1] != 200:
        asyncio.run(transport.kill_group(handle, grace=2))
        pytest.fail(f"lab server did not become ready (codes {codes[-5:]}):\n{log.read_text()[-3000:]}")
    yield {"base": base, "codes": codes, "log": log, "transport": transport, "handle": handle}
    asyncio.run(transport.kill_group(handle, grace=5))


def test_health_generate_is_503_until_ready_then_200(served):
    assert served["codes"][0] == 503 and served["codes"][-1] == 200
    status, _ = http_json(served["base"] + "/health")
    assert status == 200


def test_server_info_has_resolved_args_and_internal_states(served):
    http_json(served["base"] + "/generate", {"text": "class A:\n", "sampling_params": {"max_new_tokens": 32,
                                                                                     "ignore_eos": True}})
    status, info = http_json(served["base"] + "/server_info")
    assert status == 200
    _, same = http_json(served["base"] + "/get_server_info")
    assert same.keys() == info.keys()
    assert info["speculative_algorithm"] == "EAGLE3"
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"]) == (3, 1, 4)
    assert info["max_running_requests"] == 48 and info["status"] == "ready" and info["version"] == "0.5.12.post1"
    assert info["lab"] is True and "not SGLang" in info["lab_note"]
    state = info["internal_states"][0]
    assert "last_gen_throughput" in state and state["speculative_num_draft_tokens"] == 4
    assert state["avg_spec_accept_length"] >= 1.0  # > decode-log-interval verify cycles ran


def test_model_info_keys(served):
    for path in ("/model_info", "/get_model_info"):
        status, info = http_json(served["base"] + path)
        assert status == 200
        assert {"model_path", "tokenizer_path", "is_generation", "preferred_sampling_params", "weight_version",
                "has_image_understanding", "has_audio_understanding", "model_type", "architectures"} <= info.keys()


def test_generate_meta_info_and_batch(served):
    status, doc = http_json(served["base"] + "/generate", {"text": "def main(argv):\n    ",
                                                           "sampling_params": {"max_new_tokens": 24, "temperature": 0}})
    assert status == 200 and set(doc) == {"text", "output_ids", "meta_info"}
    meta = doc["meta_info"]
    for key in ("id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "e2e_latency",
                "spec_accept_length", "spec_accept_rate", "spec_verify_ct", "spec_num_correct_drafts",
                "spec_num_proposed_drafts", "spec_correct_drafts_histogram"):
        assert key in meta, key
    assert meta["completion_tokens"] == len(doc["output_ids"]) <= 24
    assert meta["spec_accept_length"] == pytest.approx(meta["completion_tokens"] / meta["spec_verify_ct"])
    assert meta["spec_num_proposed_drafts"] == 3 * meta["spec_verify_ct"]
    _, batch = http_json(served["base"] + "/generate", {"input_ids": [[5, 6, 7], [8, 9]],
                                                        "sampling_params": {"max_new_tokens": 4}})
    assert isinstance(batch, list) and len(batch) == 2 and all(b["meta_info"]["prompt_tokens"] for b in batch)
    status, err = http_json(served["base"] + "/generate", {"sampling_params": {}})
    assert status == 400 and "message" in err["error"]


def test_generate_streams_sse_and_ends_with_done(served):
    req = urllib.request.Request(served["base"] + "/generate", data=json.dumps(
        {"text": "import os\n", "stream": True, "sampling_params": {"max_new_tokens": 12, "ignore_eos": True}}).encode())
    with urllib.request.urlopen(req, timeout=60) as resp:
        body = resp.read().decode()
    chunks = [line[len("data: "):] for line in body.split("\n\n") if line.startswith("data: ")]
    assert chunks[-1] == "[DONE]" and len(chunks) >= 3
    last = json.loads(chunks[-2])
    assert last["meta_info"]["completion_tokens"] == 12 and last["meta_info"]["finish_reason"]["type"] == "length"


def test_flush_cache_text_and_unknown_route(served):
    req = urllib.request.Request(served["base"] + "/flush_cache", data=b"")
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.read().decode().startswith("Cache flushed.\nPlease check backend logs")
    status, body = http_json(served["base"] + "/ready")  # 0.5.12.post1 has no /ready
    assert status == 404 and body == {"detail": "Not Found"}


def test_log_lines_are_sglangs(served):
    lines = served["log"].read_text().splitlines()
    assert "NOT SGLang" in lines[0]
    assert all(LOG_PREFIX.match(line) for line in lines[:3])
    text = "\n".join(lines)
    assert "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1" in text
    assert "Max running requests is reset to 48 for speculative decoding." in text
    assert READY in text
    decode = [line for line in lines if "Decode batch" in line]
    assert decode and re.search(r"Decode batch, #running-req: 1, #token: \d+, token usage: 0\.00, accept len: "
                                r"\d+\.\d\d, accept rate: \d\.\d\d, cuda graph: False, gen throughput \(token/s\): "
                                r"\d+\.\d\d, #queue-req: 0$", decode[0])


def test_sigterm_stops_the_group_promptly(served):
    transport, handle = served["transport"], served["handle"]
    started = time.monotonic()
    assert asyncio.run(transport.kill_group(handle, grace=5))
    assert time.monotonic() - started < 3
    assert asyncio.run(transport.exit_status(handle)) == 0
    assert "Received SIGTERM" in served["log"].read_text()
