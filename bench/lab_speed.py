"""Lab speed: does the lab reproduce the seed's figures? Prints two tables (markdown).

1. seed-wiring: plain greedy vs EAGLE-3 with the seed's draft (trained embedding-first, fed SGLang's default
   layers) -> speculative tok/s should fall BELOW the baseline, accept length near 1-2.
2. wiring fixed: the healthy draft (trained on SGLang's wiring) and the seed draft with --lab-capture-layers set to
   the trained layers -> accept length >= 1.5x the seed-wiring one and tok/s ABOVE the baseline.

Every server is a real ``python -m orchestrator.lab.stand_in.server`` on a free loopback port, stopped afterwards.
Usage: python bench/lab_speed.py [--dir LAB] [--prompts 8] [--tokens 96] [--steps 7]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.lab.building.build import seed_wiring  # noqa: E402
from orchestrator.lab.building.builder import build_lab  # noqa: E402
from orchestrator.lab.stand_in.process import start_server  # noqa: E402


def measure(target: Path, site: Path, flags: dict, prompts: list[str], tokens: int, log_dir: Path, name: str) -> dict:
    server = start_server(target, flags, log_path=log_dir / f"{name}.log", site=site)
    try:
        done = seconds = verifies = 0
        outputs = []
        wall = time.monotonic()
        for text in prompts:
            doc = server.generate({"text": text, "sampling_params": {"max_new_tokens": tokens, "temperature": 0,
                                                                     "ignore_eos": True}})
            meta = doc["meta_info"]
            done += meta["completion_tokens"]
            seconds += meta["e2e_latency"]
            verifies += meta.get("spec_verify_ct", 0)
            outputs.append(doc["output_ids"])
        wall = time.monotonic() - wall
    finally:
        server.stop()
    return {"name": name, "tok_s": done / seconds, "accept": done / verifies if verifies else 1.0,
            "tokens": done, "wall": wall, "outputs": outputs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="lab directory (default: the user lab dir)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--steps", type=int, default=7)
    opts = parser.parse_args()
    build_lab("healthy", root=opts.dir)
    lab = build_lab("seed-wiring", root=opts.dir)
    prompts = json.loads((lab.target / "prompts.json").read_text())[: opts.prompts]
    spec = {"speculative-algorithm": "EAGLE3", "speculative-eagle-topk": 1, "speculative-num-steps": opts.steps,
            "speculative-num-draft-tokens": opts.steps + 1}
    trained = ",".join(str(i) for i in seed_wiring(lab.num_layers))
    configs = [
        ("baseline (no speculation)", {}),
        ("EAGLE3 seed-wiring draft", {**spec, "speculative-draft-model-path": str(lab.drafts["seed-wiring"])}),
        ("EAGLE3 healthy draft", {**spec, "speculative-draft-model-path": str(lab.drafts["healthy"])}),
        (f"EAGLE3 seed draft + --lab-capture-layers {trained}",
         {**spec, "speculative-draft-model-path": str(lab.drafts["seed-wiring"]), "lab-capture-layers": trained}),
    ]
    with tempfile.TemporaryDirectory(prefix="lab-speed-") as tmp:
        rows = [measure(lab.target, lab.site, flags, prompts, opts.tokens, Path(tmp), f"run{i}")
                for i, (_, flags) in enumerate(configs)]
    for row, (name, _) in zip(rows, configs, strict=True):
        row["name"] = name
    base, seed = rows[0], rows[1]
    lossless = all(r["outputs"] == base["outputs"] for r in rows)
    print(f"# lab speed: {len(prompts)} prompts x {opts.tokens} tokens, K={opts.steps}, greedy, batch 1 "
          f"(outputs identical to plain greedy: {lossless})\n")
    print(f"## 1. seed-wiring (draft trained on {seed_wiring(lab.num_layers)}, SGLang feeds its default layers)\n")
    print("| config | tok/s | accept len | vs baseline |\n|---|---|---|---|")
    for r in rows[:2]:
        print(f"| {r['name']} | {r['tok_s']:.1f} | {r['accept']:.2f} | {r['tok_s'] / base['tok_s']:.2f}x |")
    print("\n## 2. wiring fixed\n")
    print("| config | tok/s | accept len | vs baseline | accept vs seed-wiring |\n|---|---|---|---|---|")
    print(f"| {base['name']} | {base['tok_s']:.1f} | 1.00 | 1.00x | |")
    for r in rows[2:]:
        print(f"| {r['name']} | {r['tok_s']:.1f} | {r['accept']:.2f} | {r['tok_s'] / base['tok_s']:.2f}x | "
              f"{r['accept'] / seed['accept']:.2f}x |")
    ok = (seed["tok_s"] < base["tok_s"] and all(r["accept"] >= 1.5 * seed["accept"] and r["tok_s"] > base["tok_s"]
                                                for r in rows[2:]) and lossless)
    print(f"\nseed-wiring slower than baseline and fixed wiring >= 1.5x accept and faster: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
