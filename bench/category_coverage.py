"""Can the lab stand in for "a category the draft never trained on"? (issue 40) A draft trained on the lab's corpus
with every docstring and comment removed (37% of its text), against the healthy draft trained on all of it, on
prompts that end inside a docstring and prompts that end inside code, from the held-out files.

Trains that draft (one-layer EAGLE-3 on SGLang's wiring, the lab's recipe, ~65 s on 2 cores) under a temporary
directory, then serves both drafts through the lab's model runner (speculative, 5 steps, greedy, 32 tokens) and
prints the mean accept length per request with its 95% interval. Measured 2026-12-05 (BENCHMARKS.md): no gap, so
the lab's target cannot stand in for this scenario (its docstring continuations are code-like; an EAGLE-3 draft fed
the target's own late layers follows it wherever the target goes).

    .venv/bin/python bench/category_coverage.py [--lab-root DIR]
"""

from __future__ import annotations

import argparse
import ast
import io
import logging
import sys
import tempfile
import time
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _docstrings(tree: ast.AST) -> list[ast.Expr]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.append(first)
    return found


def strip_docs_and_comments(source: str) -> str | None:
    """The source without its docstring lines and comments, its formatting otherwise kept; None if it does not parse."""
    try:
        tree = ast.parse(source)
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (SyntaxError, tokenize.TokenError, ValueError):
        return None
    drop = {n for d in _docstrings(tree) for n in range(d.lineno, (d.end_lineno or d.lineno) + 1)}
    cut = {t.start[0]: t.start[1] for t in tokens if t.type == tokenize.COMMENT}
    out = []
    for n, line in enumerate(source.splitlines(keepends=True), 1):
        if n in drop:
            continue
        if n in cut:
            line = line[:cut[n]].rstrip()
            if not line.strip():
                continue
            line += "\n"
        out.append(line)
    return "".join(out)


def prompts(held_out: dict[str, str]) -> dict[str, list[str]]:
    """Up to 3 per file of each: ending three words into a function's or class's docstring, ending a third of the
    way into its first statement's line; each the 500 characters before its end."""
    out: dict[str, list[str]] = {"code": [], "docstring": []}
    for source in held_out.values():
        offsets = [0]
        for line in source.splitlines(keepends=True):
            offsets.append(offsets[-1] + len(line))
        docs = code = 0
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.FunctionDef | ast.ClassDef) or not node.body:
                continue
            first = node.body[0]
            if first in _docstrings(node) and docs < 3 and len(first.value.value.split()) >= 10:  # type: ignore[attr-defined]
                start = offsets[first.lineno - 1] + first.col_offset
                words, i = 0, start + 3
                while i < len(source) and words < 3:
                    words += source[i].isspace() and not source[i - 1].isspace()
                    i += 1
                out["docstring"].append(source[max(0, i - 500):i])
                docs += 1
            body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            if body and code < 3 and isinstance(node, ast.FunctionDef):
                start = offsets[body[0].lineno - 1] + body[0].col_offset
                end = source.find("\n", start)
                cut = start + max(4, (end - start) // 3)
                out["code"].append(source[max(0, cut - 500):cut])
                code += 1
    return out


def main(argv: list[str] | None = None) -> int:
    import torch

    from orchestrator.lab.building.build import sglang_wiring
    from orchestrator.lab.building.builder import build_lab
    from orchestrator.lab.stand_in.model_runner import LabModelRunner
    from orchestrator.lab.stand_in.sglang_args import build_parser, resolve
    from orchestrator.lab.training.corpus import build_corpus, stdlib_files
    from orchestrator.lab.training.train import train_draft
    from remote_probes.evaluation.interval_stats import mean_interval
    from tests.labdir import test_lab_root

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lab-root", type=Path, default=None)
    ns = p.parse_args(argv)
    lab = build_lab("seed-wiring", root=ns.lab_root or test_lab_root())
    started = time.monotonic()
    corpus = build_corpus()
    held = set(corpus.held_out.values())
    parts, size = [], 0
    for path in stdlib_files():  # the target's training files, in its order, each stripped
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if text in held or size >= 4_000_000:
            continue
        size += len(text)
        stripped = strip_docs_and_comments(text)
        if stripped is not None:
            parts.append(stripped)
    text = "\n\n".join(parts)
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "target"
        target.mkdir()
        for f in lab.target.iterdir():
            (target / f.name).symlink_to(f)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(lab.target))
        pieces = [text[i:i + 100_000] for i in range(0, len(text), 100_000)]
        ids = [t for enc in tokenizer.backend_tokenizer.encode_batch(pieces) for t in enc.ids]
        torch.save(torch.tensor(ids, dtype=torch.long), target / "lab_tokens.pt")
        print(f"corpus: {len(corpus.train_text)} characters, {len(text)} without docstrings and comments")
        code_only = train_draft(target, Path(tmp) / "code-only", wiring=sglang_wiring(lab.num_layers))
        print(f"code-only draft trained in {time.monotonic() - started:.0f} s\n")
        asked = prompts(corpus.held_out)
        print("| draft | prompts ending in | requests | accept length [95%] |\n|---|---|---|---|")
        for name, draft in (("healthy (all of the corpus)", lab.drafts["healthy"]), ("code only", code_only)):
            args = build_parser().parse_args([
                "--model-path", str(lab.target), "--speculative-algorithm", "EAGLE3",
                "--speculative-draft-model-path", str(draft), "--speculative-num-steps", "5",
                "--speculative-eagle-topk", "1"])
            runner = LabModelRunner(resolve(args, target_architecture="LlamaForCausalLM"),
                                    log=logging.getLogger("t").debug)
            for kind, texts in asked.items():
                accepts = []
                for prompt in texts:
                    gen = runner.generate(runner.tokenizer(prompt, add_special_tokens=False)["input_ids"],
                                          max_new_tokens=32, stop=[], stop_token_ids=[], ignore_eos=False)
                    accepts.append(gen.spec.accepted_tokens / max(gen.spec.verify_ct, 1))
                iv = mean_interval(accepts, low=1.0)
                print(f"| {name} | {kind} | {len(accepts)} | {iv.estimate:.2f} {iv.as_list(2)} |" if iv else
                      f"| {name} | {kind} | {len(accepts)} | n/a |")
    print(f"\n{time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
