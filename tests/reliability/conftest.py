"""Fixtures for the reliability tests (issue 19): the core tests' CLI, playbook and marker fixtures."""

from __future__ import annotations

# Re-exported so pytest finds them here too: the same real `python -m orchestrator` and process markers.
from tests.core.conftest import cli, cli_inproc, local_inventory, marker, write_playbook  # noqa: F401
