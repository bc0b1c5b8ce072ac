"""The Qwen3 lab's trained models as shipped with the package (``orchestrator/data/lab-qwen3/``), so that the
on-demand Qwen3 lab copies them in a second instead of training for minutes (309 s in CI from nothing).

The shipped directory mirrors the model cache (orchestrator/lab/building/qwen3_lab.py): ``qwen3-<key>/target`` and
``qwen3-<key>/draft-<key>``, each key the digest of its recipe, seed, wiring and the training code. A changed recipe
or training code computes another key, finds no shipped copy and trains, as before this module existed; and
tests/lab/test_qwen3_shipped.py fails until the models are shipped again (``orchestrator lab build --target-class
qwen3 --from-scratch --ship``), so shipped weights and recipe cannot drift apart silently.

Why no confirmation on first use, unlike the default lab (orchestrator/lab/building/shipped.py): the Qwen3 lab is not
calibrated (qwen3_lab.py's module doc); its flagship decides by its own intervals on whatever models it has. The copy
is checked file by file against the sha256 the manifest records.

Public API: ``SHIPPED_QWEN3``, ``SHIPPED_MARK``, ``Qwen3Manifest``, ``read_manifest(root) -> Qwen3Manifest | None``,
``install(name, dest, root) -> bool``, ``write_shipped(models, dest) -> Qwen3Manifest``.
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from orchestrator.errors import OrchestratorError
from orchestrator.tree_removal import remove_tree

SHIPPED_QWEN3 = Path(__file__).resolve().parents[2] / "data" / "lab-qwen3"
MANIFEST_FORMAT = 1
#: written into a cached model that was copied from the shipped one (lab status and --from-scratch read it)
SHIPPED_MARK = ".shipped"
#: files of a trained model that are not shipped: the tokenised corpus (only draft training reads it) and markers
NOT_SHIPPED = ("lab_tokens.pt", ".complete", SHIPPED_MARK)


class Qwen3Manifest(BaseModel):
    """``orchestrator/data/lab-qwen3/manifest.json``."""

    model_config = ConfigDict(extra="forbid")
    format: int
    built: dict[str, str]                 # at, python, torch, platform
    models: dict[str, dict[str, str]]     # "qwen3-<key>/target" | "qwen3-<key>/draft-<key>" -> {file: sha256}


def read_manifest(root: Path = SHIPPED_QWEN3) -> Qwen3Manifest | None:
    """The shipped manifest, or None when this install ships no Qwen3 models."""
    path = root / "manifest.json"
    if not path.is_file():
        return None
    try:
        return Qwen3Manifest.model_validate_json(path.read_text())
    except ValueError as exc:
        raise OrchestratorError(f"{path}: not a valid shipped Qwen3 lab manifest: {exc}",
                                title="shipped lab models damaged") from None


def install(name: str, dest: Path, root: Path = SHIPPED_QWEN3) -> bool:
    """Copy the shipped model ``name`` (``qwen3-<key>/target`` or ``.../draft-<key>``) to ``dest``; False when this
    install ships no model by that name (another recipe: the caller trains).

    :raises OrchestratorError: the shipped model is listed but a file is missing or differs from its sha256.
    """
    from orchestrator.lab.building.shipped import sha256_of

    manifest = read_manifest(root)
    if manifest is None or name not in manifest.models:
        return False
    files = manifest.models[name]
    src = root / name
    bad = [rel for rel, want in sorted(files.items()) if not (src / rel).is_file() or sha256_of(src / rel) != want]
    if bad:
        raise OrchestratorError(f"shipped Qwen3 lab model {src} is damaged ({', '.join(bad[:5])}); reinstall the "
                                "package or build with `orchestrator lab build --target-class qwen3 --from-scratch`",
                                title="shipped lab models damaged")
    remove_tree(dest)
    dest.mkdir(parents=True)
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, dest / rel)
    (dest / SHIPPED_MARK).write_text(json.dumps({"from": str(src), "built": manifest.built}) + "\n")
    return True


def write_shipped(models: list[Path], dest: Path = SHIPPED_QWEN3) -> Qwen3Manifest:
    """Replace ``dest`` with ``models`` (cache directories ``<lab-models>/qwen3-<key>/{target,draft-<key>}`` trained
    here, never copies of shipped ones) and their manifest."""
    import torch

    from orchestrator.lab.building.shipped import sha256_of

    missing = [m for m in models if not (m / ".complete").exists()]
    if missing:
        raise OrchestratorError(f"{missing[0]} is not built: build the Qwen3 lab with --from-scratch first",
                                title="nothing to ship")
    copied = [m for m in models if (m / SHIPPED_MARK).exists()]
    if copied:
        raise OrchestratorError(f"{copied[0]} is a copy of the shipped models, not a training: ship with "
                                "--from-scratch", title="not a training")
    remove_tree(dest)
    entries: dict[str, dict[str, str]] = {}
    for model in models:
        name = f"{model.parent.name}/{model.name}"
        shutil.copytree(model, dest / name, ignore=shutil.ignore_patterns(*NOT_SHIPPED))
        entries[name] = {str(p.relative_to(dest / name)): sha256_of(p)
                         for p in sorted((dest / name).rglob("*")) if p.is_file()}
    manifest = Qwen3Manifest(format=MANIFEST_FORMAT, models=entries, built={
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "python": sys.version.split()[0],
        "torch": torch.__version__, "platform": platform.platform()})
    (dest / "manifest.json").write_text(manifest.model_dump_json(indent=2) + "\n")
    return manifest
