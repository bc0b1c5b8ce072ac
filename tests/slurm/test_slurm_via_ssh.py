"""`via: ssh`: a Slurm entry whose nodes are reached over SSH (at Slurm's NodeAddr) instead of srun. On this one
machine each test node has its own loopback NodeAddr (n1 = 127.0.0.2, ...) and the loopback sshd of
tests/sshd_fixture.py listens on those addresses, so "ssh to the node" is a real SSH connection to that address."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster
from sshd_fixture import SshdServer

from tests.core.conftest import subprocess_env
from tests.servers.conftest import processes_with

pytestmark = [pytest.mark.lab, pytest.mark.torch]

PLAYBOOK = """\
name: via-ssh
hosts: cluster
steps:
  - name: where am I
    shell: 'echo "job=${SLURM_JOB_ID:-none} ssh=$SSH_CONNECTION"'
  - server: {name: big, nodes: 2, model: "{{ target }}", ready_timeout: 300}
    register: srv
  - bench: {server: big, n: 2, max_new_tokens: 8}
    hosts: "cluster[0]"
"""


def test_nodes_reached_over_ssh_fan_out_and_a_two_node_server(
        cluster: SlurmCluster, sshd_server: SshdServer, lab_root: Path, tmp_path: Path, marker: str) -> None:
    from orchestrator.lab.building.inventory import lab_env, lab_host_vars

    sshd = sshd_server
    entry = {"partition": cluster.partition, "nodes": 2, "time": "10", "via": "ssh", "user": sshd.user,
             "port": sshd.port, "key": str(sshd.client_key_path), "known_hosts": str(sshd.known_hosts),
             "ssh_config": str(sshd.ssh_config), "state_dir": str(tmp_path / "state"), "python": sys.executable,
             "env": {**lab_env(lab_root, "sglang"), "MARK": marker},
             "vars": lab_host_vars("healthy", root=lab_root, engine="sglang")}
    (tmp_path / "inv.yaml").write_text(json.dumps({"slurm": {"cluster": entry}}))
    (tmp_path / "pb.yaml").write_text(PLAYBOOK)
    result = subprocess.run([sys.executable, "-m", "orchestrator", "run", "pb.yaml", "-i", "inv.yaml", "--json"],
                            cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [log] = (tmp_path / "sessions").glob("*/events.jsonl")
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    notes = [e["text"] for e in events if e["type"] == "note_added"]
    assert any("nodes n1, n2 via ssh" in n for n in notes), notes
    where = {e["host"]: e["text"].split() for e in events if e["type"] == "output" and e["step_id"] == "s1"}
    # a real SSH session to each node's own address, outside any Slurm step
    assert sorted(where) == ["n1", "n2"] and all(w[0] == "job=none" for w in where.values()), where
    assert where["n1"][3] == "127.0.0.2" and where["n2"][3] == "127.0.0.3", where  # SSH_CONNECTION's server address
    assert all(w[4] == str(sshd.port) for w in where.values())
    start = next(e for e in events if e["type"] == "step_finished" and e["step_id"] == "s2")
    srv = start["results"][0]["result"]
    assert [r["host"] for r in start["results"]] == ["n1"] and srv["hosts"] == ["n1", "n2"]
    dist = srv["ranks"][1]["command"][srv["ranks"][1]["command"].index("--dist-init-addr") + 1]
    assert dist.startswith("127.0.0.2:")  # rank 0's NodeAddr: the worker on n2 joined it there
    bench = next(e for e in events if e["type"] == "step_finished" and e["step_id"] == "s3")
    assert bench["status"] == "ok" and bench["results"][0]["result"]["completed"] == 2
    assert any("released (scancel)" in n for n in notes), notes
    assert not processes_with(marker)
    assert cluster.wait_idle(15), cluster.jobs()

