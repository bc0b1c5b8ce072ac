"""Benchmark: how fast a bad flag is refused, on the path the user runs (issue 13's target: under 5 s).

For each SGLang version the lab can stand in for, ``orchestrator run`` (the CLI, with its session log and console)
runs a one-step playbook that starts a server with a flag that version refuses, and the step's duration is read
from the session log; the pre-flight probe alone is timed too. Needs a built lab (``orchestrator lab build``, or
the tests' cache: ``ORCHESTRATOR_LAB_DIR=~/.cache/orchestrator/lab-test``).

Run: ``python bench/preflight.py [--repeat 3]``. Prints, per version and case, the median seconds and the message.
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
# version -> (flag that version refuses, why)
CASES = {
    "0.5.12.post1": ({"speculative-num-stepz": 3}, "unknown flag"),
    "0.5.23": ({"cuda-graph-max-bs": 8}, "ambiguous since the -decode/-prefill split"),
}
PLAYBOOK = """name: preflight-bench
steps:
  - name: Start with a flag this SGLang refuses
    server: {{action: start, name: bad, flags: {flags}}}
    ignore_errors: true
"""


def run_cli(version: str, flags: dict[str, object], workdir: Path) -> tuple[float, float, str]:
    """(wall seconds of the CLI, the step's own duration, the refusal's first line)."""
    book = workdir / f"bench-{version}.yaml"
    book.write_text(PLAYBOOK.format(flags=json.dumps(flags)))
    sessions = workdir / "sessions"
    env = dict(os.environ, ORCHESTRATOR_LAB_SGLANG=version, ORCHESTRATOR_SESSIONS_DIR=str(sessions))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(book), "--sessions-dir", str(sessions)],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - start
    newest = max(sessions.iterdir(), key=lambda p: p.stat().st_mtime)
    step = next(json.loads(line) for line in (newest / "events.jsonl").read_text().splitlines()
                if '"step_finished"' in line)
    if step["status"] != "failed":
        raise SystemExit(f"sglang {version}: the bad flag was not refused ({step['status']}): {proc.stdout[-800:]}")
    lines = (step.get("error") or "").splitlines()
    # the version's own message: the lines under "the server's own error:"
    own = [line.strip() for i, line in enumerate(lines) if i and "the server's own error" in lines[i - 1]]
    return wall, float(step["duration"]), (own or lines or [""])[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for version, (flags, why) in CASES.items():
            walls, steps, message = [], [], ""
            for _ in range(opts.repeat):
                wall, step, message = run_cli(version, flags, Path(tmp))
                walls.append(wall)
                steps.append(step)
            print(f"sglang {version}: {sorted(flags)[0]} ({why}): step refused in median "
                  f"{statistics.median(steps):.2f} s (CLI wall {statistics.median(walls):.2f} s, n={opts.repeat})")
            print(f"    {message}")


if __name__ == "__main__":
    main()
