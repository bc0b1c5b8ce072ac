"""How reproducible is lab training across CPUs? Train the same (shortened) target recipe in the pinned child
process under several numeric settings and compare the weights bit for bit.

- ``pinned`` twice: the lab's own settings (orchestrator.lab.train_job.pinned_env) — run-to-run identity;
- ``isa=default``: ATen's portable kernels, MKL's COMPATIBLE path, oneDNN capped at SSE4.1 — what another CPU
  family's kernels do to the same recipe (the effect the pins remove);
- ``unpinned``: the machine's own choice of kernels (what training did before the pins).

This machine cannot be another CPU, so the cross-CPU claim rests on the libraries honouring the pins; what is
measured here is that the pins are in force (settings change the bits, the same settings never do).

Usage: python bench/lab_repro.py [--steps 60] [--corpus-bytes 1000000]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.lab.train import TargetRecipe  # noqa: E402
from orchestrator.lab.train_job import pinned_env, run_job  # noqa: E402

UNPIN = {"ATEN_CPU_CAPABILITY": "", "MKL_CBWR": "", "ONEDNN_MAX_CPU_ISA": ""}
SETTINGS = {
    "pinned": {},
    "pinned (again)": {},
    "isa=default": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "SSE41"},
    "unpinned": UNPIN,
}


def weights(path: Path):
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--corpus-bytes", type=int, default=1_000_000)
    args = ap.parse_args()
    recipe = asdict(TargetRecipe(steps=args.steps, corpus_bytes=args.corpus_bytes))
    print(f"pinned settings here: {pinned_env(recipe['threads'])}")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, override in SETTINGS.items():
            t0 = time.monotonic()
            env = {k: v for k, v in override.items() if v} if override is not UNPIN else None
            out = Path(tmp) / name.replace(" ", "_").replace("(", "").replace(")", "").replace("=", "-")
            if override is UNPIN:
                import os

                saved = {k: os.environ.pop(k, None) for k in UNPIN}
                try:  # run_job always applies the pins; for "unpinned" start the child from the machine's defaults
                    out = _unpinned(recipe, out)
                finally:
                    os.environ.update({k: v for k, v in saved.items() if v is not None})
            else:
                run_job({"kind": "target", "seed": 0, "recipe": recipe, "out": str(out)}, env_override=env)
            w = weights(out)
            digest = hashlib.sha256(b"".join(w[k].numpy().tobytes() for k in sorted(w))).hexdigest()[:16]
            results[name] = (w, digest, time.monotonic() - t0)
            print(f"{name:<16} sha256 {digest}  ({time.monotonic() - t0:.1f} s)", flush=True)
    ref = results["pinned"][0]
    print("\n| setting | weights sha256 | identical to pinned | max abs diff vs pinned |")
    print("|---|---|---|---|")
    for name, (w, digest, _) in results.items():
        diff = max(float((w[k] - ref[k]).abs().max()) for k in ref)
        print(f"| {name} | `{digest}` | {'yes' if digest == results['pinned'][1] else 'no'} | {diff:.3g} |")
    return 0


def _unpinned(recipe: dict, out: Path) -> Path:
    """The same job in a child that gets no kernel pins (threads still fixed by the recipe)."""
    import json
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in UNPIN}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    code = ("import json, sys, torch; from pathlib import Path; from orchestrator.lab.train import TargetRecipe, "
            "train_target; torch.use_deterministic_algorithms(True); j = json.loads(sys.stdin.read()); "
            "train_target(Path(j['out']), seed=0, recipe=TargetRecipe(**j['recipe']))")
    subprocess.run([sys.executable, "-c", code], input=json.dumps({"out": str(out), "recipe": recipe}), text=True,
                   env=env, check=True)
    return out


if __name__ == "__main__":
    sys.exit(main())
