"""The exec policy, case by case: what runs without --allow-exec, what needs it, what never runs."""

from __future__ import annotations

import pytest

from orchestrator.errors import UserInputError
from orchestrator.inventory import ExecPolicy, Inventory

# (command, allowed by default, allowed with --allow-exec)
CASES = [
    ("sed -n 155,200p /site/sglang/srt/speculative/eagle_worker.py", True, True),
    ("cat a.py | grep -n get_embed_and_head 2>/dev/null", True, True),
    ("nvidia-smi -q -d MEMORY && uname -a", True, True),
    ("/opt/venv/bin/python -m pip show sglang", True, True),
    ("ls -la; df -h", True, True),
    ("sed -i s/a/b/ f", False, True),          # sed that writes
    ("sed -n '1p;e rm -rf x' f", False, True),  # sed that executes
    ("echo hi > /tmp/f", False, True),          # redirect into a file
    ("ls $(pwd)", False, True),                 # substitution: cannot be checked
    ("FOO=1 ls", False, True),                  # an assignment changes what runs
    ("python -c 'import os'", False, True),
    ("rm -rf /tmp/x", False, True),
    ("sudo ls", False, False),                  # deny beats --allow-exec
    ("cat ~/.ssh/id_ed25519", False, False),
    ("nvidia-smi -r", False, False),
    ("find / -name x -exec rm {} ;", False, False),
    ("ls && sudo reboot", False, False),        # every part of a list is checked
    ('echo "unclosed', False, True),
]


@pytest.mark.parametrize(("command", "default", "with_allow_exec"), CASES)
def test_default_policy(command: str, default: bool, with_allow_exec: bool) -> None:
    policy = ExecPolicy()
    assert (policy.refusal(command=command) is None) is default
    assert (policy.refusal(command=command, allow_exec=True) is None) is with_allow_exec


def test_argv_is_checked_as_one_command_and_inventory_rules_add_to_the_defaults() -> None:
    inv = Inventory.model_validate({
        "hosts": {"gpu1": {"exec_policy": {"defaults": False, "allow": ["nvidia-smi"]}}, "gpu2": {}},
        "exec_policy": {"allow": ["python3 -c 'print(1)'"], "deny": ["cat /etc/hostname"]},
    })
    gpu2 = inv.exec_policy_for("gpu2")
    assert gpu2.refusal(argv=["python3", "-c", "print(1)"]) is None
    assert gpu2.refusal(command="python3 -c 'print(1)'") is None
    assert "denied" in (gpu2.refusal(argv=["cat", "/etc/hostname"]) or "")
    assert gpu2.refusal(argv=["cat", "/etc/os-release"]) is None
    gpu1 = inv.exec_policy_for("gpu1")  # its own policy, without the read-only defaults
    assert gpu1.refusal(argv=["nvidia-smi"]) is None
    assert gpu1.refusal(argv=["cat", "/etc/os-release"]) is not None
    assert gpu1.refusal(argv=["sudo", "ls"], allow_exec=True) is None  # no default deny list either


def test_a_bad_regex_rule_is_an_inventory_error(tmp_path) -> None:
    from orchestrator.inventory import load_inventory

    path = tmp_path / "inv.yaml"
    path.write_text("hosts: {gpu1: {}}\nexec_policy:\n  allow: ['re:(unclosed']\n")
    with pytest.raises(UserInputError) as err:
        load_inventory(path)
    assert "not a valid regex" in str(err.value.message) and "inv.yaml" in str(err.value.message)
