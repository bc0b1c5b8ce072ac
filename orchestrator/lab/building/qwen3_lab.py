"""A second target class for the lab: a tiny HF ``Qwen3ForCausalLM`` (q/k RMS norms, its own model file in both
engines), trained by the lab's recipe at a reduced size, with EAGLE-3 drafts trained against it, made on demand
(``orchestrator lab build --target-class qwen3 --dir DIR``): copied from the package's shipped Qwen3 models
(orchestrator/lab/building/qwen3_shipped.py), trained only when the recipe changed or ``--from-scratch`` asks.

Why it exists: the flagship's capture reads follow the target's class through the installed engine
(remote_probes/engine/target_capture.py). With a Llama target only, every read lands in llama.py whatever that code does;
a Qwen3 target makes the chain real: SGLang 0.5.12.post1's ``Qwen3ForCausalLM.set_eagle3_layers_to_capture`` is in
srt/models/qwen3.py while its layer loop (``Qwen3Model`` -> ``Qwen2Model.forward``) is in qwen2.py, and that loop
captures the embedding output where Llama's raises; 0.5.23's ``Qwen3Model`` has its own forward in qwen3.py; vLLM's
``Qwen3ForCausalLM`` captures in ``Qwen2Model.forward`` (qwen2.py).

The recipes are orchestrator/lab/training/qwen3_train.py's, trained by train.py's loops with the Qwen3 class; its
models are cached under ``<cache>/lab-models/qwen3-<hash>/``.

Layout of a Qwen3 lab directory: the default lab's (build.py) with ``lab.json`` ``target_class: qwen3``; the drafts
``seed-wiring`` and ``healthy`` are trained on ``build.seed_wiring(N)`` / ``build.sglang_wiring(N)`` of the Qwen3
target, the fault copies are build.write_variant's. It is not calibrated (the default lab's calibration retrains a
Llama target): the flagship's own interval rules decide on it, and say "inconclusive" where the sample cannot.

Public API: ``Qwen3Recipe``, ``TARGET_CLASSES``, ``target_class_of(root) -> str``,
``build_qwen3_lab(root, progress) -> None`` (what ``builder.build_lab`` calls for a Qwen3 lab).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from orchestrator.errors import UserInputError
from orchestrator.lab.building.qwen3_shipped import NOT_SHIPPED, SHIPPED_QWEN3, Qwen3Manifest, read_manifest
from orchestrator.lab.training.qwen3_train import QWEN3_DRAFT, Qwen3Recipe
from orchestrator.lab.training.train import DraftRecipe, ProgressFn
from orchestrator.lab.training.train_job import run_job

#: the lab's target classes: the default (shipped) Llama and the on-demand Qwen3
TARGET_CLASSES = ("llama", "qwen3")
ARCHITECTURE = "Qwen3ForCausalLM"
_NO_MANIFEST = Qwen3Manifest(format=0, built={}, models={})


# -- cache and lab directory ---------------------------------------------------------------------------------------
def _training_key() -> dict[str, Any]:
    """What the Qwen3 models' cache keys add to the default lab's (model_cache._digest: RECIPE_VERSION, the training
    libraries, Python, the pinned numerics): the Qwen3 training code's own version. No source text or path."""
    from orchestrator.lab.training.qwen3_train import QWEN3_TRAINING_VERSION

    return {"qwen3_training": QWEN3_TRAINING_VERSION}


def _shipped_or_trained(final: Path, job: dict[str, Any], progress: ProgressFn | None, from_scratch: bool) -> Path:
    """``final`` (a cache entry) made once: the package's shipped copy when it ships this very key
    (orchestrator/lab/building/qwen3_shipped.py), else trained here; ``from_scratch`` trains even over a shipped copy."""
    from orchestrator.lab.building import qwen3_shipped
    from orchestrator.lab.training.model_cache import _build_once
    from orchestrator.tree_removal import remove_tree

    name = f"{final.parent.name}/{final.name}"
    if from_scratch and (final / qwen3_shipped.SHIPPED_MARK).exists():
        remove_tree(final)  # a copy of the shipped model is not a training

    def make(tmp: Path) -> Path:
        if from_scratch or not qwen3_shipped.install(name, tmp):
            run_job({**job, "target_class": "qwen3", "out": str(tmp)}, progress)
        return tmp

    return _build_once(final, make)


def is_shipped_copy(model: Path) -> bool:
    """Whether a cached model was copied from the package's shipped Qwen3 models, not trained here."""
    from orchestrator.lab.building.qwen3_shipped import SHIPPED_MARK

    return (model / SHIPPED_MARK).exists()





def qwen3_target_entry(*, seed: int = 0, recipe: Qwen3Recipe = Qwen3Recipe()) -> Path:
    """Where the Qwen3 target of this recipe, seed and training code lives in the cache (made or not)."""
    from orchestrator.lab.training.model_cache import _digest, cache_root

    return cache_root() / f"qwen3-{_digest({'qwen3': asdict(recipe), 'seed': seed, **_training_key()})}" / "target"


def qwen3_draft_entry(target_dir: Path, *, wiring: list[int], seed: int = 0,
                      recipe: DraftRecipe = QWEN3_DRAFT) -> Path:
    """Where the draft on ``wiring`` for the cached Qwen3 target lives: beside it (made or not)."""
    from orchestrator.lab.training.model_cache import _digest

    key = _digest({"wiring": list(wiring), "seed": seed, "recipe": asdict(recipe),
                   "target": target_dir.parent.name, **_training_key()})
    return target_dir.parent / f"draft-{key}"


def cached_qwen3_target(*, seed: int = 0, recipe: Qwen3Recipe = Qwen3Recipe(), progress: ProgressFn | None = None,
                        from_scratch: bool = False) -> Path:
    """The Qwen3 target (``<cache>/lab-models/qwen3-<hash>/target``): shipped or trained on first use, cached."""
    return _shipped_or_trained(qwen3_target_entry(seed=seed, recipe=recipe),
                               {"kind": "target", "seed": seed, "recipe": asdict(recipe)}, progress, from_scratch)


def cached_qwen3_draft(target_dir: Path, *, wiring: list[int], seed: int = 0, recipe: DraftRecipe = QWEN3_DRAFT,
                       progress: ProgressFn | None = None, from_scratch: bool = False) -> Path:
    """A draft on ``wiring`` for the cached Qwen3 target, stored beside it: shipped or trained on first use."""
    job = {"kind": "draft", "target_dir": str(target_dir), "wiring": list(wiring), "seed": seed,
           "recipe": asdict(recipe)}
    return _shipped_or_trained(qwen3_draft_entry(target_dir, wiring=wiring, seed=seed, recipe=recipe), job,
                               progress, from_scratch)


def shipped_entries() -> list[Path]:
    """The cache entries the package ships for this recipe: the target and the drafts on the two trained wirings."""
    from orchestrator.lab.building import build

    target = qwen3_target_entry()
    n = Qwen3Recipe().num_layers
    return [target, *(qwen3_draft_entry(target, wiring=w) for w in (build.seed_wiring(n), build.sglang_wiring(n)))]


def target_class_of(root: Path) -> str:
    """``qwen3`` for a lab directory built with ``--target-class qwen3``, else ``llama``."""
    from orchestrator.lab.building.build import read_state

    return "qwen3" if read_state(root).get("target_class") == "qwen3" else "llama"


def check_target_class(name: str) -> str:
    if name not in TARGET_CLASSES:
        raise UserInputError(f"unknown lab target class {name!r}; choose one of: {', '.join(TARGET_CLASSES)}")
    return name


def _architecture(model: Path) -> str | None:
    try:
        archs = json.loads((model / "config.json").read_text()).get("architectures") or [None]
    except (OSError, ValueError):
        return None
    return archs[0] if isinstance(archs[0], str) else None


def build_qwen3_lab(base: Path, state: dict[str, Any], report: Any, timings: dict[str, float], *,
                    from_scratch: bool = False) -> None:
    """Make ``base`` a Qwen3 lab: the Qwen3 target, both trained drafts and the fault copies (what is missing); the
    package's shipped Qwen3 models where it ships this recipe's (qwen3_shipped.py), unless ``from_scratch``.

    :raises UserInputError: ``base`` already holds a target of another class (a lab directory has one target)."""
    from orchestrator.lab.building import build

    target = base / "target"
    if build.is_complete(target) and _architecture(target) != ARCHITECTURE:
        raise UserInputError(f"{base} already holds the default lab's Llama target: give another --dir for the "
                             "Qwen3 lab (a lab directory has one target)")
    state["target_class"] = "qwen3"
    t0 = time.monotonic()

    def target_progress(message: str, fraction: float) -> None:
        report("target", message, fraction)

    trained = cached_qwen3_target(progress=target_progress, from_scratch=from_scratch)
    if not build.is_complete(target):
        build.copy_model(trained, target, skip=NOT_SHIPPED)
        timings["target"] = round(time.monotonic() - t0, 1)
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if is_shipped_copy(trained):
            state["origin"] = {"kind": "shipped", "installed_at": when, "target_class": "qwen3",
                               "from": str(SHIPPED_QWEN3), "built": (read_manifest() or _NO_MANIFEST).built,
                               "why": "--target-class qwen3 (the package's shipped Qwen3 models, not calibrated)"}
        else:
            state["origin"] = {"kind": "built", "built_at": when, "target_class": "qwen3",
                               "why": "--target-class qwen3 (" + ("--from-scratch" if from_scratch else
                                                                  "built on demand") + ", not calibrated)"}
        state["target_seed"] = 0
    build.write_state(base, {**state, "format": build.LAB_FORMAT})  # the class is known before the drafts train
    n = build.num_layers_of(base)
    drafts = base / "drafts"
    wanted = [(kind, wiring) for kind, wiring in (("seed-wiring", build.seed_wiring(n)),
                                                  ("healthy", build.sglang_wiring(n)))
              if not build.is_complete(drafts / kind)]

    def train(kind: str, wiring: list[int]) -> None:
        t0 = time.monotonic()

        def progress(message: str, fraction: float) -> None:
            report(f"draft {kind}", message, fraction)

        made = cached_qwen3_draft(trained, wiring=wiring, progress=progress, from_scratch=from_scratch)
        build.copy_model(made, drafts / kind, skip=NOT_SHIPPED)
        timings[f"draft {kind}"] = round(time.monotonic() - t0, 1)
        how = "shipped" if is_shipped_copy(made) else "trained here"
        report(f"draft {kind}", f"draft {kind} ready ({how}: trained on hidden_states {wiring} of the Qwen3 "
                                "target)", 1.0)

    # the two drafts are independent one-thread child processes: trained side by side, as two cores allow
    with ThreadPoolExecutor(max_workers=2) as pool:
        for future in [pool.submit(train, kind, wiring) for kind, wiring in wanted]:
            future.result()  # a failed training raises here, after the other finished
    for kind in ("no-lm-head", "direct-d2t", "off-by-one"):
        if not build.is_complete(drafts / kind):
            build.write_variant(drafts / "seed-wiring", drafts / kind, kind, n)
    state["calibration"] = {}  # not calibrated: see the module doc

