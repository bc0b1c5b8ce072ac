"""The lab standing in for vLLM (``$ORCHESTRATOR_LAB_ENGINE=vllm``): its scenarios, drafts and host vars.

The lab server in vLLM mode (server_vllm.py) loads drafts by the rules of the vLLM tree on its path: the cached
vllm 0.33.0 tree (build.cached_vllm_tree), which also serves ``read_source`` reads of ``package: vllm``. The
scenarios reuse the SGLang lab's trained drafts and its fault copies (nothing is retrained, the calibrated build is
untouched); the one vLLM-only draft is a config-only copy written under ``vllm-drafts/``, outside ``drafts/``.

Where the engines part (lab target: 12 layers; vllm 0.33.0, Model Runner V2; SGLang 0.5.x):

| scenario    | draft ids in config.json                  | trained on | vLLM feeds  | SGLang feeds | planted on vLLM |
|-------------|-------------------------------------------|------------|-------------|--------------|-----------------|
| seed-wiring | none                                      | [0, 6, 11] | [2, 6, 9]   | [2, 6, 9]    | wiring          |
| healthy     | nested [1, 5, 8]                          | [2, 6, 9]  | [2, 6, 9]   | [2, 6, 9]    | none            |
| off-by-one  | top-level [0, 6, 11] (vLLM's convention)  | [0, 6, 11] | [0, 6, 11]  | [2, 6, 9]    | none (SGLang: wiring) |
| sglang-ids  | nested [-1, 5, 10] (SGLang's convention)  | [0, 6, 11] | [2, 6, 9]   | [0, 6, 11]   | wiring, layer ids |
| direct-d2t  | none; d2t stored as target ids            | [0, 6, 11] | [2, 6, 9]   | [2, 6, 9]    | d2t, wiring     |
| no-lm-head  | none; lm_head.weight dropped              | [0, 6, 11] | [2, 6, 9]   | [2, 6, 9]    | lm_head missing, wiring |

The issue-26 faults are copies of the healthy draft (nested [1, 5, 8], trained on [2, 6, 9], fed [2, 6, 9] by both):
``own-embedding`` ships an embed_tokens it was not trained with (vLLM keeps a distinct one: served_part; SGLang
replaces it: nothing), ``trained-embedding`` one it WAS trained with (the reverse), ``attention-heads`` and
``rope-theta`` a config both engines build the layer from (served_part on both).

``no-lm-head`` differs by engine too: SGLang keeps a random head, so nothing the draft learnt shows and its
wiring fault (a copy of seed-wiring) stays hidden; vLLM 0.33 shares the target's head cut to the draft vocabulary,
which predicts well enough for the wiring fault underneath to be measured, so both are confirmed there.
``off-by-one`` and ``sglang-ids`` are the divergent pair: the same trained weights, right for one engine and wrong
for the other (playbooks/cross-engine.yaml serves one draft on both and names why one accepts more).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from orchestrator.errors import UserInputError
from orchestrator.lab.building import build
from orchestrator.lab.building.build import BuildProgress, Scenario, seed_wiring
from orchestrator.lab.building.builder import build_lab
from orchestrator.tree_removal import remove_tree

VLLM_VERSION = build.VLLM_VERSIONS[0]
#: vLLM scenario -> the SGLang lab scenario whose build provides its drafts
BASE = {"seed-wiring": "seed-wiring", "healthy": "healthy", "off-by-one": "off-by-one", "sglang-ids": "seed-wiring",
        "direct-d2t": "direct-d2t", "no-lm-head": "no-lm-head", "own-embedding": "own-embedding",
        "trained-embedding": "trained-embedding", "attention-heads": "attention-heads", "rope-theta": "rope-theta",
        "shuffled-draft": "shuffled-draft", "tied-head": "tied-head",
        "eps-config": "eps-config", "no-d2t": "no-d2t", "norm-output": "norm-output",
        "vocab-undeclared": "vocab-undeclared", "hidden-size": "hidden-size", "bf16-extra-keys": "bf16-extra-keys",
        "residual-norm": "residual-norm", "compiled-prefix": "compiled-prefix", "model-prefix": "model-prefix",
        "short-context": "short-context"}
VLLM_SCENARIO_NAMES = tuple(BASE)
#: drafts written here (config-only copies), keyed by name -> (source draft, the config change)
VLLM_DRAFTS = ("sglang-ids",)


def lab_engine() -> str:
    """``$ORCHESTRATOR_LAB_ENGINE``: which engine the lab stands in for (sglang, the default, or vllm)."""
    engine = os.environ.get("ORCHESTRATOR_LAB_ENGINE") or "sglang"
    if engine not in ("sglang", "vllm"):
        raise UserInputError(f"ORCHESTRATOR_LAB_ENGINE must be sglang or vllm, got {engine!r}")
    return engine


def check_vllm_scenario(name: str) -> str:
    if name not in BASE:
        raise UserInputError(f"unknown vLLM lab scenario {name!r}; choose one of: {', '.join(VLLM_SCENARIO_NAMES)}")
    return name


def spec_config(draft: Path, k: int = 7) -> dict[str, Any]:
    return {"method": "eagle3", "model": str(draft), "num_speculative_tokens": k}


def draft_dir(base: Path, name: str) -> Path:
    return base / ("vllm-drafts" if name in VLLM_DRAFTS else "drafts") / name


def vllm_scenarios(base: Path, num_layers: int) -> dict[str, Scenario]:
    """The vLLM scenarios (``Scenario.draft`` names the draft; ``draft_dir`` says where it lives)."""
    capture = {"lab-capture-layers": ",".join(str(i) for i in seed_wiring(num_layers, build.target_class_in(base)))}
    seed = draft_dir(base, "seed-wiring")

    def flags(draft: str) -> dict[str, Any]:
        return {"speculative-config": spec_config(draft_dir(base, draft))}

    fixed_seed = {"speculative-config": spec_config(seed), **capture}
    return {s.name: s for s in [
        Scenario("seed-wiring", "draft trained embedding-first, vLLM feeds its default layers", "seed-wiring",
                 flags("seed-wiring"), fixed_seed, "no ids: vLLM feeds (2, N//2, N-3)", confirms=("wiring",)),
        Scenario("healthy", "draft trained on the default wiring", "healthy", flags("healthy"), flags("healthy"),
                 "none"),
        Scenario("off-by-one", "top-level ids (vLLM's convention): right on vLLM, ignored by SGLang", "off-by-one",
                 flags("off-by-one"), flags("off-by-one"), "none on vLLM; SGLang feeds its default"),
        Scenario("sglang-ids", "nested eagle_config ids (SGLang's +1 convention), which vLLM's default runner "
                 "ignores", "sglang-ids", flags("sglang-ids"), {**flags("sglang-ids"), **capture},
                 "eagle_config ids [-1, N//2-1, N-2] read by SGLang only", confirms=("wiring", "layer_id_convention")),
        Scenario("direct-d2t", "d2t stored as target ids instead of offsets", "direct-d2t", flags("direct-d2t"),
                 fixed_seed, "d2t = target ids (and, as in seed-wiring, no ids)", "seed-wiring",
                 confirms=("d2t_mapping", "wiring")),
        Scenario("no-lm-head", "draft_vocab_size declared, lm_head.weight missing", "no-lm-head",
                 flags("no-lm-head"), fixed_seed, "lm_head.weight dropped (and, as in seed-wiring, no ids)",
                 "seed-wiring", confirms=("lm_head_missing", "wiring")),
        # issue 26 (build.ISSUE26_FAULTS): the same fault copies, with vLLM's answers
        *[Scenario(name, title, name, flags(name), flags("healthy"), fault, "healthy", confirms=confirms)
          for name, (title, fault, confirms) in VLLM_ISSUE26_FAULTS.items()],
        # a draft that predicts nothing about this target: no wiring, no part, no flag helps, and the server
        # measures what the offline test predicts: the verdict is about the draft (issue 26), on either engine
        Scenario("shuffled-draft", "the draft's trained weights shuffled: it predicts nothing about this target",
                 "shuffled-draft", flags("shuffled-draft"), {**flags("shuffled-draft"), **capture},
                 "every weight matrix's entries permuted", "seed-wiring"),
    ]}


#: vLLM keeps a distinct embed_tokens the checkpoint ships (llm_base_proposer.py _maybe_share_embeddings), where
#: SGLang always replaces it: the two embedding faults swap engines
VLLM_ISSUE26_FAULTS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "own-embedding": ("the checkpoint ships an embed_tokens the draft was not trained with (TorchSpec #38, vllm "
                      "#50158): vLLM keeps a distinct one", "embed_tokens.weight = the target's rows in another "
                      "order", ("served_part",)),
    "trained-embedding": ("the draft trained its own embedding: vLLM keeps a distinct one (vllm PR #27732), so "
                          "nothing is wrong here", "embed_tokens.weight + input_layernorm sign-flipped together", ()),
    "attention-heads": build.ISSUE26_FAULTS["attention-heads"],
    "rope-theta": build.ISSUE26_FAULTS["rope-theta"],
    # issue 37: vLLM's EAGLE-3 class never reads tie_word_embeddings (llama_eagle3.py builds its own lm_head of
    # draft_vocab_size rows and loads the checkpoint's): nothing is wrong here
    "tied-head": ("the config says tie_word_embeddings true, which vLLM's EAGLE-3 class never reads: the trained "
                  "lm_head is served", "tie_word_embeddings: true", ()),
    "eps-config": build.ISSUE37_FAULTS["eps-config"],
    "no-d2t": build.ISSUE37_FAULTS["no-d2t"],
    "norm-output": build.ISSUE37_FAULTS["norm-output"],
    "vocab-undeclared": build.ISSUE37_FAULTS["vocab-undeclared"],
    "hidden-size": build.ISSUE37_FAULTS["hidden-size"],
    "bf16-extra-keys": build.ISSUE37_FAULTS["bf16-extra-keys"],
    "compiled-prefix": ("the checkpoint saved from a torch.compile'd module: every tensor name starts with "
                        "'_orig_mod.' (pytorch issue 101107): vLLM refuses the draft at start", "'_orig_mod.' before "
                        "every tensor name", ("draft_field",)),
    "model-prefix": ("the checkpoint's tensors saved under 'model.' (the HF layout SGLang accepts): vLLM puts "
                     "'model.' before every name and refuses the draft at start (vllm issues 21755, 18906)",
                     "'model.' before every tensor name but lm_head, d2t and t2d", ("draft_field",)),
    "short-context": build.ISSUE37_FAULTS["short-context"],
    "residual-norm": ("norm_before_residual true on a draft trained without it: vLLM's EAGLE-3 layer reads it "
                      "(llama_eagle3.py), so the residual is normed", "norm_before_residual: true", ("served_part",)),
}


def write_vllm_draft(base: Path, name: str, num_layers: int) -> Path:
    """A config-only copy of a built draft (no training): ``sglang-ids`` = seed-wiring with its trained wiring
    written as nested eagle_config ids in SGLang's convention (HF index - 1)."""
    if name != "sglang-ids":
        raise ValueError(name)
    src, dst = base / "drafts" / "seed-wiring", draft_dir(base, name)
    if build.is_complete(dst):
        return dst
    tmp = dst.with_name(dst.name + ".tmp")
    remove_tree(tmp)
    shutil.copytree(src, tmp, ignore=shutil.ignore_patterns(".complete", "lab_tokens.pt"))
    config = json.loads((tmp / "config.json").read_text())
    eagle = dict(config.get("eagle_config") or {})
    eagle["eagle_aux_hidden_state_layer_ids"] = [i - 1 for i in seed_wiring(num_layers, build.target_class_in(base))]
    config["eagle_config"] = eagle
    (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (tmp / "lab_fault.json").write_text(json.dumps({"variant_of": "seed-wiring", "fault": name}) + "\n")
    (tmp / ".complete").write_text("ok\n")
    remove_tree(dst)
    tmp.rename(dst)
    return dst


def vllm_lab_is_built(scenario: str, *, root: Path | None = None) -> bool:
    base = build.lab_dir(root)
    name = check_vllm_scenario(scenario)
    tree = build.cache_dir() / "vllm-src" / VLLM_VERSION / "vllm" / "__init__.py"
    if not build.lab_is_built(BASE[name], root=base) or not tree.is_file():
        return False
    if BASE[name] != "seed-wiring" and not build.lab_is_built("seed-wiring", root=base):  # the fixes' draft
        return False
    return name not in VLLM_DRAFTS or build.is_complete(draft_dir(base, name))


def ensure_vllm_lab(scenario: str, progress: BuildProgress | None = None, *, root: Path | None = None) -> Path:
    """Build the SGLang lab scenario that provides the drafts, the vLLM-only copies, and the vllm tree."""
    name = check_vllm_scenario(scenario)
    paths = build_lab(BASE[name], root=root, progress=progress)
    if BASE[name] != "seed-wiring":
        build_lab("seed-wiring", root=root, progress=progress)  # the fixes' draft
    if name in VLLM_DRAFTS:
        with build.lab_lock(paths.root):  # the same lock as the builds: no second writer of its .tmp
            write_vllm_draft(paths.root, name, paths.num_layers)
    build.cached_vllm_tree(VLLM_VERSION)
    return paths.root


def vllm_site() -> Path:
    """The cached vllm tree's import root (not installed here: the lab server then follows the newest rules)."""
    return build.cache_dir() / "vllm-src" / VLLM_VERSION


def vllm_host_vars(scenario: str, *, root: Path | str | None = None) -> dict[str, Any]:
    name = check_vllm_scenario(scenario)
    base = build.lab_dir(root)
    n = build.num_layers_of(base)
    sc = vllm_scenarios(base, n)[name]
    return {"engine": "lab-vllm", "engine_family": "vllm", "scenario": name, "scenario_title": sc.title,
            "lab_dir": str(base), "target": str(base / "target"), "draft": str(draft_dir(base, sc.draft)),
            "candidate_flags": dict(sc.candidate), "fixed_flags": dict(sc.fixed), "vllm_site": str(vllm_site()),
            "vllm_version": VLLM_VERSION, "target_num_layers": n, "server_module": "orchestrator.lab.stand_in.vllm_server",
            "prompts_file": str(base / "target" / "prompts.json")}
