"""The lab on a Slurm allocation's nodes: an inventory whose ``slurm:`` entry carries the lab's python, PYTHONPATH
and host vars, so playbooks written for the lab (the flagship among them) run on the test cluster's nodes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from slurm_cluster import SlurmCluster


def lab_slurm_inventory(tmp_path: Path, cluster: SlurmCluster, root: Path, marker: str, *, job: int | None = None,
                        **extra: Any) -> Path:
    """A 2-node entry ``cluster`` (a new allocation, or ``job``'s) with the healthy lab's vars and
    ``server_nodes: 2``; ``MARK=marker`` in every node process's environment; the playbook targets the first node."""
    from orchestrator.lab.building.inventory import lab_env, lab_host_vars

    entry: dict[str, Any] = {"nodes": 2, "state_dir": str(tmp_path / "state"), "python": sys.executable,
                             "env": {**lab_env(root, "sglang"), "MARK": marker},
                             "vars": {**lab_host_vars("healthy", root=root, engine="sglang"), "server_nodes": 2,
                                      **extra}}
    entry.update({"job": job} if job is not None else {"partition": cluster.partition, "time": "20"})
    path = tmp_path / "inv.yaml"
    path.write_text(json.dumps({"slurm": {"cluster": entry}, "default_hosts": "cluster[0]"}))
    return path
