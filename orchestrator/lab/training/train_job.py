"""Lab training in a child process whose numerics are pinned, so a recipe gives the same model on any x86 CPU.

Why a child process: the settings that decide which CPU kernels run are read once, when torch, MKL and oneDNN
first dispatch, which in a test run or a long CLI process has already happened. A fresh interpreter reads them:

- ``ATEN_CPU_CAPABILITY=avx2``: ATen's own vectorised kernels take the AVX2 build even on an AVX-512 CPU;
- ``MKL_CBWR=AVX2,STRICT``: MKL's conditional numerical reproducibility mode (the same code path, and strict
  bitwise results, on every CPU that has AVX2) — matmuls and their gradients go through MKL;
- ``ONEDNN_MAX_CPU_ISA=AVX2``: oneDNN (mkldnn) may not use AVX-512 / AMX;
- ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` = the recipe's threads, whatever the machine has (the reduction
  order depends on the number of threads), and ``torch.use_deterministic_algorithms(True)``.

On a CPU without AVX2 the pins fall back to the portable paths (``default`` / ``COMPATIBLE`` / ``SSE41``); on
other architectures only the threads are pinned. ``pinned_env()`` is recorded in each model's lab_recipe.json.
How well this holds is measured by bench/lab_repro.py (BENCHMARKS.md); the lab does not depend on it — the
calibration after training (orchestrator.lab.building.calibrate) is what guarantees clear planted faults.

Protocol: the parent writes one JSON job on stdin; the child prints ``{"progress": [message, fraction]}`` lines
and finally ``{"done": path}`` on stdout. Public API: ``pinned_env(threads)``, ``run_job(job, progress)``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.errors import OrchestratorError


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def pinned_env(threads: int) -> dict[str, str]:
    """The environment that pins the training numerics on this machine (see the module doc)."""
    env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "TORCHDYNAMO_DISABLE": "1",
           "PYTHONHASHSEED": "0"}
    if platform.machine().lower() in ("x86_64", "amd64"):
        if "avx2" in _cpu_flags():
            env.update(ATEN_CPU_CAPABILITY="avx2", MKL_CBWR="AVX2,STRICT", ONEDNN_MAX_CPU_ISA="AVX2")
        else:
            env.update(ATEN_CPU_CAPABILITY="default", MKL_CBWR="COMPATIBLE", ONEDNN_MAX_CPU_ISA="SSE41")
    return env


def run_job(job: dict[str, Any], progress: Callable[[str, float], None] | None = None,
            env_override: dict[str, str] | None = None) -> Path:
    """Run one training job (``{"kind": "target"|"draft", ...}``, see ``_main``) in a pinned child process.

    :raises OrchestratorError: the child failed (its last stderr lines are in the message).
    """
    threads = int(job.get("recipe", {}).get("threads", 2))
    env = {**os.environ, **pinned_env(threads), **(env_override or {})}
    repo = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join([repo, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.lab.training.train_job"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(job))
    proc.stdin.close()
    done: str | None = None
    try:
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue  # a stray print from a library is not a protocol line
            if isinstance(msg, dict) and "progress" in msg and progress is not None:
                progress(str(msg["progress"][0]), float(msg["progress"][1]))
            elif isinstance(msg, dict) and "done" in msg:
                done = str(msg["done"])
        stderr = proc.stderr.read() if proc.stderr else ""
        code = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if code != 0 or done is None:
        tail = " | ".join(stderr.strip().splitlines()[-4:])
        raise OrchestratorError(f"lab training ({job.get('kind')}) failed with exit status {code}: {tail}",
                                title="lab training failed")
    return Path(done)


def _main() -> int:
    import torch

    from orchestrator.lab.training.draft_io import DraftLayout
    from orchestrator.lab.training.train import DraftRecipe, TargetRecipe, train_draft, train_target

    job = json.loads(sys.stdin.read())
    if not os.environ.get("ORCHESTRATOR_LAB_NONDETERMINISTIC"):  # bench/lab_repro.py measures what it changes
        torch.use_deterministic_algorithms(True)

    def report(message: str, fraction: float) -> None:
        print(json.dumps({"progress": [message, fraction]}), flush=True)

    pins = {k: os.environ.get(k) for k in pinned_env(1) if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    pins["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    target_class = str(job.get("target_class") or "llama")
    if job["kind"] == "target":
        if target_class == "qwen3":
            from orchestrator.lab.training.qwen3_train import Qwen3Recipe

            recipe: Any = Qwen3Recipe(**job["recipe"])
        elif target_class == "kimi":
            from orchestrator.lab.training.kimi_train import KimiRecipe

            recipe = KimiRecipe(**job["recipe"])
        else:
            recipe = TargetRecipe(**job["recipe"])
        out = train_target(Path(job["out"]), seed=job["seed"], progress=report, recipe=recipe, numerics=pins,
                           target_class=target_class)
    else:
        layout = job.get("layout") or {}
        if layout.get("ids") is not None:
            layout["ids"] = tuple(layout["ids"])
        out = train_draft(Path(job["target_dir"]), Path(job["out"]), wiring=list(job["wiring"]), seed=job["seed"],
                          steps=job.get("steps"), progress=report, layout=DraftLayout(**layout),
                          recipe=DraftRecipe(**job["recipe"]), numerics=pins, target_class=target_class)
    print(json.dumps({"done": str(out)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
