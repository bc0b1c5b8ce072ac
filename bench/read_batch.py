"""Benchmark: one sglang_source run with 1 read vs 50 ranges in the same run (target: <= 1.5x).

Uses the cached sglang 0.5.12.post1 tree (tests/probes installs it; this script installs it too when missing).
Run: ``python bench/read_batch.py [--repeat 9] [--python python3]``. Prints medians and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSION = "0.5.12.post1"
FILE = "srt/speculative/eagle_worker.py"


def tree() -> Path:
    cache = Path(os.environ.get("ORCHESTRATOR_CACHE_DIR") or Path.home() / ".cache" / "orchestrator")
    target = cache / "sglang-src" / VERSION
    if not (target / "sglang" / "__init__.py").is_file():
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--quiet", "--target",
                        str(target), f"sglang=={VERSION}"], check=True)
    return target


def run_once(python: str, args_file: Path) -> float:
    env = dict(os.environ, ORCH_PROBE_NONCE="bench", PYTHONDONTWRITEBYTECODE="1")
    start = time.perf_counter()
    proc = subprocess.run([python, "-m", "remote_probes.engine.sglang_source", str(args_file)],
                          capture_output=True, text=True, env=env, cwd=str(ROOT))
    elapsed = time.perf_counter() - start
    if proc.returncode != 0 or "@@ORCH-RESULT-END bench@@" not in proc.stdout:
        raise SystemExit(f"probe failed: {proc.stdout[-500:]} {proc.stderr[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--python", default=sys.executable, help="interpreter that runs the probe")
    opts = parser.parse_args()
    sys_path = [str(tree())]
    one = [{"file": FILE, "lines": "155,200"}]
    # 50 distinct ranges over the file (plus a symbol and a regex range, as a playbook would mix them).
    fifty = [{"file": FILE, "lines": f"{1 + 25 * i},+20"} for i in range(48)]
    fifty += [{"file": FILE, "symbol": "EAGLEWorker.__init__"}, {"file": FILE, "lines": "/get_embed_and_head/,+23"}]
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for name, reads in (("1 read", one), ("50 reads", fifty)):
            files[name] = Path(tmp) / f"{len(reads)}.json"
            files[name].write_text(json.dumps({"package": "sglang", "sys_path": sys_path, "reads": reads}))
        run_once(opts.python, files["1 read"])  # warm the page cache
        times: dict[str, list[float]] = {name: [] for name in files}
        for _ in range(opts.repeat):  # interleaved so drift hits both equally
            for name, path in files.items():
                times[name].append(run_once(opts.python, path))
    med = {name: statistics.median(ts) for name, ts in times.items()}
    for name, value in med.items():
        print(f"{name:>9}: median {value * 1000:7.1f} ms over {opts.repeat} runs "
              f"(min {min(times[name]) * 1000:.1f}, max {max(times[name]) * 1000:.1f})")
    ratio = med["50 reads"] / med["1 read"]
    print(f"    ratio: {ratio:.2f}x (target <= 1.5x) -> {'OK' if ratio <= 1.5 else 'OVER'}")


if __name__ == "__main__":
    main()
