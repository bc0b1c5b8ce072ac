"""The lab in vLLM mode through the `server` and `bench` steps (lab-vllm adapter, local transport): vLLM's command
line and JSON speculative config, readiness, the resolved config read from its startup log, acceptance from the
/metrics counters, and vLLM's reading of the draft's aux layer ids (the lab draft is trained on [0, 6, 11])."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.inventory import Inventory
from tests.servers.conftest import REPO, make_inventory, run_playbook

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.fixture
def vllm_inventory(state_dir: Path, lab_models: dict[str, str]) -> Inventory:
    inv = make_inventory(state_dir, **lab_models)
    inv.hosts["localhost"].vars["engine"] = "lab-vllm"
    inv.hosts["localhost"].env["PYTHONPATH"] = str(REPO)  # no vllm tree: the lab follows the newest rules read
    return inv


SPEC = "{speculative-config: {method: eagle3, model: '{{ draft }}', num_speculative_tokens: 5}}"


def test_vllm_mode_serves_measures_and_reads_the_ids(vllm_inventory: Inventory, tmp_path: Path) -> None:
    ran = run_playbook(f"""
name: lab vllm
steps:
  - server: {{name: v, model: "{{{{ target }}}}", ready_timeout: 180, flags: {SPEC}}}
    register: srv
  - bench: {{server: v, n: 3, max_new_tokens: 24}}
    register: b
  - server: {{action: restart, name: v, flags: {{lab-capture-layers: "0,6,11"}}}}
    register: srv2
  - bench: {{server: v, n: 3, max_new_tokens: 24, stream: true}}
    register: b2
  - server: {{action: stop, name: v}}
""", vllm_inventory, tmp_path / "sessions")
    assert ran.status == "ok", [e.get("error") for e in ran.of_type("step_finished")]
    srv, b, srv2, b2 = (ran.result(s)["result"] for s in ("s1", "s2", "s3", "s4"))
    assert srv["engine"] == "lab-vllm" and srv["command"][1:4] == ["-m", "orchestrator.lab.stand_in.vllm_server", "serve"]
    assert srv["effective"]["speculative_config.method"] == "eagle3"
    assert srv["effective"]["speculative_config.num_speculative_tokens"] == 5 and srv["overrides"] == []
    assert "NOT vLLM" in srv["log_tail"] and "(2, 6, 9)" in srv["log_tail"]  # no ids in the config: the default
    for bench in (b, b2):
        stats = bench["spec_decode"]
        assert bench["completed"] == 3 and stats["drafts"] > 0 and stats["draft_tokens"] == 5 * stats["drafts"]
        assert bench["server_accept_length"] == round(1 + stats["accepted_tokens"] / stats["drafts"], 4)
        assert len(stats["per_position"]) == 5 and all(r is not None for r in stats["per_position"])
        # per request from the counters' change around it (sequential requests): averages to the run's figure
        assert all(r["accept_length"] >= 1.0 for r in bench["per_request"])
        assert bench["accept_length_ci"] is not None
    # the trained wiring accepts clearly more than vLLM's default feed
    assert b2["accept_length_ci"][0] > b["accept_length_ci"][1], (b["accept_length"], b2["accept_length"])
    assert "lab-only --lab-capture-layers" in srv2["log_tail"] or srv2["effective"]


def test_vllm_mode_refuses_what_it_does_not_implement(vllm_inventory: Inventory, tmp_path: Path) -> None:
    ran = run_playbook("""
name: lab vllm refusals
steps:
  - server: {name: v, model: "{{ target }}", ready_timeout: 120,
             flags: {speculative-config: {method: eagle, model: "{{ draft }}", num_speculative_tokens: 3}}}
    register: srv
    ignore_errors: true
""", vllm_inventory, tmp_path / "sessions")
    srv = ran.result("s1")
    assert srv["status"] == "failed"
    assert "eagle3 only" in srv["error"] and "exited with code 1" in srv["error"]
