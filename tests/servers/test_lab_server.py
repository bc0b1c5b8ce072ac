"""The `server` and `bench` steps against the real lab server (tiny CPU models, SGLang's API) over the
local transport: start, ready, effective args, the seed's override, bench, restart with other flags, stop."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.inventory import Inventory
from tests.servers.conftest import listening, processes_with, run_playbook

pytestmark = [pytest.mark.lab, pytest.mark.slow]

SEED_FLAGS = ("{speculative-algorithm: EAGLE3, speculative-draft-model-path: '{{ draft }}', speculative-num-steps: 1, "
              "speculative-eagle-topk: 1, speculative-num-draft-tokens: 16}")


def test_start_bench_restart_stop(lab_inventory: Inventory, tmp_path: Path, marker: str) -> None:
    ran = run_playbook(f"""
name: lab server lifecycle
steps:
  - server: {{name: spec, model: "{{{{ target }}}}", env: {{MARK: {marker}}}, ready_timeout: 180, flags: {SEED_FLAGS}}}
    register: srv
  - bench: {{server: spec, n: 3, max_new_tokens: 24, stream: true}}
    register: b
  - server: {{action: restart, name: spec, flags: {{speculative-num-steps: 3, speculative-num-draft-tokens: 4}}}}
    register: srv2
  - bench: {{server: spec, n: 3, max_new_tokens: 24}}
    register: b2
  - server: {{action: status, name: spec}}
    register: st
  - server: {{action: stop, name: spec}}
""", lab_inventory, tmp_path / "sessions")
    assert ran.status == "ok", [e.get("error") for e in ran.of_type("step_finished")]
    srv, b, srv2, b2 = (ran.result(s)["result"] for s in ("s1", "s2", "s3", "s4"))

    # The seed's red herring is one line of evidence: 16 draft tokens requested, 2 used.
    assert {"flag": "speculative_num_draft_tokens", "requested": 16, "effective": 2, "source": "server_info"} in [
        {k: o[k] for k in ("flag", "requested", "effective", "source")} for o in srv["overrides"]]
    assert "is adjusted to speculative_num_steps + 1" in srv["overrides"][0]["detail"]
    assert srv["effective"]["speculative_num_steps"] == 1
    assert srv["url"].startswith("http://127.0.0.1:") and srv["pgid"] > 1 and srv["ready_s"] > 0

    for bench in (b, b2):
        assert bench["completed"] == 3 and bench["errors"] == []
        assert bench["tok_s"] > 0 and bench["latency_p50"] <= bench["latency_p99"]
        assert bench["accept_length"] >= 1.0 and bench["verify_ct"] > 0
        # SGLang (and the lab) publish the average only after a decode log line: every 40 decode iterations
        if bench["verify_ct"] >= 40:
            assert bench["server_accept_length"] is not None
    assert b["ttft_p50"] is not None and b2["ttft_p50"] is None  # TTFT only when streaming

    # Restart: new flags merged onto the old ones, a new process group, no override left.
    assert srv2["effective"]["speculative_num_steps"] == 3
    assert srv2["effective"]["speculative_num_draft_tokens"] == 4
    assert srv2["overrides"] == [] and srv2["pgid"] != srv["pgid"]
    assert srv2["flags"]["speculative-algorithm"] == "EAGLE3"
    # with 3 draft steps the per-verify accept length can exceed 2 (with 1 step it cannot)
    assert b["accept_length"] <= 2.0

    st = ran.result("s5")["result"]
    assert st["alive"] is True and st["health"] == 200
    kinds = [(e["type"], e["server_id"]) for e in ran.events if e["type"].startswith("server_")]
    assert kinds == [("server_started", "spec"), ("server_ready", "spec"), ("server_stopped", "spec"),
                     ("server_started", "spec"), ("server_ready", "spec"), ("server_stopped", "spec")]
    ready = ran.of_type("server_ready")[0]
    assert ready["overrides"] and ready["overrides"][0]["flag"] == "speculative_num_draft_tokens"
    logs = "".join(e["text"] for e in ran.events if e["type"] == "output" and e["stream"] == "server_log")
    assert "The server is fired up and ready to roll!" in logs
    assert not listening(srv2["port"]) and processes_with(marker) == []
    with pytest.raises(ProcessLookupError):
        os.killpg(srv2["pgid"], 0)


def test_servers_stopped_at_session_end_unless_kept(lab_inventory: Inventory, tmp_path: Path, marker: str) -> None:
    ran = run_playbook(f"""
name: leftovers
steps:
  - server: {{name: a, model: "{{{{ target }}}}", env: {{MARK: {marker}}}}}
    register: a
  - server: {{name: b, model: "{{{{ target }}}}", env: {{MARK: {marker}}}, keep: true}}
    register: b
  - shell: "exit 3"
""", lab_inventory, tmp_path / "sessions")
    assert ran.status == "failed"
    a, b = ran.result("s1")["result"], ran.result("s2")["result"]
    try:
        assert not listening(a["port"])
        assert listening(b["port"])  # keep: true survives the session
        assert processes_with(marker) and all(os.getpgid(p) == b["pgid"] for p in processes_with(marker))
    finally:
        os.killpg(b["pgid"], 15)
