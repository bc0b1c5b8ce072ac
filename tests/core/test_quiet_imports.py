"""Issue 60: every SSH run printed ten lines of cryptography's DSA deprecation warnings (asyncssh's import); the
transports import asyncssh quietly, and only those warnings are silenced."""

from __future__ import annotations

import subprocess
import sys

from tests.core.conftest import subprocess_env


def test_the_ssh_transport_imports_without_a_warning_on_stderr() -> None:
    code = "import orchestrator.transport.ssh, orchestrator.transport.known_hosts, orchestrator.cli"
    env = {k: v for k, v in subprocess_env().items() if k != "PYTHONWARNINGS"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "DSA is deprecated" not in done.stderr and done.stderr == "", done.stderr
