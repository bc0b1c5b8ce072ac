"""`server: {nodes: N}`: one logical lab server over two hosts of the inventory (both this machine, each with its
own state dir), really coordinated: rank 0 serves only once rank 1 joined, bench goes to rank 0, stop ends both
ranks. And the mistakes: too few hosts, the rank flags among `flags`, vLLM's multi-node."""

from __future__ import annotations

import sys
from pathlib import Path

from orchestrator.inventory import Inventory
from tests.servers.conftest import REPO, listening, processes_with, run_playbook


def pair_inventory(tmp_path: Path, lab_models: dict[str, str], **extra: object) -> Inventory:
    def host(name: str) -> dict[str, object]:
        (tmp_path / name).mkdir(exist_ok=True)
        return {"transport": "local", "python": sys.executable, "state_dir": str(tmp_path / name),
                "env": {"PYTHONPATH": str(REPO)}, "vars": {"engine": "lab", **lab_models, **extra}}

    return Inventory.model_validate({"hosts": {"a": host("a"), "b": host("b")},
                                     "groups": {"pair": {"hosts": ["a", "b"]}}, "default_hosts": "pair"})


def test_one_server_over_two_hosts(tmp_path: Path, lab_models: dict[str, str], marker: str) -> None:
    playbook = f"""
name: two-nodes
hosts: pair
steps:
  - server: {{name: big, nodes: 2, model: "{{{{ target }}}}", env: {{MARK: {marker}}}, ready_timeout: 180}}
    register: srv
  - bench: {{server: big, n: 2, max_new_tokens: 8}}
    hosts: a
    register: b
  - server: {{action: status, name: big}}
    hosts: a
    register: st
  - server: {{action: stop, name: big}}
    hosts: a
"""
    ran = run_playbook(playbook, pair_inventory(tmp_path, lab_models), tmp_path / "sessions")
    assert ran.status == "ok", [e.get("error") for e in ran.of_type("step_finished")]
    start = ran.step("s1")
    assert [r["host"] for r in start["results"]] == ["a"]  # one run, not one per host
    srv = ran.result("s1", "a")["result"]
    assert srv["nodes"] == 2 and srv["hosts"] == ["a", "b"]
    ranks = srv["ranks"]
    assert [(r["rank"], r["host"]) for r in ranks] == [(0, "a"), (1, "b")]
    dist = ranks[0]["command"][ranks[0]["command"].index("--dist-init-addr") + 1]
    for r in ranks:  # the engine's own flags, the same rendezvous for both
        argv = r["command"]
        assert argv[argv.index("--nnodes") + 1] == "2" and argv[argv.index("--node-rank") + 1] == str(r["rank"])
        assert argv[argv.index("--dist-init-addr") + 1] == dist
    assert dist.startswith("127.0.0.1:")
    # each rank's process lives under its own host's state dir, and rank 1 really joined rank 0
    assert ranks[0]["log_path"].startswith(str(tmp_path / "a")) and ranks[1]["log_path"].startswith(str(tmp_path / "b"))
    logs = "".join(e["text"] for e in ran.of_type("output") if e["stream"] == "server_log")
    assert "rank 1 joined" in logs  # rank 0's log, streamed while it waited
    assert "joined rank 0" in ran.result("s4", "a")["result"]["ranks"][1]["log_tail"]  # kept by the stop
    assert ran.result("s2", "a")["result"]["completed"] == 2  # bench went to rank 0's url
    assert ran.result("s3", "a")["result"]["alive"] is True
    ready = [e for e in ran.of_type("server_ready")]
    assert len(ready) == 1 and ready[0]["ranks"] == ["a", "b"] and ready[0]["host"] == "a"
    stopped = ran.of_type("server_stopped")
    assert len(stopped) == 1 and stopped[0]["detail"] is None
    assert not processes_with(marker), "a rank survived the stop"
    assert not listening(srv["port"])
    from orchestrator.session.report import render_report

    report = render_report(ran.directory)
    assert "a:" in report and "2 nodes: a, b" in report  # one server in the report, its ranks named


def test_rank_mistakes_are_clear_errors(tmp_path: Path, lab_models: dict[str, str], marker: str) -> None:
    playbook = f"""
name: mistakes
hosts: a
steps:
  - server: {{name: three, nodes: 3, model: "{{{{ target }}}}", env: {{MARK: {marker}}}}}
    ignore_errors: true
  - server: {{name: flagged, model: "{{{{ target }}}}", flags: {{nnodes: 2}}}}
    ignore_errors: true
  - server: {{name: v, engine: lab-vllm, nodes: 2, hosts: pair, model: "{{{{ target }}}}"}}
    hosts: pair
    ignore_errors: true
"""
    ran = run_playbook(playbook.replace(", hosts: pair", ""), pair_inventory(tmp_path, lab_models),
                       tmp_path / "sessions")
    errors = {e["step_id"]: e.get("error") or "" for e in ran.of_type("step_finished")}
    assert "nodes: 3 needs 3 hosts, but the step has 1 (a)" in errors["s1"], errors
    assert "'nnodes' is set per rank by the step itself; use the step's 'nodes: N'" in errors["s2"], errors
    assert "engine 'lab-vllm' cannot be started across nodes" in errors["s3"], errors
    assert "Ray" in errors["s3"]
    assert not ran.of_type("server_started")  # nothing was started by any of them
    assert not processes_with(marker)


def test_a_worker_that_cannot_start_fails_the_server_saying_how(tmp_path: Path, lab_models: dict[str, str],
                                                                 marker: str) -> None:
    """Host b's python is broken: its rank exits at once, the start fails then (not at the ready timeout: rank 0
    alone would wait for it), the error names the worker's exit and its own lines; rank 0 is stopped."""
    inventory = pair_inventory(tmp_path, lab_models)
    broken = tmp_path / "broken-python"
    broken.write_text("#!/bin/sh\necho 'this node has no python for the server' >&2\nexit 3\n")
    broken.chmod(0o755)
    inventory.hosts["b"] = inventory.hosts["b"].model_copy(update={"python": str(broken)})
    playbook = f"""
name: broken-worker
hosts: pair
steps:
  - server: {{name: big, nodes: 2, model: "{{{{ target }}}}", env: {{MARK: {marker}}}, ready_timeout: 300}}
    register: srv
"""
    ran = run_playbook(playbook, inventory, tmp_path / "sessions")
    assert ran.status == "failed"
    error = ran.step("s1")["error"]
    assert "lost rank 1 on b during start-up: it exited with code 3 (rank 0 of a 2-node server)" in error, error
    assert "this node has no python for the server" in error, error  # the worker's own last lines
    srv = ran.result("s1", "a")["result"]
    assert srv["ranks"][1]["command"][0] == str(broken)  # each rank runs with its own host's python
    assert srv["ranks"][1]["exit_code"] == 3
    assert [e["server_id"] for e in ran.of_type("server_failed")] == ["big"]
    assert not processes_with(marker)
