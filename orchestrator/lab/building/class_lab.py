"""The lab's on-demand target classes beside the default Llama: each a tiny target of its class, trained by the lab's
recipe at a reduced size, with EAGLE-3 drafts trained against it, made on demand (``orchestrator lab build
--target-class qwen3|kimi --dir DIR``): copied from the package's shipped models of that class
(orchestrator/lab/building/class_shipped.py), trained only when the recipe changed or ``--from-scratch`` asks.

Why they exist: the flagship's capture reads follow the target's class through the installed engine
(remote_probes/engine/target_capture.py). With a Llama target only, every read lands in llama.py whatever that code does.
- ``qwen3``: a ``Qwen3ForCausalLM`` makes the chain real: SGLang 0.5.12.post1's ``set_eagle3_layers_to_capture`` is in
  srt/models/qwen3.py while its layer loop (``Qwen3Model`` -> ``Qwen2Model.forward``) is in qwen2.py, and that loop
  captures the embedding output where Llama's raises; vLLM's captures in ``Qwen2Model.forward`` (qwen2.py).
- ``kimi``: the seed's own class (issue 38): a DeepSeek-V3 language model (MLA attention, routed and shared experts)
  inside the Kimi-K2.5 wrapper (``KimiK25ForConditionalGeneration``: ``text_config``, ``language_model.`` tensors),
  with MLA drafts (``Eagle3DeepseekV2ForCausalLM``). SGLang's wrapper delegates the capture to its language model
  (srt/models/kimi_k25.py -> deepseek_v2.py); the seed's fault (a draft trained on [embed, mid, last] served SGLang's
  default [2, N//2, N-3]) is planted on it as on the other classes (orchestrator/lab/training/kimi_train.py).

The recipes are orchestrator/lab/training/qwen3_train.py's and kimi_train.py's, trained by train.py's loops with the
class; their models are cached under ``<cache>/lab-models/<class>-<hash>/``.

Layout of a class lab directory: the default lab's (build.py) with ``lab.json`` ``target_class``; the drafts
``seed-wiring`` and ``healthy`` are trained on ``build.seed_wiring(N, class)`` / ``build.sglang_wiring(N)`` of the class's
target, the fault copies are build.write_variant's. It is not calibrated (the default lab's calibration retrains a
Llama target): the flagship's own interval rules decide on it, and say "inconclusive" where the sample cannot.

Public API: ``ClassLab``, ``CLASS_LABS`` (name -> ClassLab), ``TARGET_CLASSES``, ``target_class_of(root) -> str``,
``check_target_class(name)``, ``cached_target(lab)``, ``cached_draft(lab, target, wiring)``, ``shipped_entries(lab)``,
``is_shipped_copy(model)``, ``build_class_lab(lab, base, state, report, timings)`` (what ``builder.build_lab`` calls).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import UserInputError
from orchestrator.lab.building.class_shipped import NOT_SHIPPED, ShippedManifest, read_manifest, shipped_root
from orchestrator.lab.training.kimi_train import KIMI_DRAFT, KIMI_TRAINING_VERSION, KimiRecipe
from orchestrator.lab.training.kimi_wrapper import WRAPPER_ARCHITECTURE
from orchestrator.lab.training.qwen3_train import QWEN3_DRAFT, QWEN3_TRAINING_VERSION, Qwen3Recipe
from orchestrator.lab.training.train import DraftRecipe, ProgressFn
from orchestrator.lab.training.train_job import run_job


@dataclass(frozen=True)
class ClassLab:
    """One on-demand target class: its name (``--target-class``, the cache entries' prefix, lab.json's
    ``target_class``), the title people read, the architecture its target's config.json names, its recipes, and the
    version of its training code (in the cache keys: no source text or path)."""

    name: str
    title: str
    architecture: str
    recipe: Any
    draft: DraftRecipe
    training_key: dict[str, int] = field(default_factory=dict)


CLASS_LABS = {
    "qwen3": ClassLab("qwen3", "Qwen3", "Qwen3ForCausalLM", Qwen3Recipe(), QWEN3_DRAFT,
                      {"qwen3_training": QWEN3_TRAINING_VERSION}),
    "kimi": ClassLab("kimi", "Kimi-K2.5-class (DeepSeek-V3 MLA + MoE in the Kimi-K2.5 wrapper)", WRAPPER_ARCHITECTURE,
                     KimiRecipe(), KIMI_DRAFT, {"kimi_training": KIMI_TRAINING_VERSION}),
}
#: the lab's target classes: the default (shipped, calibrated) Llama and the on-demand ones
TARGET_CLASSES = ("llama", *CLASS_LABS)
_NO_MANIFEST = ShippedManifest(format=0, built={}, models={})


# -- cache and lab directory ---------------------------------------------------------------------------------------
def _shipped_or_trained(lab: ClassLab, final: Path, job: dict[str, Any], progress: ProgressFn | None,
                        from_scratch: bool) -> Path:
    """``final`` (a cache entry) made once: the package's shipped copy when it ships this very key
    (orchestrator/lab/building/class_shipped.py), else trained here; ``from_scratch`` trains even over a shipped
    copy."""
    from orchestrator.lab.building import class_shipped
    from orchestrator.lab.training.model_cache import _build_once
    from orchestrator.tree_removal import remove_tree

    name = f"{final.parent.name}/{final.name}"
    if from_scratch and (final / class_shipped.SHIPPED_MARK).exists():
        remove_tree(final)  # a copy of the shipped model is not a training

    def make(tmp: Path) -> Path:
        if from_scratch or not class_shipped.install(name, tmp, shipped_root(lab.name)):
            run_job({**job, "target_class": lab.name, "out": str(tmp)}, progress)
        return tmp

    return _build_once(final, make)


def is_shipped_copy(model: Path) -> bool:
    """Whether a cached model was copied from the package's shipped models, not trained here."""
    from orchestrator.lab.building.class_shipped import SHIPPED_MARK

    return (model / SHIPPED_MARK).exists()


def target_entry(lab: ClassLab, *, seed: int = 0) -> Path:
    """Where the class's target of its recipe, this seed and its training code lives in the cache (made or not)."""
    from orchestrator.lab.training.model_cache import _digest, cache_root

    key = _digest({lab.name: asdict(lab.recipe), "seed": seed, **lab.training_key})
    return cache_root() / f"{lab.name}-{key}" / "target"


def draft_entry(lab: ClassLab, target_dir: Path, *, wiring: list[int], seed: int = 0) -> Path:
    """Where the draft on ``wiring`` for the class's cached target lives: beside it (made or not)."""
    from orchestrator.lab.training.model_cache import _digest

    key = _digest({"wiring": list(wiring), "seed": seed, "recipe": asdict(lab.draft),
                   "target": target_dir.parent.name, **lab.training_key})
    return target_dir.parent / f"draft-{key}"


def cached_target(lab: ClassLab, *, seed: int = 0, progress: ProgressFn | None = None,
                  from_scratch: bool = False) -> Path:
    """The class's target (``<cache>/lab-models/<class>-<hash>/target``): shipped or trained on first use, cached."""
    return _shipped_or_trained(lab, target_entry(lab, seed=seed),
                               {"kind": "target", "seed": seed, "recipe": asdict(lab.recipe)}, progress, from_scratch)


def cached_draft(lab: ClassLab, target_dir: Path, *, wiring: list[int], seed: int = 0,
                 progress: ProgressFn | None = None, from_scratch: bool = False) -> Path:
    """A draft on ``wiring`` for the class's cached target, stored beside it: shipped or trained on first use."""
    job = {"kind": "draft", "target_dir": str(target_dir), "wiring": list(wiring), "seed": seed,
           "recipe": asdict(lab.draft)}
    return _shipped_or_trained(lab, draft_entry(lab, target_dir, wiring=wiring, seed=seed), job, progress,
                               from_scratch)


def shipped_entries(lab: ClassLab) -> list[Path]:
    """The cache entries the package ships for the class: the target and the drafts on the two trained wirings."""
    from orchestrator.lab.building import build

    target = target_entry(lab)
    n = lab.recipe.num_layers
    return [target, *(draft_entry(lab, target, wiring=w)
                      for w in (build.seed_wiring(n, lab.name), build.sglang_wiring(n)))]


def target_class_of(root: Path) -> str:
    """The class a lab directory was built with (``--target-class``), ``llama`` for the default lab."""
    from orchestrator.lab.building.build import read_state

    name = read_state(root).get("target_class")
    return name if name in CLASS_LABS else "llama"


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


def build_class_lab(lab: ClassLab, base: Path, state: dict[str, Any], report: Any, timings: dict[str, float], *,
                    from_scratch: bool = False) -> None:
    """Make ``base`` a lab of ``lab``'s class: its target, both trained drafts and the fault copies (what is
    missing); the package's shipped models where it ships this recipe's (class_shipped.py), unless ``from_scratch``.

    :raises UserInputError: ``base`` already holds a target of another class (a lab directory has one target)."""
    from orchestrator.lab.building import build

    target = base / "target"
    held = _architecture(target) if build.is_complete(target) else None
    if held is not None and held != lab.architecture:
        what = "the default lab's Llama target" if held == "LlamaForCausalLM" else f"a {held} target"
        raise UserInputError(f"{base} already holds {what}: give another --dir for the {lab.title} lab (a lab "
                             "directory has one target)")
    state["target_class"] = lab.name
    t0 = time.monotonic()

    def target_progress(message: str, fraction: float) -> None:
        report("target", message, fraction)

    trained = cached_target(lab, progress=target_progress, from_scratch=from_scratch)
    if not build.is_complete(target):
        build.copy_model(trained, target, skip=NOT_SHIPPED)
        timings["target"] = round(time.monotonic() - t0, 1)
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if is_shipped_copy(trained):
            root = shipped_root(lab.name)
            state["origin"] = {"kind": "shipped", "installed_at": when, "target_class": lab.name, "from": str(root),
                               "built": (read_manifest(root) or _NO_MANIFEST).built,
                               "why": f"--target-class {lab.name} (the package's shipped {lab.title} models, not "
                                      "calibrated)"}
        else:
            state["origin"] = {"kind": "built", "built_at": when, "target_class": lab.name,
                               "why": f"--target-class {lab.name} (" + ("--from-scratch" if from_scratch else
                                                                         "built on demand") + ", not calibrated)"}
        state["target_seed"] = 0
    build.write_state(base, {**state, "format": build.LAB_FORMAT})  # the class is known before the drafts train
    n = build.num_layers_of(base)
    drafts = base / "drafts"
    wanted = [(kind, wiring) for kind, wiring in (("seed-wiring", build.seed_wiring(n, lab.name)),
                                                  ("healthy", build.sglang_wiring(n)))
              if not build.is_complete(drafts / kind)]

    def train(kind: str, wiring: list[int]) -> None:
        t0 = time.monotonic()

        def progress(message: str, fraction: float) -> None:
            report(f"draft {kind}", message, fraction)

        made = cached_draft(lab, trained, wiring=wiring, progress=progress, from_scratch=from_scratch)
        build.copy_model(made, drafts / kind, skip=NOT_SHIPPED)
        timings[f"draft {kind}"] = round(time.monotonic() - t0, 1)
        how = "shipped" if is_shipped_copy(made) else "trained here"
        report(f"draft {kind}", f"draft {kind} ready ({how}: trained on hidden_states {wiring} of the {lab.name} "
                                "target)", 1.0)

    # the two drafts are independent one-thread child processes: trained side by side, as two cores allow
    with ThreadPoolExecutor(max_workers=2) as pool:
        for future in [pool.submit(train, kind, wiring) for kind, wiring in wanted]:
            future.result()  # a failed training raises here, after the other finished
    for kind in ("no-lm-head", "direct-d2t", "off-by-one"):
        if not build.is_complete(drafts / kind):
            build.write_variant(drafts / "seed-wiring", drafts / kind, kind, n, lab.name)
    state["calibration"] = {}  # not calibrated: see the module doc
