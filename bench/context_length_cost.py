"""Does the lab's draft accept less the longer its context? (issue 40: a category whose prompts are longer than the
best-served one's may trail it for the length alone; traffic_category says so.)

Serves greedy completions cut from the held-out standard-library files (never trained on) at several prompt lengths
through the lab's model runner (speculative, the healthy draft, 5 steps) and prints the mean accept length per
request with its 95% interval at each length. The lab's draft trained on 131-token sequences, its target on 64.

    .venv/bin/python bench/context_length_cost.py [--lab-root DIR] [--tokens 48] [--lengths 40 120 300 600 900]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    from orchestrator.lab.building.builder import build_lab
    from orchestrator.lab.stand_in.model_runner import LabModelRunner
    from orchestrator.lab.stand_in.sglang_args import build_parser, resolve
    from orchestrator.lab.training.corpus import build_corpus
    from remote_probes.evaluation.interval_stats import mean_interval
    from tests.labdir import test_lab_root

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lab-root", type=Path, default=None)
    p.add_argument("--tokens", type=int, default=48)
    p.add_argument("--lengths", type=int, nargs="+", default=[40, 120, 300, 600, 900])
    ns = p.parse_args(argv)
    lab = build_lab("seed-wiring", root=ns.lab_root or test_lab_root())
    args = build_parser().parse_args([
        "--model-path", str(lab.target), "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", str(lab.drafts["healthy"]), "--speculative-num-steps", "5",
        "--speculative-eagle-topk", "1"])
    runner = LabModelRunner(resolve(args, target_architecture="LlamaForCausalLM"), log=logging.getLogger("t").debug)
    sources = list(build_corpus().held_out.values())
    print("| prompt tokens | requests | accept length [95%] |\n|---|---|---|")
    started = time.monotonic()
    for length in ns.lengths:
        accepts = []
        for source in sources:
            ids = runner.tokenizer(source, add_special_tokens=False)["input_ids"]
            for start in (0, len(ids) // 3):
                if len(ids) < start + length:
                    continue
                gen = runner.generate(ids[start:start + length], max_new_tokens=ns.tokens, stop=[], stop_token_ids=[],
                                      ignore_eos=False)
                accepts.append(gen.spec.accepted_tokens / max(gen.spec.verify_ct, 1))
        iv = mean_interval(accepts, low=1.0)
        print(f"| {length} | {len(accepts)} | {iv.estimate:.2f} {iv.as_list(2)} |" if iv else f"| {length} | n/a |")
    print(f"\n{time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
