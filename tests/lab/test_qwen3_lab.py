"""The flagship follows a non-Llama target class end to end: the lab's on-demand Qwen3 target
(``orchestrator lab build --target-class qwen3``: orchestrator/lab/building/class_lab.py, 8 layers, shipped) with its seed-wiring draft,
served by the lab's SGLang stand-in (0.5.12.post1) as a real host looks (no lab-only fixed flags).

What only a Qwen3 target shows: SGLang 0.5.12.post1 runs ``Qwen3ForCausalLM.set_eagle3_layers_to_capture``
(srt/models/qwen3.py) and captures in ``Qwen2Model.forward`` (srt/models/qwen2.py, which ``Qwen3Model`` inherits),
whose loop can capture the embedding output where Llama's raises. So the embedding-first draft that has no servable fix
on the Llama lab (tests/lab/test_flagship_scenarios.py) gets one here (eagle_config ids with -1, the embedding), and
the benchmark of the fixed server verifies it. One flagship run, shared by the tests of this file.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from orchestrator.lab.building.build import seed_wiring, sglang_wiring
from tests.lab.class_flagship import CLASS_STEP, READS, Run, class_lab, flagship_once


@pytest.fixture(scope="session")
def qwen3_lab() -> Path:
    return class_lab("qwen3")


@pytest.fixture(scope="session")
def qwen3_flagship(qwen3_lab: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[], Awaitable[Run]]:
    """``await qwen3_flagship()``: the flagship on the Qwen3 lab's seed-wiring scenario, run once per session."""
    return flagship_once(qwen3_lab, lambda: tmp_path_factory.mktemp("qwen3-flagship"))


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
    states = run.states()
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
    verdict = run.verdict()
    assert "**Root cause:" in verdict and "[`wiring`]" in verdict and "**No servable fix**" not in verdict
    assert "fix verified (servable fix on SGLang 0.5.12.post1" in verdict, verdict


def test_a_lab_directory_keeps_its_one_target_class(tmp_path: Path) -> None:
    """Cheap: an unknown class is refused by name, and a directory holding the Llama lab's target is never turned
    into a Qwen3 lab (nothing is trained to find that out)."""
    from orchestrator.errors import UserInputError
    from orchestrator.lab.building.class_lab import CLASS_LABS, build_class_lab, check_target_class

    with pytest.raises(UserInputError, match="unknown lab target class 'mamba'"):
        check_target_class("mamba")
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (target / ".complete").write_text("ok\n")
    with pytest.raises(UserInputError, match="already holds the default lab's Llama target"):
        build_class_lab(CLASS_LABS["qwen3"], tmp_path, {}, lambda *_: None, {})
    with pytest.raises(UserInputError, match="already holds a Qwen3ForCausalLM target: give another --dir for the Kimi"):
        (target / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
        build_class_lab(CLASS_LABS["kimi"], tmp_path, {}, lambda *_: None, {})
