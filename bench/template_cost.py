"""Does a chat template (or a thinking suffix) the lab's draft never trained on cost it acceptance? (issue 40)

The lab's target and drafts were trained on the same raw Python; this serves the bundled prompts through the lab's
model runner (speculative, the healthy draft, 5 steps, greedy) raw and wrapped in a few templates, and prints the
mean accept length per request with its 95% interval. Measured 2026-12-04: no template is told apart from raw
text, so the lab cannot stand in for "a template the draft never saw" (that needs a target trained on more than its
draft).

    .venv/bin/python bench/template_cost.py [--lab-root DIR] [--tokens 64] [--steps 5]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TEMPLATES = {
    "raw text": "{% for m in messages %}{{ m['content'] }}{% endfor %}",
    "thinking suffix": "{% for m in messages %}{{ m['content'] }}{% endfor %}<think>\n\n</think>\n\n",
    "chatml": ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
               "<|im_start|>assistant\n"),
    "role: content": "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:",
}


def main(argv: list[str] | None = None) -> int:
    from orchestrator.actions.bench import load_prompts
    from orchestrator.lab.building.builder import build_lab
    from orchestrator.lab.stand_in.model_runner import LabModelRunner
    from orchestrator.lab.stand_in.sglang_args import build_parser, resolve
    from remote_probes.evaluation.interval_stats import mean_interval
    from tests.labdir import test_lab_root

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lab-root", type=Path, default=None)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--steps", type=int, default=5)
    ns = p.parse_args(argv)
    lab = build_lab("seed-wiring", root=ns.lab_root or test_lab_root())
    args = build_parser().parse_args([
        "--model-path", str(lab.target), "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", str(lab.drafts["healthy"]), "--speculative-num-steps", str(ns.steps),
        "--speculative-eagle-topk", "1"])
    runner = LabModelRunner(resolve(args, target_architecture="LlamaForCausalLM"), log=logging.getLogger("t").debug)
    tokenizer = runner.tokenizer
    print("| template | accept length [95%], 12 requests |\n|---|---|")
    started = time.monotonic()
    for name, template in TEMPLATES.items():
        accepts = []
        for prompt in load_prompts(None)[:12]:
            text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], chat_template=template,
                                                 tokenize=False, add_generation_prompt=True)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            gen = runner.generate(ids, max_new_tokens=ns.tokens, stop=[], stop_token_ids=[], ignore_eos=False)
            accepts.append(gen.spec.accepted_tokens / max(gen.spec.verify_ct, 1))
        iv = mean_interval(accepts, low=1.0)
        print(f"| {name} | {iv.estimate:.2f} {iv.as_list(2)} |" if iv else f"| {name} | n/a |")
    print(f"\n{time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
