"""The flagship against the lab's vLLM STAND-IN (``engine: lab-vllm``: the lab's own server in vLLM mode, vLLM's
loading rules read from the cached vllm 0.33.0 tree, that tree's code read by symbol/pattern), on every vLLM lab
scenario. No real vLLM runs here: that is tests/lab/test_flagship_real_vllm.py. It must confirm the planted fault and
no other, and the report must name the cause."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.hypotheses.board import HypothesisBoard
from orchestrator.lab.building.build import LabPaths, seed_wiring
from orchestrator.lab.building.inventory import ensure_lab, lab_inventory
from orchestrator.lab.building.vllm_lab import VLLM_SCENARIO_NAMES, vllm_scenarios
from orchestrator.playbook.loader import load_playbook
from orchestrator.session.reader import read_session
from orchestrator.session.recording import build_runner, run_with_signals, write_reports
from tests.lab.planted_fault import FAULTS

REPO = Path(__file__).resolve().parents[2]
FLAGSHIP = REPO / "playbooks" / "eagle3.yaml"
MUST_REFUTE = {
    "seed-wiring": {"d2t_mapping", "lm_head_missing", "wrong_algorithm", "architecture", "flags_override",
                    "layer_id_convention"},
    # right for vLLM (top-level ids as HF indices), wrong for SGLang: nothing to find on vLLM
    "off-by-one": {"wiring", "layer_id_convention", "d2t_mapping", "lm_head_missing", "wrong_algorithm"},
    "sglang-ids": {"d2t_mapping", "lm_head_missing", "wrong_algorithm", "flags_override"},
    "direct-d2t": {"lm_head_missing", "wrong_algorithm"},
    "no-lm-head": {"d2t_mapping", "wrong_algorithm"},
    # issue 26: vLLM keeps the distinct embedding the checkpoint ships; the counterfactual names it, the fix verifies
    # it (the other new faults: bench/issue26_faults.py)
    "own-embedding": {"d2t_mapping", "lm_head_missing", "wrong_algorithm"},
}
#: scenarios another test here runs (and checks with assert_names_the_planted_fault_on_vllm), so that CI runs each
#: flagship once: seed-wiring as a real vLLM host sees the stand-in (no lab-only flags), with the user's traffic
ELSEWHERE = {"seed-wiring": "test_flagship_on_the_vllm_stand_in_derives_and_verifies_a_servable_fix_without_lab_flags"}
#: healthy: CI's vLLM runs of the healthy draft are its harmless copies, tied-head and bf16-extra-keys, nothing to find
#: on either (tests/lab/test_field_reading_flagship.py); healthy's own run is bench/engine_scenarios.py --engine vllm
BENCH_ONLY = {"healthy", "trained-embedding", "attention-heads", "rope-theta", "shuffled-draft",
              "tied-head", "eps-config", "no-d2t",
              "norm-output", "vocab-undeclared", "hidden-size", "bf16-extra-keys",
              "residual-norm", "compiled-prefix", "model-prefix", "short-context"}  # tied-head: test_field_reading_flagship.py


async def run_flagship(scenario: str, lab: LabPaths, sessions: Path) -> tuple[Path, str]:
    ensure_lab(scenario, root=lab.root, engine="vllm")
    inventory = lab_inventory(scenario, root=lab.root, engine="vllm")
    playbook = load_playbook(FLAGSHIP, extra_names=inventory.host_vars("lab"))
    engine, directory = build_runner(playbook, inventory, sinks=[], sessions_dir=sessions)
    outcome = await run_with_signals(engine)
    write_reports(directory)
    return directory, outcome.status


@pytest.mark.lab
@pytest.mark.slow
@pytest.mark.parametrize("scenario", [s for s in MUST_REFUTE if s not in ELSEWHERE])
async def test_flagship_on_the_vllm_stand_in_names_the_planted_fault(scenario: str, lab: LabPaths, tmp_path: Path) -> None:
    assert set(MUST_REFUTE) | BENCH_ONLY == set(VLLM_SCENARIO_NAMES) and not set(MUST_REFUTE) & BENCH_ONLY
    directory, status = await run_flagship(scenario, lab, tmp_path / "sessions")
    assert status == "ok"
    assert_names_the_planted_fault_on_vllm(scenario, directory, lab)


def assert_names_the_planted_fault_on_vllm(scenario: str, directory: Path, lab: LabPaths) -> None:
    """The planted fault confirmed and no other, served by the lab's vLLM mode, the report naming the cause."""
    events = read_session(directory).events
    states = {hid: entry.state for hid, entry in HypothesisBoard.from_events(events).entries.items()}
    must_confirm = set(vllm_scenarios(lab.root, lab.num_layers)[scenario].confirms)
    confirmed = {hid for hid, state in states.items() if state == "confirmed"}
    assert confirmed & FAULTS == must_confirm, f"{scenario}: {states}"
    for hid in MUST_REFUTE[scenario]:
        assert states[hid] == "refuted", f"{scenario}: {hid} is {states[hid]} ({states})"
    text = "\n".join(str(e.model_dump()) for e in events)
    assert "lab-vllm" in text and "vllm.entrypoints" not in text  # the lab's vLLM mode served, not a real vLLM
    assert "orchestrator.lab.stand_in.vllm_server" in text and "Initializing a V1 LLM engine (v0.33.0)" in text
    report = (directory / "report.md").read_text()
    for hid in must_confirm:
        assert hid in report


@pytest.mark.lab
@pytest.mark.slow
async def test_flagship_on_the_vllm_stand_in_derives_and_verifies_a_servable_fix_without_lab_flags(
        lab: LabPaths, tmp_path: Path) -> None:
    """The lab's vLLM stand-in, as a real vLLM host looks to the flagship (no ``fixed_flags``): the seed's embedding-first draft is
    served by top-level ids in vLLM's convention (HF indices, read by vLLM 0.33's runners), written beside the draft,
    and the restart with ``--speculative-config`` pointed at it is verified on intervals. With the user's own traffic
    (issue 40: playbooks/traffic-example.jsonl, ``-e traffic=``) replayed as written on the candidate and on the fix:
    acceptance per category, with its hypothesis decided on intervals, and no prompt text in the session."""
    ensure_lab("seed-wiring", root=lab.root, engine="vllm")
    inventory = lab_inventory("seed-wiring", root=lab.root, engine="vllm", real_host=True)
    traffic = REPO / "playbooks" / "traffic-example.jsonl"
    inventory.hosts["lab"].vars["traffic"] = str(traffic)
    host_vars = inventory.host_vars("lab")
    assert "fixed_flags" not in host_vars
    playbook = load_playbook(FLAGSHIP, extra_names=host_vars)
    engine, directory = build_runner(playbook, inventory, sinks=[], sessions_dir=tmp_path / "sessions")
    outcome = await run_with_signals(engine)
    write_reports(directory)
    session = read_session(directory)
    assert outcome.status == "ok"
    assert_names_the_planted_fault_on_vllm("seed-wiring", directory, lab)  # CI's one vLLM seed-wiring run
    assert "lab-capture-layers" not in (directory / "events.jsonl").read_text()  # no lab-only flag anywhere
    fix = next(r.result for e in session.events if getattr(e, "name", "") == "Derive the fix this host can serve"
               for r in getattr(e, "results", []))
    assert fix["fix_status"] == "fix" and fix["engine"]["engine"] == "vllm", fix["summary"]
    corrected = Path(fix["draft"])
    assert corrected.parent == Path(host_vars["draft"]).parent
    assert json.loads((corrected / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] == \
        seed_wiring(lab.num_layers)  # vLLM: HF indices as they are, no +1
    assert fix["flags"]["speculative-config"]["model"] == str(corrected)
    wiring = HypothesisBoard.from_events(session.events).entries["wiring"]
    assert wiring.state == "confirmed"
    verified = [h for h in wiring.history if h.state == "confirmed" and "fix verified" in (h.evidence or "")]
    assert verified and "servable fix on vLLM 0.33.0" in (verified[-1].evidence or ""), \
        [h.evidence for h in wiring.history]
    verdict = (directory / "report.md").read_text().split("## Verdict", 1)[1].split("\n## ", 1)[0]
    assert "**Fix**" in verdict and str(corrected) in verdict
    # the traffic, replayed on both servers: every request answered and measured, per category with intervals
    for step in ("Your traffic on the candidate configuration", "Your traffic on the fix"):
        [replay] = [r.result for e in session.events if getattr(e, "name", "") == step
                    for r in getattr(e, "results", [])]
        table = replay["traffic"]
        assert table["requests"] == 24 and [e["category"] for e in table["by_category"]] == ["python", "prose"]
        assert all(e["measured"] == 12 and 1.0 <= e["accept_length_ci"][0] for e in table["by_category"]), table
    board = HypothesisBoard.from_events(session.events)
    traffic_entry = board.entries["traffic_category"]
    assert traffic_entry.state in ("supported", "inconclusive")  # decided on intervals, never confirmed
    assert "your traffic on the fix" in (traffic_entry.history[-1].evidence or "")
    # the same requests with frequency_penalty 1: the stand-in penalises the target's logits as vLLM does, and the
    # verdict cites the installed vLLM's lines for it (held against real vLLM in test_lab_vs_vllm.py)
    sampling = board.entries["traffic_sampling"]
    assert sampling.state == "supported", [h.evidence for h in sampling.history]
    said = sampling.history[-1].evidence or ""
    settings = ["temperature=0", "temperature=0 frequency_penalty=1"]
    assert settings[1] in said and "v1/sample/rejection_sampler.py:" in said, said
    # replayed offline as the stand-in serves it (penalties on the target's logits): every group's prediction
    # overlaps what the server measured, and the counterfactual penalises the draft too
    [offline] = [r.result for e in session.events if getattr(e, "name", "") ==
                 "Your traffic offline, reconciled with the servers" for r in getattr(e, "results", [])]
    assert offline["decision"] == "reconciled", offline["verdict"]
    fixed_offline = offline["by_name"]["fixed"]
    assert [r["sampling"] for r in fixed_offline["by_sampling"]] == ["temperature=0", settings[1]]
    [mended] = fixed_offline["draft_penalised"]
    assert mended["sampling"] == settings[1] and mended["requests"] == 12, mended
    assert "the offline replay reproduces it" in said, said
    report = (directory / "report.md").read_text()
    assert "## Acceptance on your traffic" in report and "| fixed | prose | 12 / 12 |" in report
    assert "### Your traffic offline, as the server serves it" in report
    # its own prompts (the prose ones; the python ones are the bundled prompts the other steps send) never recorded
    own = [json.loads(line)["prompt"] for line in traffic.read_text().splitlines()
           if line.startswith("{") and json.loads(line)["category"] == "prose"]
    logged = (directory / "events.jsonl").read_text() + report
    assert len(own) == 12 and not [p for p in own if p in logged]
