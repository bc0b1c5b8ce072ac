"""Building a lab directory (``build_lab``): the sglang trees, the target and drafts (the package's shipped models,
or trained), the fault copies, and the calibration against the flagship's rules, under the lab directory's lock.

The parts it puts there, and where, are orchestrator.lab.building.build's; the calibration is orchestrator.lab.building.calibrate's,
the shipped models orchestrator.lab.building.shipped's, the on-demand class labs (Qwen3, Kimi-K2.5-class) orchestrator.lab.building.class_lab's. This module sits above
them all, so none of them imports it back.

Public API: ``build_lab(scenario=None, *, root=None, progress=None, seed=0, calibrate=True, from_scratch=False,
target_class=None) -> LabPaths``.
"""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.errors import OrchestratorError
from orchestrator.lab.building import shipped
from orchestrator.lab.building.build import (
    DEFAULT_SCENARIO,
    LAB_FORMAT,
    LAB_SGLANG_VERSIONS,
    SGLANG_VERSION,
    TRAINED_DRAFTS,
    BuildProgress,
    LabPaths,
    build_drafts,
    check_scenario,
    copy_model,
    install_sglang_site,
    install_target,
    is_complete,
    lab_dir,
    lab_lock,
    lab_sglang_version,
    num_layers_of,
    paths,
    read_state,
    scenarios,
    site_dir,
    site_ok,
    trained_drafts_of,
    write_state,
)
from orchestrator.lab.building.calibrate import calibrate_lab
from orchestrator.lab.training.filelock import file_lock


def _noop(_stage: str, _message: str, _fraction: float) -> None:
    pass


def build_lab(scenario: str | None = None, *, root: Path | str | None = None,
              progress: BuildProgress | None = None, seed: int = 0, calibrate: bool = True,
              from_scratch: bool = False, target_class: str | None = None) -> LabPaths:
    """``_build_lab`` under the lab directory's lock (``lab_lock``): a second builder waits, then finds it built.
    ``target_class``: ``qwen3`` or ``kimi`` makes (or keeps) the directory a lab of that class
    (orchestrator.lab.building.class_lab); a lab directory already built keeps its own class."""
    with lab_lock(lab_dir(root)):
        return _build_lab(scenario, root=root, progress=progress, seed=seed, calibrate=calibrate,
                          from_scratch=from_scratch, target_class=target_class)


def _build_lab(scenario: str | None = None, *, root: Path | str | None = None,
               progress: BuildProgress | None = None, seed: int = 0, calibrate: bool = True,
               from_scratch: bool = False, target_class: str | None = None) -> LabPaths:
    """Build whatever ``scenario`` needs and is missing (target, drafts, sglang tree); returns the paths.

    A new lab takes the package's shipped models (orchestrator.lab.building.shipped: trained and calibrated by this recipe,
    confirmed on this CPU by a short replay of the calibration; a CPU that decodes them otherwise calibrates the
    drafts ``scenario`` serves, leaving the others for their first use) unless ``from_scratch`` or another ``seed``
    asks for training. lab.json's ``origin`` says which.
    Training is cached under $ORCHESTRATOR_CACHE_DIR/lab-models, so a rebuilt lab dir costs a copy. ``seed`` seeds
    the target and the first draft attempt. With ``calibrate`` the trained drafts are checked against the flagship's
    rules; when a planted fault is not clearly decidable the draft is retrained with the next seed and more steps,
    and when that does not help either, the target is retrained with another seed and every draft with it
    (bounded; ``orchestrator.lab.building.calibrate.calibrate_lab``). lab.json records every attempt and the target seed.
    Only the trained drafts ``scenario`` serves are checked (``build.trained_drafts_of``); a build that did anything
    closes with a ``lab`` progress line saying what, and how long it took.
    :raises UserInputError: unknown scenario. :raises OrchestratorError: the sglang install failed.
    """
    started = time.monotonic()  # the closing line's "ready in": imports and lock waits included
    from transformers.utils import logging as hf_logging  # transformers is heavy: loaded when a build runs

    hf_logging.disable_progress_bar()  # the core reports through `progress`, never by printing
    hf_logging.set_verbosity_error()
    name = check_scenario(scenario or DEFAULT_SCENARIO)
    base = lab_dir(root)
    base.mkdir(parents=True, exist_ok=True)
    # one builder per lab directory (two CLI runs, two test workers): the others wait, then find it built
    with file_lock(base.parent / f".{base.name}.build.lock"):
        return _build_locked(name, base, progress or _noop, seed, calibrate, from_scratch, target_class, started)


def _build_locked(name: str, base: Path, report: BuildProgress, seed: int, calibrate: bool,
                  from_scratch: bool, target_class: str | None = None, started: float | None = None) -> LabPaths:
    # both load torch (their recipes' dataclasses live beside the training code): only when a build runs, so that
    # the CLI and the lab inventory start without it
    from orchestrator.lab.building import class_lab
    from orchestrator.lab.building.recipe import recipe_hash

    state = read_state(base) or {"format": LAB_FORMAT}
    timings: dict[str, float] = state.setdefault("timings", {})
    started = time.monotonic() if started is None else started
    done: list[str] = []  # what this build did, for its closing line
    active = lab_sglang_version()
    t0 = time.monotonic()
    for version in dict.fromkeys((SGLANG_VERSION, active)):  # the default tree always; the stand-in's beside it
        if not site_ok(base, version):
            install_sglang_site(base, report, version)
            key = "sglang" if version == SGLANG_VERSION else f"sglang-{version}"
            timings[key] = round(time.monotonic() - t0, 1)
            done.append(f"sglang {version} source tree ({timings[key]} s)")
    asked = class_lab.check_target_class(target_class or "llama")
    # the class asked for, else the one the directory was built with (a built lab keeps its class)
    wanted = asked if asked in class_lab.CLASS_LABS else state.get("target_class") or "llama"
    if wanted in class_lab.CLASS_LABS:
        # a class lab: its own target and drafts (shipped or trained), never the Llama lab's or its calibration
        class_lab.build_class_lab(class_lab.CLASS_LABS[wanted], base, state, report, timings,
                                  from_scratch=from_scratch)
        return _finish_state(name, base, state, active)
    # a lab whose calibration moved on to another target seed keeps it: that seed is the one known to be clear here
    target_seed = int(state.get("target_seed", seed))
    if not is_complete(base / "target"):
        manifest = None if from_scratch or seed != 0 else shipped.read_manifest()
        if manifest is not None:  # the package's calibrated models: a copy, confirmed on this CPU below
            t0 = time.monotonic()
            state["origin"] = shipped.install_shipped(base, manifest, report)
            target_seed, state["calibration"], state["targets_rejected"] = manifest.target_seed, {}, []
            timings["shipped"] = round(time.monotonic() - t0, 1)
            done.append(f"shipped models installed ({timings['shipped']} s)")
        else:
            install_target(base, target_seed, report, timings)
            done.append(f"target trained ({timings['target']} s)")
            state["origin"] = {"kind": "built", "recipe_hash": recipe_hash(), "built_at": _now(),
                               "why": "--from-scratch" if from_scratch else (
                                   f"build seed {seed}" if seed else "this install ships no models")}
    state["target_seed"] = target_seed
    n = num_layers_of(base)
    sc = scenarios(base, n)[name]
    origin = state.get("origin") or {}
    if origin.get("kind") == "shipped":  # a trained draft removed since: the shipped one again, not a training
        for kind in TRAINED_DRAFTS:
            if not is_complete(base / "drafts" / kind):
                copy_model(shipped.SHIPPED_DIR / "drafts" / kind, base / "drafts" / kind,
                           skip=shipped.NOT_SHIPPED)
    build_drafts(base, [sc.draft, sc.fixed_draft or sc.draft], n, target_seed, report, timings)
    if calibrate:
        if origin.get("kind") == "shipped" and "confirmed" not in origin:
            confirm_shipped(base, state, report, timings)
            done.append(_confirmed_line(state["origin"]["confirmed"]))
        before = copy.deepcopy(state.get("calibration") or {})
        t0 = time.monotonic()
        calibrate_lab(base, state, report, kinds=trained_drafts_of(sc))  # the run's drafts; the others when asked
        checked = [k for k in TRAINED_DRAFTS if (state.get("calibration") or {}).get(k) != before.get(k)]
        if checked:
            seconds = round(time.monotonic() - t0, 1)
            timings["calibrate " + "+".join(checked)] = seconds
            done.append(f"calibrated here what scenario {name} needs (draft {', '.join(checked)}, two cores): every "
                        f"margin clear ({seconds} s)")
        if origin.get("kind") == "shipped" and not still_shipped(base):  # the full calibration here retrained
            state["origin"] = {"kind": "built", "built_at": _now(), "recipe_hash": origin.get("recipe_hash"),
                               "why": "the shipped models were not clear on this CPU: rebuilt from scratch",
                               "shipped": origin}
            report("calibrate", "the shipped models were not clear on this CPU: the lab was rebuilt from scratch", 1.0)
    deferred = state.get("calibration_deferred") or []
    if done and deferred:
        done.append(f"left for their first use: draft {', '.join(deferred)}")
    if done:
        report("lab", f"ready in {time.monotonic() - started:.1f} s: " + "; ".join(done), 1.0)
    return _finish_state(name, base, state, active)


def _confirmed_line(record: dict[str, Any]) -> str:
    if record.get("passed"):
        return (f"the same bits as the {record.get('matched_cpu')} calibrated before: its margins hold here "
                f"(checked in {record.get('seconds')} s)")
    return f"this CPU's bits match no calibrated CPU's (checked in {record.get('seconds')} s)"


def _finish_state(name: str, base: Path, state: dict[str, Any], active: str) -> LabPaths:
    n = num_layers_of(base)
    built = state.setdefault("drafts", {})
    drafts = base / "drafts"
    for kind in sorted(p.name for p in drafts.iterdir() if is_complete(p)) if drafts.is_dir() else []:
        built.setdefault(kind, {"path": str(drafts / kind), "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                        time.gmtime())})
    state.update({"format": LAB_FORMAT, "sglang_version": active,
                  "sglang_sites": {v: str(site_dir(base, v)) for v in LAB_SGLANG_VERSIONS if site_ok(base, v)},
                  "target": str(base / "target"),
                  "site": str(base / "site"), "num_layers": n, "python": sys.version.split()[0],
                  "built_at": state.get("built_at") or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    write_state(base, state)
    return paths(name, root=base)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())




def confirm_shipped(base: Path, state: dict[str, Any], report: BuildProgress, timings: dict[str, float]) -> None:
    """The short calibration of shipped models: the same bits as on a calibrated machine adopt its records
    (so calibrate_lab has nothing left to check); otherwise calibrate_lab checks everything on this CPU."""
    manifest = shipped.read_manifest()
    if manifest is None:  # installed from it moments ago: the package's data went missing since
        raise OrchestratorError(f"the shipped lab models under {shipped.SHIPPED_DIR} are gone: reinstall the package "
                                "or build the lab with `orchestrator lab build --from-scratch`")
    t0 = time.monotonic()
    record = shipped.confirm(base, manifest, report)
    state["origin"]["confirmed"] = record
    adopted = shipped.calibration_confirmed(manifest, record)  # the matched machine's records
    if adopted is not None:
        state["calibration"] = copy.deepcopy(adopted)
    timings["confirm"] = round(time.monotonic() - t0, 1)
    write_state(base, state)


def still_shipped(base: Path) -> bool:
    """True while the lab's target and trained drafts are the shipped ones (the same training records)."""
    return all(shipped.same_training(base, shipped.SHIPPED_DIR, part)
               for part in ["target", *(f"drafts/{k}" for k in TRAINED_DRAFTS)])
