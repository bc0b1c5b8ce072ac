"""The on-demand class labs' trained models as shipped with the package (``orchestrator/data/lab-<class>/``: the Qwen3
and the Kimi-K2.5-class labs of orchestrator/lab/building/class_lab.py), so that an on-demand lab copies them in a
second instead of training for minutes (the Qwen3 lab: 309 s in CI from nothing).

A shipped directory mirrors the model cache: ``<class>-<key>/target`` and ``<class>-<key>/draft-<key>``, each key
the digest of its recipe, seed, wiring and the training code. A changed recipe or training code computes another
key, finds no shipped copy and trains, as before this module existed; and tests/lab/test_class_shipped.py fails until
the models are shipped again (``orchestrator lab build --target-class CLASS --from-scratch --ship``), so shipped
weights and recipe cannot drift apart silently.

Why no confirmation on first use, unlike the default lab (orchestrator/lab/building/shipped.py): the class labs are
not calibrated (class_lab.py's module doc); their flagship decides by its own intervals on whatever models it has.
The copy is checked file by file against the sha256 the manifest records.

Public API: ``shipped_root(name) -> Path``, ``SHIPPED_MARK``, ``NOT_SHIPPED``, ``ShippedManifest``,
``read_manifest(root) -> ShippedManifest | None``, ``install(name, dest, root) -> bool``,
``write_shipped(models, dest) -> ShippedManifest``.
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

DATA = Path(__file__).resolve().parents[2] / "data"
MANIFEST_FORMAT = 1
#: written into a cached model that was copied from the shipped one (lab status and --from-scratch read it)
SHIPPED_MARK = ".shipped"
#: files of a trained model that are not shipped: the tokenised corpus (only draft training reads it) and markers
NOT_SHIPPED = ("lab_tokens.pt", ".complete", SHIPPED_MARK)


class ShippedManifest(BaseModel):
    """``orchestrator/data/lab-<class>/manifest.json``."""

    model_config = ConfigDict(extra="forbid")
    format: int
    built: dict[str, str]                 # at, python, torch, platform
    models: dict[str, dict[str, str]]     # "<class>-<key>/target" | "<class>-<key>/draft-<key>" -> {file: sha256}


def shipped_root(name: str) -> Path:
    """Where the package ships the class lab ``name``'s models."""
    return DATA / f"lab-{name}"


def read_manifest(root: Path) -> ShippedManifest | None:
    """The shipped manifest under ``root``, or None when this install ships none there."""
    path = root / "manifest.json"
    if not path.is_file():
        return None
    try:
        return ShippedManifest.model_validate_json(path.read_text())
    except ValueError as exc:
        raise OrchestratorError(f"{path}: not a valid shipped lab manifest: {exc}",
                                title="shipped lab models damaged") from None


def install(name: str, dest: Path, root: Path) -> bool:
    """Copy the shipped model ``name`` (``<class>-<key>/target`` or ``.../draft-<key>``) to ``dest``; False when this
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
        cls = name.split("-", 1)[0]
        raise OrchestratorError(f"shipped lab model {src} is damaged ({', '.join(bad[:5])}); reinstall the "
                                f"package or build with `orchestrator lab build --target-class {cls} --from-scratch`",
                                title="shipped lab models damaged")
    remove_tree(dest)
    dest.mkdir(parents=True)
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, dest / rel)
    (dest / SHIPPED_MARK).write_text(json.dumps({"from": str(src), "built": manifest.built}) + "\n")
    return True


def write_shipped(models: list[Path], dest: Path) -> ShippedManifest:
    """Replace ``dest`` with ``models`` (cache directories ``<lab-models>/<class>-<key>/{target,draft-<key>}`` trained
    here, never copies of shipped ones) and their manifest."""
    import torch

    from orchestrator.lab.building.shipped import sha256_of

    missing = [m for m in models if not (m / ".complete").exists()]
    if missing:
        raise OrchestratorError(f"{missing[0]} is not built: build the class lab with --from-scratch first",
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
    manifest = ShippedManifest(format=MANIFEST_FORMAT, models=entries, built={
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "python": sys.version.split()[0],
        "torch": torch.__version__, "platform": platform.platform()})
    (dest / "manifest.json").write_text(manifest.model_dump_json(indent=2) + "\n")
    return manifest
