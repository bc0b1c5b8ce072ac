"""The flagship on the lab reached over a real loopback sshd AS IF it were a real SGLang host: the inventory gives
no ``fixed_flags`` (the lab's own fixes use the lab-only ``--lab-capture-layers``), so the playbook has to derive a
fix SGLang itself can serve from the evidence, write it beside the draft and verify it with a restart.

The lab stands in for SGLang 0.5.23 here, whose layer boundary captures the embedding output: the seed's
embedding-first draft becomes servable with ``eagle_config`` ids ``[-1, N//2 - 1, N - 2]`` (on 0.5.12.post1 the
same derivation says why it cannot be served; tests/lab/test_flagship_scenarios.py checks that verdict).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from sshd_fixture import SshdServer, sshd_server  # noqa: E402,F401

from orchestrator.hypotheses.board import HypothesisBoard  # noqa: E402
from orchestrator.lab.building.build import LabPaths, seed_wiring  # noqa: E402
from orchestrator.lab.building.inventory import ensure_lab, lab_ssh_inventory  # noqa: E402
from orchestrator.playbook.loader import load_playbook  # noqa: E402
from orchestrator.session.reader import read_session  # noqa: E402
from orchestrator.session.recording import build_runner, run_with_signals, write_reports  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FLAGSHIP = REPO / "playbooks" / "eagle3.yaml"

pytestmark = [pytest.mark.lab, pytest.mark.ssh, pytest.mark.torch, pytest.mark.slow]


async def test_flagship_derives_and_verifies_a_servable_fix_without_lab_flags(
        lab: LabPaths, sshd_server: SshdServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setenv("ORCHESTRATOR_LAB_SGLANG", "0.5.23")
    ensure_lab("seed-wiring", root=lab.root)  # links the 0.5.23 tree beside the default one (nothing is retrained)
    fields = sshd_server.host_spec("lab")
    inventory = lab_ssh_inventory(fields["address"], fields["port"], fields["user"], fields["key"],
                                  fields["known_hosts"], scenario="seed-wiring", root=lab.root, real_host=True,
                                  ssh_config=fields["ssh_config"], state_dir=fields["state_dir"])
    host_vars = inventory.host_vars("lab")
    assert "fixed_flags" not in host_vars and host_vars["sglang_version"] == "0.5.23"
    playbook = load_playbook(FLAGSHIP, extra_names=host_vars)
    engine, directory = build_runner(playbook, inventory, sinks=[], sessions_dir=tmp_path / "sessions")
    outcome = await run_with_signals(engine)
    write_reports(directory)
    session = read_session(directory)
    board = HypothesisBoard.from_events(session.events)
    assert outcome.status == "ok"

    events = (directory / "events.jsonl").read_text()
    assert "lab-capture-layers" not in events  # no lab-only flag anywhere in the investigation

    fix = next(r.result for e in session.events if getattr(e, "name", "") == "Derive the fix this host can serve"
               for r in getattr(e, "results", []))
    assert fix["fix_status"] == "fix", fix["summary"]
    n = lab.num_layers
    corrected = Path(fix["draft"])
    assert corrected.parent == Path(host_vars["draft"]).parent  # beside the draft, never over it
    ids = json.loads((corrected / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert ids == [i - 1 for i in seed_wiring(n)]
    assert "eagle_aux_hidden_state_layer_ids" not in json.loads((Path(host_vars["draft"]) / "config.json")
                                                                .read_text()).get("eagle_config", {})

    # the restart used the derived flags and its benchmark verified the fix
    wiring = board.entries["wiring"]
    assert wiring.state == "confirmed"
    verified = [h for h in wiring.history if h.state == "confirmed" and "fix verified" in (h.evidence or "")]
    assert verified, [h.evidence for h in wiring.history]
    assert "servable fix on SGLang 0.5.23" in (verified[-1].evidence or "")
    report = (directory / "report.md").read_text()
    verdict = report.split("## Verdict", 1)[1].split("\n## ", 1)[0]
    assert "**Fix**" in verdict and str(corrected) in verdict
