"""The bundled playbook.schema.json (referenced by the bundled playbooks for editor completion, shipped beside them)
is current."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.playbook.schema import playbook_schema

SCHEMA = Path(__file__).resolve().parents[2] / "orchestrator" / "playbooks" / "playbook.schema.json"


def test_committed_schema_matches_the_models() -> None:
    assert json.loads(SCHEMA.read_text()) == playbook_schema(), "run: orchestrator schema -o orchestrator/playbooks/playbook.schema.json"


def test_schema_knows_every_step_kind() -> None:
    kinds = {v["title"] for v in playbook_schema()["$defs"]["step"]["oneOf"]}
    assert kinds == {"shell", "set", "probe", "read_source", "draft_test", "server", "bench", "sweep", "tune", "env_diff", "reconcile"}
