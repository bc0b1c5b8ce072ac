"""The lab's trained models as shipped with the package, so that a first run does not train for minutes.

``orchestrator/data/lab/`` holds what ``orchestrator lab build --from-scratch`` produces and calibrates — the target
(weights, tokenizer, prompts) and the two trained drafts (seed-wiring, healthy; the fault scenarios are cheap copies
written at install) — and ``manifest.json``: the recipe hash (``orchestrator.lab.models.recipe_hash``), where and when
they were built (Python, torch, CPU, the numerics pins), every file's sha256, the build's full calibration records,
and the replay: the outcomes of a few of the calibration's own experiments, on the machine that calibrated them.

On first use the lab copies the shipped models (every file checked against its sha256) and **confirms** them on
this CPU: it replays those experiments with the lab's own code (the draft test probe on one prompt per trained
draft, the lab's decoding loop on one bench prompt per calibrated flag set) and compares the outcomes exactly
(accept counts and the figures computed from them). The same outcomes mean this CPU decodes the shipped models as
the calibrating machine did, so its margins hold here; any difference sends the lab through the full calibration
on this CPU (and, should a draft not be clear here, the build's retraining: a build from scratch), and says so.

Public API: ``SHIPPED_DIR``, ``Manifest``, ``read_manifest(root=SHIPPED_DIR) -> Manifest | None``,
``install_shipped(base, manifest, report) -> dict`` (the lab's origin record), ``replay(base) -> dict``,
``confirm(base, manifest, report) -> dict``, ``write_shipped(base, dest, state) -> Manifest``.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from orchestrator.errors import OrchestratorError
from orchestrator.lab.build import (
    TRAINED_DRAFTS,
    BuildProgress,
    copy_model,
    num_layers_of,
    scenarios,
)

SHIPPED_DIR = Path(__file__).resolve().parents[1] / "data" / "lab"
MANIFEST_FORMAT = 1
#: files of a trained model that are not shipped: the tokenised corpus (only draft training reads it) and markers
NOT_SHIPPED = ("lab_tokens.pt", ".complete")
#: the calibration experiments replayed on first use, and how much of each: one prompt (draft test) or request
REPLAY_DRAFT_TEST = ("seed-wiring", "healthy")
REPLAY_FIX = (("seed-wiring", "candidate"), ("seed-wiring", "fixed"), ("topk-override", "candidate"),
              ("eagle-not-eagle3", "candidate"), ("healthy", "fixed"))


class Manifest(BaseModel):
    """``orchestrator/data/lab/manifest.json``."""

    model_config = ConfigDict(extra="forbid")
    format: int
    recipe_hash: str
    built: dict[str, Any]                  # at, python, torch, platform, cpu, numerics, seconds
    target_seed: int
    drafts: dict[str, dict[str, Any]]      # kind -> {seed, steps} of the shipped (calibrated) training
    files: dict[str, str]                  # path under SHIPPED_DIR -> sha256
    calibration: dict[str, Any]            # kind -> the build's calibration record (lab.json's)
    replay: dict[str, Any]                 # the replayed experiments' outcomes on the calibrating machine


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(root: Path = SHIPPED_DIR) -> Manifest | None:
    """The shipped manifest, or None when this install ships no models (a trimmed package)."""
    path = root / "manifest.json"
    if not path.is_file():
        return None
    try:
        return Manifest.model_validate_json(path.read_text())
    except ValueError as exc:
        raise OrchestratorError(f"{path}: not a valid shipped-lab manifest: {exc}",
                                title="shipped lab models damaged") from None


def check_files(manifest: Manifest, root: Path = SHIPPED_DIR) -> list[str]:
    """The shipped files that are missing or differ from their recorded sha256 (empty: all intact)."""
    bad = []
    for rel, want in sorted(manifest.files.items()):
        path = root / rel
        if not path.is_file() or _sha256(path) != want:
            bad.append(rel)
    return bad


def install_shipped(base: Path, manifest: Manifest, report: BuildProgress, root: Path = SHIPPED_DIR) -> dict[str, Any]:
    """Copy the shipped target and trained drafts into the lab at ``base``; returns the lab's origin record.

    :raises OrchestratorError: a shipped file is missing or damaged (its sha256 differs).
    """
    t0 = time.monotonic()
    bad = check_files(manifest, root)
    if bad:
        raise OrchestratorError(f"shipped lab models under {root} are damaged ({', '.join(bad[:5])}); reinstall the "
                                "package or build the lab with `orchestrator lab build --from-scratch`",
                                title="shipped lab models damaged")
    copy_model(root / "target", base / "target", skip=NOT_SHIPPED)
    for kind in TRAINED_DRAFTS:
        copy_model(root / "drafts" / kind, base / "drafts" / kind, skip=NOT_SHIPPED)
    report("shipped", f"shipped models installed (recipe {manifest.recipe_hash}, built {manifest.built['at']})", 1.0)
    return {"kind": "shipped", "recipe_hash": manifest.recipe_hash, "built": manifest.built,
            "from": str(root), "installed_at": _now(), "seconds": round(time.monotonic() - t0, 2)}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ---------------------------------------------------------------- the replay of the calibration's experiments
def _draft_test_outcome(result: dict[str, Any]) -> dict[str, Any]:
    """What a draft test's verdict is made of, per wiring: the accepted tokens (as tau and per position)."""
    return {"decision": result.get("decision"),
            "wirings": {json.dumps(r["wiring"]): {"tau": r.get("tau"), "tau_serving": r.get("tau_serving"),
                                                  "acc": r.get("acc")} for r in result["wirings"]}}


def replay(base: Path) -> dict[str, Any]:
    """The replayed experiments' outcomes on this CPU (one prompt, or one request, each, at the flagship's tokens)."""
    from orchestrator.lab.calibrate import FlagshipSample, accept_lengths, run_draft_test

    sample = FlagshipSample(bench_n=1, dt_prompts=1)
    target = base / "target"
    sc_all = scenarios(base, num_layers_of(base))
    out: dict[str, Any] = {"draft_test": {}, "fix": {}}
    for kind in REPLAY_DRAFT_TEST:
        out["draft_test"][kind] = _draft_test_outcome(run_draft_test(target, base / "drafts" / kind, sample))
    for name, which in REPLAY_FIX:
        sc = sc_all[name]
        flags = sc.candidate if which == "candidate" else sc.fixed
        out["fix"][f"{name}/{which}"] = [round(x, 9) for x in accept_lengths(target, flags, sample)]
    return out


def confirm(base: Path, manifest: Manifest, report: BuildProgress) -> dict[str, Any]:
    """Replay on this CPU and compare with the calibrating machine's outcomes; the confirmation record
    (``passed``: the same outcomes; else ``differs`` names the experiments that came out otherwise)."""
    report("confirm", "replaying the shipped calibration on this CPU "
           f"({len(REPLAY_DRAFT_TEST)} draft tests, {len(REPLAY_FIX)} decoding runs)", 0.0)
    t0 = time.monotonic()
    here = replay(base)
    differs = [f"draft_test {k}" for k, v in manifest.replay.get("draft_test", {}).items()
               if here["draft_test"].get(k) != v]
    differs += [f"fix {k}" for k, v in manifest.replay.get("fix", {}).items() if here["fix"].get(k) != v]
    record = {"passed": not differs, "differs": differs, "at": _now(), "cpu": cpu_name(),
              "seconds": round(time.monotonic() - t0, 1)}
    report("confirm", "same outcomes as the calibrating machine: its margins hold on this CPU" if not differs
           else f"this CPU decodes differently ({', '.join(differs)}): calibrating here in full", 1.0)
    return record


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# ---------------------------------------------------------------- making the shipped set (a developer's step)
def write_shipped(base: Path, dest: Path, state: dict[str, Any]) -> Manifest:
    """Write the lab at ``base`` (built from scratch and calibrated: ``state`` is its lab.json) as the shipped set
    under ``dest``. :raises OrchestratorError: the lab is not calibrated for both trained drafts."""
    import torch

    from orchestrator.lab.calibrate import FlagshipSample
    from orchestrator.lab.models import recipe_hash
    from orchestrator.lab.train_job import pinned_env

    calibration = state.get("calibration", {})
    if any(not (calibration.get(k) or {}).get("passed") for k in TRAINED_DRAFTS):
        raise OrchestratorError(f"the lab at {base} is not calibrated for {', '.join(TRAINED_DRAFTS)}; build it "
                                "with `orchestrator lab build --from-scratch --scenario all` first",
                                title="lab not calibrated")
    if any(rec.get("sample") != asdict(FlagshipSample()) for rec in calibration.values()):
        raise OrchestratorError("the lab's calibration used another sample than the flagship's", title="stale lab")
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    copy_model(base / "target", tmp / "target", skip=NOT_SHIPPED)
    drafts: dict[str, dict[str, Any]] = {}
    for kind in TRAINED_DRAFTS:
        copy_model(base / "drafts" / kind, tmp / "drafts" / kind, skip=NOT_SHIPPED)
        recipe = json.loads((base / "drafts" / kind / "lab_recipe.json").read_text())
        drafts[kind] = {"seed": recipe.get("seed"), "steps": recipe.get("steps")}
    for marker in tmp.rglob(".complete"):
        marker.unlink()
    files = {p.relative_to(tmp).as_posix(): _sha256(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
    manifest = Manifest(
        format=MANIFEST_FORMAT, recipe_hash=recipe_hash(),
        built={"at": state.get("built_at") or _now(), "python": sys.version.split()[0],
               "torch": torch.__version__, "platform": platform.platform(), "cpu": cpu_name(),
               "numerics": {k: v for k, v in pinned_env(1).items() if "THREADS" not in k},
               "seconds": state.get("timings", {})},
        target_seed=int(state.get("target_seed", 0)), drafts=drafts, files=files,
        calibration={k: calibration[k] for k in TRAINED_DRAFTS}, replay=replay(base))
    (tmp / "manifest.json").write_text(manifest.model_dump_json(indent=1) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return manifest
