"""The lab of a traffic category the draft never learned (issue 40): a target that knows more than its drafts.

Why it exists: the default lab's target and its drafts learned the same corpus, so no category of traffic is one
the draft missed (bench/category_coverage.py: a draft trained without docstrings serves docstrings as well, the
target drifting back to code). Here the target learns the lab's corpus and a ROT13 copy of it (every letter shifted
by 13: the same structure in other tokens, a language of its own), and two one-layer EAGLE-3 drafts learn it on
SGLang's wiring: ``both`` on the target's whole corpus, ``plain`` on the plain half only, the draft whose training
data did not cover a language its target speaks (z-lab/dflash#163). A traffic file of held-out code and the same
code in ROT13 (``traffic``) then holds the scenario: the ``plain`` draft serves ``rot13`` at about a quarter of
``code``'s accept length (tests/servers/test_traffic_replay.py, BENCHMARKS.md).

The models ship with the package (``orchestrator/data/lab-unseen/``: 13 MB, with a manifest of their sha256 and
the recipe that made them); ``python -m orchestrator.lab.building.unseen_lab --ship`` trains them again here
(about 4 minutes on 2 cores) and tests/lab/test_unseen_lab.py fails while the shipped recipe differs from this one.

The same models hold the template scenario: chat requests rendered with ``THINKING_TEMPLATE`` (a generation prompt
ending in a suffix no draft was trained after, off with ``enable_thinking: false``) against the same snippets as
completions (``chat_traffic``).

Public API: ``UNSEEN``, ``CATEGORY``, ``RECIPE``, ``THINKING_TEMPLATE``, ``rot13(text)``, ``mixed_corpus()``,
``train(out, progress)``, ``shipped() -> UnseenLab``, ``traffic(lab, path, per_category)``,
``chat_traffic(lab, path, per_category)``.
"""

from __future__ import annotations

import argparse
import codecs
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import OrchestratorError
from orchestrator.lab.building.build import sglang_wiring
from orchestrator.lab.training.train import DraftRecipe, ProgressFn, TargetRecipe

#: where the package ships the models
UNSEEN = Path(__file__).resolve().parents[2] / "data" / "lab-unseen"
#: the category the ``plain`` draft never saw
CATEGORY = "rot13"
#: bump when the training below changes what it makes (the shipped manifest records it)
TRAINING_VERSION = 1
RECIPE: dict[str, Any] = {"version": TRAINING_VERSION, "target": asdict(TargetRecipe()), "draft": asdict(DraftRecipe()),
                          "wiring": sglang_wiring(TargetRecipe().num_layers), "seed": 0}


@dataclass(frozen=True)
class UnseenLab:
    target: Path
    both: Path    # the draft trained on everything its target learned
    plain: Path   # the draft that never saw the ROT13 half


def rot13(text: str) -> str:
    return codecs.encode(text, "rot13")


def mixed_corpus() -> Any:
    """The lab's corpus followed by its ROT13 copy; the held-out files are the lab's."""
    from orchestrator.lab.training.corpus import Corpus, build_corpus

    plain = build_corpus()
    return Corpus(train_text=plain.train_text + "\n\n" + rot13(plain.train_text), held_out=plain.held_out,
                  files=plain.files)


def train(out: Path, progress: ProgressFn | None = None) -> UnseenLab:
    """Train the target and both drafts under ``out`` (``target``, ``drafts/both``, ``drafts/plain``)."""
    import torch
    from transformers import AutoTokenizer

    from orchestrator.lab.training.corpus import build_corpus
    from orchestrator.lab.training.train import train_draft, train_target

    lab = UnseenLab(out / "target", out / "drafts" / "both", out / "drafts" / "plain")
    train_target(lab.target, progress=progress, corpus=mixed_corpus())
    wiring = list(RECIPE["wiring"])
    train_draft(lab.target, lab.both, wiring=wiring, progress=progress)
    tokenizer = AutoTokenizer.from_pretrained(str(lab.target))
    text = build_corpus().train_text
    pieces = [text[i:i + 100_000] for i in range(0, len(text), 100_000)]
    plain = torch.tensor([t for enc in tokenizer.backend_tokenizer.encode_batch(pieces) for t in enc.ids])
    train_draft(lab.target, lab.plain, wiring=wiring, progress=progress, tokens=plain)
    return lab


def _files(root: Path) -> dict[str, str]:
    from orchestrator.lab.building.shipped import sha256_of

    return {p.relative_to(root).as_posix(): sha256_of(p) for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "manifest.json" and p.name != "lab_tokens.pt"}


def ship(out: Path) -> Path:
    """Train into ``out`` and copy the models (without the tokenised corpus) to the package with their manifest."""
    import shutil

    from orchestrator.tree_removal import remove_tree

    train(out, lambda message, _fraction: print(message, flush=True))
    remove_tree(UNSEEN)
    shutil.copytree(out, UNSEEN, ignore=shutil.ignore_patterns("lab_tokens.pt", ".complete"))
    (UNSEEN / "manifest.json").write_text(json.dumps({"recipe": RECIPE, "files": _files(UNSEEN)}, indent=2) + "\n")
    return UNSEEN


def shipped() -> UnseenLab:
    """The shipped models, checked against their manifest.

    :raises OrchestratorError: not shipped, or a file missing or changed."""
    manifest = UNSEEN / "manifest.json"
    if not manifest.is_file():
        raise OrchestratorError(f"{UNSEEN} holds no models; train them with `python -m "
                                "orchestrator.lab.building.unseen_lab --ship`", title="unseen-category lab missing")
    recorded = json.loads(manifest.read_text())
    if recorded.get("files") != _files(UNSEEN):
        raise OrchestratorError(f"{UNSEEN}: the models differ from their manifest; reinstall the package or train "
                                "them again (--ship)", title="unseen-category lab damaged")
    return UnseenLab(UNSEEN / "target", UNSEEN / "drafts" / "both", UNSEEN / "drafts" / "plain")


def traffic(lab: UnseenLab, path: Path, per_category: int = 24, max_tokens: int = 32) -> Path:
    """A traffic file of greedy completions: ``code`` (snippets of the held-out files, the lab's prompts) and
    ``rot13`` (the same snippets in ROT13), ``per_category`` of each."""
    prompts = json.loads((lab.target / "prompts.json").read_text())[:per_category]
    lines = [{"prompt": text, "temperature": 0, "max_tokens": max_tokens, "category": "code"} for text in prompts]
    lines += [{"prompt": rot13(text), "temperature": 0, "max_tokens": max_tokens, "category": CATEGORY}
              for text in prompts]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


#: a chat template whose generation prompt ends in a "thinking" suffix written in ROT13: a suffix no draft here was
#: trained after (the lab's corpus holds no conversations), which turns the target's answer into text neither draft
#: follows (tokenspeed#1305: a thinking suffix the draft never saw, 3.87 -> 2.08)
#: the suffix is switched off by ``chat_template_kwargs: {enable_thinking: false}``, as Qwen3's template switches its
#: thinking (on unless a request says otherwise)
THINKING_TEMPLATE = ("{% for m in messages %}{{ m['content'] }}{% endfor %}"
                     "{% if add_generation_prompt %}\n{% if enable_thinking is not defined or enable_thinking %}"
                     + rot13("# Let me think about it.\n# The answer:") + "\n{% endif %}{% endif %}")


def chat_traffic(lab: UnseenLab, path: Path, per_category: int = 24, max_tokens: int = 32) -> Path:
    """A traffic file of greedy requests on the same held-out snippets: ``code`` as completions, ``chat`` as chat
    requests, which a server with THINKING_TEMPLATE renders with its suffix."""
    prompts = json.loads((lab.target / "prompts.json").read_text())[:per_category]
    lines = [{"prompt": text, "temperature": 0, "max_tokens": max_tokens, "category": "code"} for text in prompts]
    lines += [{"messages": [{"role": "user", "content": text}], "temperature": 0, "max_tokens": max_tokens,
               "category": "chat"} for text in prompts]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ship", action="store_true", help="train here and replace the package's shipped models")
    parser.add_argument("--out", type=Path, required=True, help="where to train (kept: the tokenised corpus too)")
    ns = parser.parse_args(argv)
    if not ns.ship:
        parser.error("say --ship: it replaces orchestrator/data/lab-unseen/")
    print(ship(ns.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
