"""The flagship follows a non-Llama target class end to end: the lab's on-demand Qwen3 target
(``orchestrator lab build --target-class qwen3``: orchestrator/lab/building/qwen3_lab.py, 8 layers, shipped) with its seed-wiring draft,
served by the lab's SGLang stand-in (0.5.12.post1) as a real host looks (no lab-only fixed flags).

What only a Qwen3 target shows: SGLang 0.5.12.post1 runs ``Qwen3ForCausalLM.set_eagle3_layers_to_capture``
(srt/models/qwen3.py) and captures in ``Qwen2Model.forward`` (srt/models/qwen2.py, which ``Qwen3Model`` inherits),
whose loop can capture the embedding output where Llama's raises. So the embedding-first draft that has no servable fix
on the Llama lab (tests/lab/test_flagship_scenarios.py) gets one here (eagle_config ids with -1, the embedding), and
the benchmark of the fixed server verifies it. One flagship run, shared by the tests of this file.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.hypotheses.board import HypothesisBoard
from orchestrator.lab.building.build import cache_dir, seed_wiring, sglang_wiring
from orchestrator.lab.building.builder import build_lab
from orchestrator.lab.building.inventory import lab_inventory
from orchestrator.playbook.loader import load_playbook
from orchestrator.session.reader import LoadedSession, read_session
from orchestrator.session.recording import build_runner, run_with_signals, write_reports

REPO = Path(__file__).resolve().parents[2]
FLAGSHIP = REPO / "playbooks" / "eagle3.yaml"
READS = "SGLang: which target layers are captured for the draft"
CLASS_STEP = "Which class runs the target, and where it captures the draft's hidden states"


@dataclass
class Run:
    root: Path
    directory: Path
    status: str
    seconds: float
    session: LoadedSession
    board: HypothesisBoard

    def results(self, name: str) -> list[dict[str, Any]]:
        return [r.result for e in self.session.events if getattr(e, "name", "") == name
                for r in getattr(e, "results", [])]


@pytest.fixture(scope="session")
def qwen3_lab() -> Path:
    """The Qwen3 lab of this worker: the package's shipped Qwen3 models, copied (tests/lab/test_qwen3_shipped.py
    holds them to the recipe; tests/lab/test_training_recipe.py trains the recipe at a reduced size)."""
    root = cache_dir() / f"lab-qwen3-test-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
    build_lab("seed-wiring", root=root, target_class="qwen3")
    return root


@pytest.fixture(scope="session")
def qwen3_flagship(qwen3_lab: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[], Awaitable[Run]]:
    """``await qwen3_flagship()``: the flagship on the Qwen3 lab's seed-wiring scenario, run once per session."""
    runs: list[Run] = []

    async def run() -> Run:
        if not runs:
            inventory = lab_inventory("seed-wiring", root=qwen3_lab, real_host=True)
            playbook = load_playbook(FLAGSHIP, extra_names=inventory.host_vars("lab"))
            engine, directory = build_runner(playbook, inventory, sinks=[],
                                             sessions_dir=tmp_path_factory.mktemp("qwen3-flagship"))
            started = time.monotonic()
            outcome = await run_with_signals(engine)
            seconds = round(time.monotonic() - started, 1)
            write_reports(directory)
            session = read_session(directory)
            runs.append(Run(qwen3_lab, directory, outcome.status, seconds, session,
                            HypothesisBoard.from_events(session.events)))
        return runs[0]

    return run


@pytest.mark.lab
@pytest.mark.slow
async def test_the_reads_follow_qwen3_into_its_own_files(qwen3_flagship: Callable[[], Awaitable[Run]]) -> None:
    run = await qwen3_flagship()
    n = json.loads((run.root / "target" / "config.json").read_text())["num_hidden_layers"]
    assert json.loads((run.root / "target" / "config.json").read_text())["architectures"] == ["Qwen3ForCausalLM"]
    (target,) = run.results(CLASS_STEP)
    assert target["found"] and target["followed"] == "Qwen3ForCausalLM.set_eagle3_layers_to_capture", target
    assert target["capture"]["file"] == "srt/models/qwen3.py", target["capture"]
    assert target["default_ids"] == sglang_wiring(n) and target["id_offset"] == 1
    # Qwen3Model has no forward of its own in 0.5.12.post1: the loop is Qwen2Model's, in qwen2.py
    assert (target["capture_loop"]["file"], target["capture_loop"]["symbol"]) == (
        "srt/models/qwen2.py", "Qwen2Model.forward"), target["capture_loop"]
    # the console's, the TUI's and the report's line names the loop too
    from orchestrator.actions.probe import target_capture_line

    assert "captured in Qwen2Model.forward at sglang/srt/models/qwen2.py:" in target_capture_line(target)
    (reads,) = run.results(READS)
    by_id = {r["id"]: r for r in reads["reads"]}
    capture, loop = by_id["capture"], by_id["capture_loop"]
    assert capture["found"] and capture["file"] == "srt/models/qwen3.py", capture
    assert [m["symbol"] for m in capture["matches"]] == ["Qwen3ForCausalLM.set_eagle3_layers_to_capture"]
    assert capture["expect"]["passed"], capture["expect"]
    assert loop["found"] and loop["file"] == "srt/models/qwen2.py", loop
    assert [m["symbol"] for m in loop["matches"]] == ["Qwen2Model.forward"]
    shown = "\n".join(t for m in loop["matches"] for _, t in m["lines"])
    assert "hidden_states + residual if residual is not None else hidden_states" in shown
    assert not any("llama.py" in str(r.get("file")) for r in reads["reads"] if r["id"] in ("capture", "capture_loop"))


@pytest.mark.lab
@pytest.mark.slow
async def test_the_verdict_on_qwen3_is_the_planted_wiring_with_a_servable_fix(
        qwen3_flagship: Callable[[], Awaitable[Run]]) -> None:
    run = await qwen3_flagship()
    n = json.loads((run.root / "target" / "config.json").read_text())["num_hidden_layers"]
    states = {hid: e.state for hid, e in run.board.entries.items()}
    assert run.status == "ok"
    assert states["wiring"] == "confirmed", states
    for hid in ("d2t_mapping", "lm_head_missing", "wrong_algorithm", "architecture"):
        assert states[hid] == "refuted", (hid, states)
    (dt,) = run.results("Standalone draft test over candidate wirings")
    # the class's rule: [2, N//2, N-3] served; the trained wiring is in the best tier (tied wirings are not ranked)
    assert dt["server_wiring"] == sglang_wiring(n) and dt["decision"] == "mismatch", dt["verdict"]
    trained = next(w for w in dt["wirings"] if w["wiring"] == seed_wiring(n))
    assert trained["tier"] == 1 and trained["beats_server"], trained
    best = dt["best"]["wiring"]
    assert best[0] == 0, best  # what the draft needs is the embedding output, which only this class's loop captures
    # the fix Qwen2Model.forward can serve: the embedding output is capturable (eagle_config id -1)
    (fix,) = run.results("Derive the fix this host can serve")
    assert fix["fix_status"] == "fix", fix["summary"]
    written = json.loads((Path(fix["draft"]) / "config.json").read_text())
    assert written["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [i - 1 for i in best], written
    (fixed_srv,) = run.results("Restart with the fix")
    assert fixed_srv["status"] == "ready", fixed_srv
    report = (run.directory / "report.md").read_text()
    verdict = report.split("## Verdict", 1)[1].split("\n## ", 1)[0]
    assert "**Root cause:" in verdict and "[`wiring`]" in verdict and "**No servable fix**" not in verdict
    assert "fix verified (servable fix on SGLang 0.5.12.post1" in verdict, verdict


def test_a_lab_directory_keeps_its_one_target_class(tmp_path: Path) -> None:
    """Cheap: an unknown class is refused by name, and a directory holding the Llama lab's target is never turned
    into a Qwen3 lab (nothing is trained to find that out)."""
    from orchestrator.errors import UserInputError
    from orchestrator.lab.building.qwen3_lab import build_qwen3_lab, check_target_class

    with pytest.raises(UserInputError, match="unknown lab target class 'mamba'"):
        check_target_class("mamba")
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (target / ".complete").write_text("ok\n")
    with pytest.raises(UserInputError, match="already holds the default lab's Llama target"):
        build_qwen3_lab(tmp_path, {}, lambda *_: None, {})
