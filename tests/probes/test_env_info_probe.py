"""env_info on this machine: shape, and facts we can check independently."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import socket
import sys

import pytest

from orchestrator.probes import parse_result
from orchestrator.probes.models import EnvInfoResult


def test_env_info_shape_and_facts(run_probe, tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        run = run_probe("env_info", {"disk_paths": [str(tmp_path), "/definitely/not/here"], "packages": ["pydantic"],
                                     "torch_timeout_s": 90})
    finally:
        listener.close()
    res = parse_result("env_info", run.outcome)
    assert isinstance(res, EnvInfoResult)
    assert res.python["executable"] == sys.executable
    assert res.cpu_count == os.cpu_count()
    assert res.memory and res.memory["total_bytes"] > res.memory["available_bytes"] > 0
    assert res.disk[0].free_bytes == pytest.approx(shutil.disk_usage(tmp_path).free, abs=1 << 30)
    assert res.disk[1].error and res.disk[1].free_bytes is None
    assert res.packages["pydantic"] == importlib.metadata.version("pydantic")
    assert res.packages["sglang"] is None or isinstance(res.packages["sglang"], str)
    assert {"127.0.0.1", port} <= {p.address for p in res.listening_ports} | {p.port for p in res.listening_ports}
    if shutil.which("nvidia-smi") is None:
        assert res.gpus == [] and res.nvidia_smi == {"present": False}
    torch_installed = res.packages["torch"] is not None
    assert res.torch is not None and res.torch.importable == torch_installed
    if torch_installed:
        assert res.torch.version == importlib.metadata.version("torch")


def test_a_broken_torch_cannot_break_the_probe(run_probe, tmp_path):
    fake = tmp_path / "fake_site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("import os\nos._exit(7)\n")  # a torch that kills its process on import
    run = run_probe("env_info", {"disk_paths": ["/"], "torch_timeout_s": 30},
                    env={"PYTHONPATH": str(tmp_path / "fake_site")})
    assert run.outcome.ok, run.outcome.error
    torch = run.result["torch"]
    if run.result["packages"]["torch"]:  # metadata says installed, but importing it dies: reported, not fatal
        assert torch["importable"] is False and "exit status 7" in torch["error"]
    else:
        assert torch == {"importable": False, "error": "torch is not installed"}
