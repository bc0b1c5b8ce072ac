"""Benchmark: the draft_test probe on the lab's tiny pair (target + draft trained on [0, N/2, N-1]).

Prints the build times (from the cached models' lab_recipe.json; cold if this run built them), then tau and
run time per wiring. Usage: python bench/draft_test_bench.py [--steps 5] [--prompts 16] [--new-tokens 96]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=96)
    opts = parser.parse_args()
    from orchestrator.lab.training.model_cache import cached_draft, cached_target

    t0 = time.monotonic()
    target = cached_target(progress=lambda m, f: print("  [target] " + m, flush=True))
    n = json.loads((target / "config.json").read_text())["num_hidden_layers"]
    wiring = [0, n // 2, n - 1]
    draft = cached_draft(target, wiring=wiring, progress=lambda m, f: print("  [draft] " + m, flush=True))
    print(f"models ready in {time.monotonic() - t0:.1f} s (0 = cached)")
    for name, path in (("target", target), ("draft", draft)):
        facts = json.loads((path / "lab_recipe.json").read_text())
        print(f"  {name} build: {facts['seconds']} s, loss {facts['loss_first']:.2f} -> {facts['loss_last']:.2f}")
    args = {"target": str(target), "draft": str(draft), "wirings": "auto", "engine": "sglang",
            "prompts_file": str(target / "prompts.json"), "num_prompts": opts.prompts,
            "max_new_tokens": opts.new_tokens, "steps": opts.steps}
    args_file = Path(os.environ.get("TMPDIR", "/tmp")) / "draft_test_bench_args.json"
    args_file.write_text(json.dumps(args))
    t1 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "remote_probes.evaluation.draft_test", str(args_file)], cwd=str(REPO),
                          capture_output=True, text=True, env=dict(os.environ, ORCH_PROBE_NONCE="bench"))
    wall = time.monotonic() - t1
    doc = json.loads(proc.stdout.split("@@ORCH-RESULT-BEGIN bench@@", 1)[1].split("@@ORCH-RESULT-END bench@@")[0])
    if not doc["ok"]:
        sys.exit(f"draft_test failed: {doc['error']}")
    res = doc["result"]
    print(f"\ndraft_test: {res['prompts']} prompts, {res['tokens']} generated tokens, K={res['steps']}, "
          f"wall {wall:.1f} s (capture {res['seconds']['capture']} s)")
    print(f"{'wiring':<16}{'name':<26}{'tau_serving':>12}{'tau':>8}{'acc_0..acc_K-1':>40}{'seconds':>9}")
    for w in res["wirings"]:
        acc = " ".join(f"{a:.2f}" for a in w["acc"])
        print(f"{str(w['wiring']):<16}{w['name']:<26}{w['tau_serving']:>12.2f}{w['tau']:>8.2f}{acc:>40}"
              f"{w['seconds']:>9.2f}")
    print("\nserver wiring:", res["server_wiring"], "| best:", res["best"]["wiring"])
    print("verdict:", res["verdict"])


if __name__ == "__main__":
    main()
