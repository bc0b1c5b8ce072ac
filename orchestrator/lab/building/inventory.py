"""The lab as an inventory: host ``lab`` (this machine's python with the lab's sglang tree on its path), with the
active scenario's paths and flags as host vars. ``$ORCHESTRATOR_LAB_SGLANG`` (0.5.12.post1 or 0.5.23) picks the SGLang
version the lab stands in for: its tree goes on the lab host's path and into ``sglang_site``/``sglang_version``. ``orchestrator run`` without an inventory targets it.
``$ORCHESTRATOR_LAB_ENGINE=vllm`` makes the lab stand in for vLLM instead (vllm_lab.py: host var ``engine: lab-vllm``,
the vLLM scenarios, the cached vllm tree on the host's path beside the sglang one).

The lab a run targets is a ``LabChoice`` (engine and scenario), read from the environment once and recorded on the
inventory's lab host; what follows the inventory reads it there.

Public API: ``LabChoice``, ``lab_inventory(scenario=None, *, root=None, engine=None) -> Inventory``,
``with_built_lab(inv) -> Inventory``, ``lab_ssh_inventory(address, port, user,
key, known_hosts, *, scenario=None, root=None) -> Inventory``, ``lab_is_built(scenario) -> bool``,
``ensure_lab(scenario, progress=None) -> LabPaths``, ``active_scenario(scenario=None) -> str``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from orchestrator.errors import UserInputError
from orchestrator.inventory import HostSpec, Inventory
from orchestrator.lab.building import build
from orchestrator.lab.building.build import (
    DEFAULT_SCENARIO,
    LAB_THREADS,
    BuildProgress,
    LabPaths,
    check_scenario,
)
from orchestrator.lab.building.builder import build_lab
from orchestrator.lab.building.vllm_lab import (
    check_vllm_scenario,
    ensure_vllm_lab,
    lab_engine,
    vllm_host_vars,
    vllm_lab_is_built,
    vllm_site,
)

REPO_ROOT = Path(__file__).resolve().parents[3]  # holds orchestrator/ and remote_probes/ (both imported by the server)


LabEngine = Literal["sglang", "vllm"]


@dataclass(frozen=True)
class LabChoice:
    """Which lab a run targets: the engine it stands in for and the scenario. Chosen once (``LabChoice.of``: the
    arguments, else the environment) and carried by the inventory it makes (the lab host's ``engine_family`` and
    ``scenario``), so everything after reads the inventory (``LabChoice.of_host_vars``), not the environment again."""

    engine: LabEngine
    scenario: str

    @classmethod
    def of(cls, scenario: str | None = None, engine: str | None = None) -> LabChoice:
        """The arguments, else ``$ORCHESTRATOR_LAB_ENGINE`` / ``$ORCHESTRATOR_LAB_SCENARIO``, else sglang /
        ``seed-wiring``: the one place the lab's choice is read from the environment. Raises UserInputError for an
        unknown engine, or a scenario the engine's lab does not have."""
        chosen = engine or lab_engine()
        if chosen not in ("sglang", "vllm"):
            raise UserInputError(f"the lab stands in for sglang or vllm, not {chosen!r}")
        name = scenario or os.environ.get("ORCHESTRATOR_LAB_SCENARIO") or DEFAULT_SCENARIO
        if chosen == "vllm":
            return cls("vllm", check_vllm_scenario(name))
        return cls("sglang", check_scenario(name))

    @classmethod
    def of_host_vars(cls, host_vars: dict[str, Any]) -> LabChoice:
        """The choice a lab inventory's host records."""
        return cls.of(host_vars.get("scenario"), "vllm" if host_vars.get("engine_family") == "vllm" else "sglang")


def active_scenario(scenario: str | None = None, engine: str | None = None) -> str:
    """The argument, else $ORCHESTRATOR_LAB_SCENARIO, else ``seed-wiring``. Raises UserInputError if unknown (to
    the engine the lab stands in for)."""
    return LabChoice.of(scenario, engine).scenario


def lab_is_built(scenario: str | None = None, *, root: Path | str | None = None, engine: str | None = None) -> bool:
    choice = LabChoice.of(scenario, engine)
    if choice.engine == "vllm":
        return vllm_lab_is_built(choice.scenario, root=Path(root) if root else None)
    return build.lab_is_built(choice.scenario, root=Path(root) if root else None)


def ensure_lab(scenario: str | None = None, progress: BuildProgress | None = None, *,
               root: Path | str | None = None, engine: str | None = None) -> LabPaths:
    """Build what the scenario needs and is missing (a few minutes the first time), then return the paths."""
    choice = LabChoice.of(scenario, engine)
    if choice.engine == "vllm":
        ensure_vllm_lab(choice.scenario, progress, root=Path(root) if root else None)
        return build.paths(root=root)
    return build_lab(choice.scenario, root=root, progress=progress)


def _lab_env(choice: LabChoice, root: Path | str | None) -> dict[str, str]:
    """PYTHONPATH for the lab host: the orchestrator's source root (the lab server) and the sglang tree (and, for
    the vLLM lab, the cached vllm tree: the lab server reads its rules there, read_source reads its code)."""
    # the tree of the version the lab stands in for ($ORCHESTRATOR_LAB_SGLANG): the lab server parses with it
    site = build.site_dir(build.lab_dir(root), build.lab_sglang_version())
    parts = [str(REPO_ROOT), str(site)] + ([str(vllm_site())] if choice.engine == "vllm" else [])
    return {"PYTHONPATH": os.pathsep.join(parts), **LAB_THREADS}


def lab_env(root: Path | str | None = None, engine: str | None = None) -> dict[str, str]:
    return _lab_env(LabChoice.of(None, engine), root)


def _lab_host_vars(choice: LabChoice, root: Path | str | None) -> dict[str, Any]:
    if choice.engine == "vllm":
        return {**vllm_host_vars(choice.scenario, root=root),
                "sglang_site": str(build.site_dir(build.lab_dir(root), build.lab_sglang_version())),
                "sglang_version": build.lab_sglang_version()}
    base = build.lab_dir(root)
    n = build.num_layers_of(base)
    sc = build.scenarios(base, n)[choice.scenario]
    return {"engine": "lab", "engine_family": "sglang", "scenario": choice.scenario, "scenario_title": sc.title,
            "lab_dir": str(base), "target": str(base / "target"), "draft": str(base / "drafts" / sc.draft),
            "candidate_flags": dict(sc.candidate), "fixed_flags": dict(sc.fixed),
            "sglang_site": str(build.site_dir(base, build.lab_sglang_version())),
            "sglang_version": build.lab_sglang_version(), "target_num_layers": n,
            "server_module": "orchestrator.lab.stand_in.server", "prompts_file": str(base / "target" / "prompts.json")}


def lab_host_vars(scenario: str | None = None, *, root: Path | str | None = None,
                  engine: str | None = None) -> dict[str, Any]:
    return _lab_host_vars(LabChoice.of(scenario, engine), root)


def lab_inventory(scenario: str | None = None, *, root: Path | str | None = None,
                  engine: str | None = None, real_host: bool = False) -> Inventory:
    """Hosts ``lab`` (local transport) and ``localhost``; default target ``lab``. Builds nothing. ``engine``: the
    engine the lab stands in for (default ``$ORCHESTRATOR_LAB_ENGINE``, else sglang). ``real_host``: no
    ``fixed_flags``, as on a real host (see lab_ssh_inventory)."""
    choice = LabChoice.of(scenario, engine)
    host_vars = _lab_host_vars(choice, root)
    if real_host:
        del host_vars["fixed_flags"]
    spec = HostSpec(name="lab", transport="local", python=sys.executable, env=_lab_env(choice, root), vars=host_vars)
    local = HostSpec(name="localhost", transport="local", python=sys.executable)
    # Inventory's validator names hosts from plain mappings
    return Inventory.model_validate({"hosts": {"lab": spec.model_dump(), "localhost": local.model_dump()},
                                     "default_hosts": "lab", "source": "<lab>"})


def with_built_lab(inv: Inventory, *, root: Path | str | None = None) -> Inventory:
    """``inv`` (a lab inventory made before its lab was built) with the lab host's vars read from the built lab
    (paths, the target's layer count): a new inventory, the choice its lab host records kept."""
    lab = inv.hosts["lab"]
    choice = LabChoice.of_host_vars(lab.vars)
    fresh = _lab_host_vars(choice, root)
    if "fixed_flags" not in lab.vars:  # a real-host view of the lab keeps hiding the lab-only fix
        fresh.pop("fixed_flags", None)
    return inv.model_copy(update={"hosts": {**inv.hosts, "lab": lab.model_copy(update={"vars": {**lab.vars, **fresh}})}})


def lab_ssh_inventory(address: str, port: int, user: str, key: str | Path, known_hosts: str | Path, *,
                      scenario: str | None = None, root: Path | str | None = None, real_host: bool = False,
                      engine: str | None = None, **extra: Any) -> Inventory:
    """The same lab host reached over SSH (the loopback sshd of the tests): same python, paths and vars.

    ``real_host``: the lab as a real SGLang host looks to the flagship: no ``fixed_flags`` (the scenarios' fixes
    use the lab-only ``--lab-capture-layers``), so the playbook must derive a fix that SGLang itself can serve.
    ``extra``: more HostSpec fields (``ssh_config``, ``state_dir``, ``connect_timeout``...).
    """
    choice = LabChoice.of(scenario, engine)
    host_vars = _lab_host_vars(choice, root)
    if real_host:
        del host_vars["fixed_flags"]
    spec = HostSpec(name="lab", transport="ssh", address=address, port=port, user=user, key=str(key),
                    known_hosts=str(known_hosts), python=sys.executable, env=_lab_env(choice, root), vars=host_vars,
                    **extra)
    return Inventory.model_validate({"hosts": {"lab": spec.model_dump()}, "default_hosts": "lab",
                                     "source": "<lab over ssh>"})
