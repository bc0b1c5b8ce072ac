"""Ansible's `group[i]` / `group[i:j]` host patterns (how a playbook targets one node of a Slurm allocation), and
the per-rank argv of a multi-node server (the engine's own flags; vLLM refuses)."""

from __future__ import annotations

import pytest

from orchestrator.errors import UserInputError
from orchestrator.inventory import Inventory
from orchestrator.servers.base import LaunchSpec
from orchestrator.servers.registry import get_adapter


def inventory() -> Inventory:
    hosts = {name: {"transport": "local"} for name in ("n1", "n2", "n3", "gpu")}
    return Inventory.model_validate({"hosts": hosts, "groups": {"nodes": {"hosts": ["n1", "n2", "n3"]}},
                                     "slurm": {"cluster": {"nodes": 2}}})


@pytest.mark.parametrize(("pattern", "hosts"), [
    ("nodes[0]", ["n1"]), ("nodes[-1]", ["n3"]), ("nodes[1:]", ["n2", "n3"]), ("nodes[:2]", ["n1", "n2"]),
    ("nodes[0],gpu", ["n1", "gpu"]), ("all[3]", ["gpu"]), ("gpu[0]", ["gpu"]),
])
def test_indexed_patterns(pattern: str, hosts: list[str]) -> None:
    assert inventory().resolve(pattern) == hosts


@pytest.mark.parametrize(("pattern", "message"), [
    ("nodes[7]", "'nodes' has 3 host(s); the index picks none"),
    ("nodes[]", "empty index"),
    ("nodes[x]", "a host index is NAME[i] or NAME[i:j]"),
    ("nope[0]", "unknown host or group 'nope'"),
    ("cluster[0]", "Slurm allocation 'cluster' has no nodes yet"),
])
def test_index_mistakes_are_clear(pattern: str, message: str) -> None:
    with pytest.raises(UserInputError) as caught:
        inventory().resolve(pattern)
    assert message in caught.value.message


def test_an_indexed_slurm_entry_is_acquired_and_its_vars_are_known() -> None:
    from orchestrator.cli.common import inventory_var_names
    from orchestrator.slurm.session_allocations import targeted_entries

    inventory = Inventory.model_validate({"slurm": {"cluster": {"nodes": 2, "vars": {"x": 1}}}})
    assert targeted_entries(inventory, ["cluster[0]"]) == ["cluster"]
    assert targeted_entries(inventory, ["other", None]) == []
    names = inventory_var_names(inventory, {})
    assert {"x", "slurm_nodes", "slurm_node_addr"} <= names


def test_rank_argv_is_the_engines_own_flags() -> None:
    spec = LaunchSpec(model="/m", flags={"tp-size": 8}, port=30000, python="py")
    argv = get_adapter("sglang").rank_argv(spec, nnodes=2, rank=1, dist_init_addr="10.0.0.5:5000")
    assert argv == ["py", "-m", "sglang.launch_server", "--model-path", "/m", "--host", "127.0.0.1", "--port", "30000",
                    "--tp-size", "8", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.5:5000"]
    assert get_adapter("lab").rank_argv(spec, nnodes=2, rank=0, dist_init_addr="a:1")[1:3] == \
        ["-m", "orchestrator.lab.stand_in.server"]
    for engine in ("vllm", "lab-vllm"):
        with pytest.raises(UserInputError, match="cannot be started across nodes"):
            get_adapter(engine).rank_argv(spec, nnodes=2, rank=0, dist_init_addr="a:1")
    with pytest.raises(UserInputError, match="use the step's 'nodes: N'"):
        get_adapter("sglang").build_argv(LaunchSpec(model="/m", flags={"node-rank": 1}, port=1))
