"""Fixtures for the probe tests: real sglang source trees (pip --no-deps --target, cached) and a probe runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.probes import ProbeOutcome, new_nonce, parse_probe_output, probe_module
from tests.conftest import SGLANG_VERSIONS, install_vllm_tree  # noqa: F401 (the probe tests import it from here)


class ProbeRun:
    def __init__(self, outcome: ProbeOutcome, proc: subprocess.CompletedProcess[str]) -> None:
        self.outcome = outcome
        self.proc = proc

    @property
    def result(self) -> dict[str, Any]:
        assert self.outcome.ok, self.outcome.error
        assert self.outcome.result is not None
        return self.outcome.result


REPO = Path(__file__).resolve().parents[2]


def run_probe_script(script: Path | str, args: dict[str, Any], workdir: Path, *, python: str = sys.executable,
                     timeout: float = 120, env: dict[str, str] | None = None) -> ProbeRun:
    """Run a probe the way the transports do, with a fresh nonce: a module (``remote_probes.ROLE.NAME``) as
    ``python -m MODULE ARGS.json``, a script as ``python SCRIPT ARGS.json``; the package on the path, as pushed."""
    nonce = new_nonce()
    args_file = workdir / f"args-{nonce}.json"
    args_file.write_text(json.dumps(args))
    env = dict(os.environ, **(env or {}), ORCH_PROBE_NONCE=nonce, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    command = [python, "-m", script] if isinstance(script, str) else [python, str(script)]
    proc = subprocess.run([*command, str(args_file)], capture_output=True, text=True, timeout=timeout,
                          cwd=workdir, env=env)
    return ProbeRun(parse_probe_output(proc.stdout, nonce, exit_status=proc.returncode, stderr=proc.stderr), proc)


@pytest.fixture
def run_probe(tmp_path: Path) -> Callable[..., ProbeRun]:
    """``run_probe("sglang_source", {...})`` runs remote_probes/engine/sglang_source.py under the protocol."""

    def run(name: str, args: dict[str, Any], **kwargs: Any) -> ProbeRun:
        module = probe_module(name)
        assert module is not None, name
        return run_probe_script(module, args, tmp_path, **kwargs)

    return run


@pytest.fixture
def run_script(tmp_path: Path) -> Callable[..., ProbeRun]:
    """``run_script(path, args, timeout=..., env=...)``: any script under the protocol (for misbehaving probes)."""

    def run(script: Path, args: dict[str, Any], **kwargs: Any) -> ProbeRun:
        return run_probe_script(script, args, tmp_path, **kwargs)

    return run


@pytest.fixture(scope="session")
def vllm_trees() -> dict[str, Path]:
    """The real vLLM 0.33.0 and 0.11.0 trees (``pip install --no-deps``, cached), keyed by version."""
    return {v: install_vllm_tree(v) for v in ("0.33.0", "0.11.0")}  # a skip here fails under CI
