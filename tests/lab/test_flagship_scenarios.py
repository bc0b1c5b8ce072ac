"""The diagnostic-power suite: the flagship playbook, end to end against every lab scenario, must confirm the
planted fault (and, on the healthy lab, no fault at all) — and the report must name the cause and its evidence."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.hypotheses.board import HypothesisBoard
from orchestrator.lab.build import LabPaths
from orchestrator.lab.inventory import lab_inventory
from orchestrator.playbook.loader import load_playbook
from orchestrator.session.reader import read_session
from orchestrator.session.runner import build_engine, run_with_signals, write_reports

REPO = Path(__file__).resolve().parents[2]
FLAGSHIP = REPO / "playbooks" / "eagle3.yaml"
FAULTS = {"wiring", "flags_override", "d2t_mapping", "lm_head_sharing", "wrong_algorithm", "layer_id_convention",
          "lm_head_missing", "architecture", "rope_mismatch"}

# scenario -> (hypotheses that must be confirmed, hypotheses that must be refuted)
EXPECTED = {
    "seed-wiring": ({"wiring"}, {"d2t_mapping", "lm_head_sharing", "lm_head_missing", "wrong_algorithm", "architecture"}),
    "healthy": (set(), {"wiring", "flags_override", "d2t_mapping", "lm_head_missing", "wrong_algorithm"}),
    "no-lm-head": ({"lm_head_missing"}, {"d2t_mapping", "wrong_algorithm"}),
    "direct-d2t": ({"d2t_mapping"}, {"lm_head_missing", "wrong_algorithm"}),
    "off-by-one": ({"layer_id_convention", "wiring"}, {"d2t_mapping", "lm_head_missing"}),
    "topk-override": ({"flags_override"}, {"wiring", "d2t_mapping", "lm_head_missing", "wrong_algorithm"}),
    "eagle-not-eagle3": ({"wrong_algorithm"}, {"wiring", "d2t_mapping", "lm_head_missing", "flags_override"}),
}


async def _run(scenario: str, lab: LabPaths, sessions: Path) -> tuple[Path, HypothesisBoard, str]:
    inventory = lab_inventory(scenario, root=lab.root)
    playbook = load_playbook(FLAGSHIP, extra_names=inventory.host_vars("lab"))
    engine, directory = build_engine(playbook, inventory, sinks=[], sessions_dir=sessions,
                                     extra_vars={"bench_n": 4, "bench_tokens": 48, "dt_prompts": 4, "dt_tokens": 48})
    outcome = await run_with_signals(engine)
    write_reports(directory)
    session = read_session(directory)
    return directory, HypothesisBoard.from_events(session.events), outcome.status


@pytest.mark.lab
@pytest.mark.slow
@pytest.mark.parametrize("scenario", list(EXPECTED))
async def test_flagship_names_the_planted_fault(scenario: str, lab: LabPaths, tmp_path: Path) -> None:
    directory, board, status = await _run(scenario, lab, tmp_path / "sessions")
    states = {hid: entry.state for hid, entry in board.entries.items()}
    must_confirm, must_refute = EXPECTED[scenario]
    confirmed = {hid for hid, state in states.items() if state == "confirmed"}
    assert confirmed & FAULTS == must_confirm, f"{scenario}: {states}"
    for hid in must_refute:
        assert states[hid] == "refuted", f"{scenario}: {hid} is {states[hid]} ({states})"
    assert status == "ok"

    report = (directory / "report.md").read_text()
    verdict = report.split("## Verdict", 1)[1].split("\n## ", 1)[0]
    if must_confirm:
        for hid in must_confirm:
            title = board.entries[hid].hypothesis.title
            assert f"**Root cause: {title}** [`{hid}`]" in verdict
        assert "Decisive evidence (step s" in verdict
    else:
        assert "**No hypothesis confirmed.**" in verdict
    assert (directory / "report.html").read_text().startswith("<!doctype html>")
