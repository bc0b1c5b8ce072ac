"""How reproducible is lab training across CPUs? Train the same (shortened) target recipe in the pinned child
process under several numeric settings and compare the weights bit for bit.

- ``pinned`` twice: the lab's own settings (orchestrator.lab.training.train_job.pinned_env) — run-to-run identity;
- ``isa=default``: ATen's portable kernels, MKL's COMPATIBLE path, oneDNN capped at SSE4.1 — what another CPU
  family's kernels do to the same recipe (the effect the pins remove);
- ``no deterministic flag`` / ``MKL/oneDNN native``: one pin lifted at a time.

This machine cannot be another CPU, so the cross-CPU claim rests on the libraries honouring the pins; what is
measured here is that the pins are in force (settings change the bits, the same settings never do).

Usage: python bench/lab_repro.py [--steps 80] [--corpus-bytes 1000000]
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

from orchestrator.lab.training.train import TargetRecipe  # noqa: E402
from orchestrator.lab.training.train_job import pinned_env, run_job  # noqa: E402

SETTINGS = {
    "pinned": {},
    "pinned (again)": {},
    "no deterministic flag": {"ORCHESTRATOR_LAB_NONDETERMINISTIC": "1"},
    "MKL/oneDNN native": {"MKL_CBWR": "AUTO", "ONEDNN_MAX_CPU_ISA": "ALL"},
    "isa=default": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "SSE41"},
}


def digest(path: Path) -> str:
    from safetensors.torch import load_file

    w = load_file(str(path / "model.safetensors"))
    return hashlib.sha256(b"".join(w[k].numpy().tobytes() for k in sorted(w))).hexdigest()[:16]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--corpus-bytes", type=int, default=1_000_000)
    args = ap.parse_args()
    recipe = asdict(TargetRecipe(steps=args.steps, corpus_bytes=args.corpus_bytes))
    print(f"pinned settings here: {pinned_env(recipe['threads'])}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, override) in enumerate(SETTINGS.items()):
            t0 = time.monotonic()
            out = run_job({"kind": "target", "seed": 0, "recipe": recipe, "out": str(Path(tmp) / f"run{i}")},
                          env_override=override)
            rows.append((name, digest(out), time.monotonic() - t0))
            print(f"{name:<22} sha256 {rows[-1][1]}  ({rows[-1][2]:.1f} s)", flush=True)
    ref = rows[0][1]
    print("\n| setting | weights sha256 | identical to pinned | seconds |")
    print("|---|---|---|---:|")
    for name, dig, seconds in rows:
        print(f"| {name} | `{dig}` | {'yes' if dig == ref else 'no'} | {seconds:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
