"""Sampled traffic on the lab's SGLang stand-in (issue 40), through the CLI as a user runs it: the flagship with
``-e traffic=FILE`` where FILE holds the bundled code prompts twice, greedy and at a temperature (each sampled
request seeded), the lab standing in for the SGLang tree ``--sglang`` (0.5.23 by default: its OpenAI answers carry
each request's accept length). Prints what ``traffic_sampling`` concludes on the candidate and on the fix, and the
offline replay's figure for the sampled setting beside the server's.

    .venv/bin/python bench/traffic_sampled_sglang_lab.py                    # temperature 0.8, 12 prompts
    .venv/bin/python bench/traffic_sampled_sglang_lab.py --temperature 0.5 --prompts 16

About 45 s on the 2-core CI machine once the lab is built. Paste the lines into BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def traffic_file(path: Path, prompts: int, temperature: float) -> Path:
    """The bundled prompts, each greedy and at ``temperature`` (seeded by its place), 32 tokens, category code."""
    texts = [p["text"] for p in json.loads((REPO / "orchestrator/data/bench_prompts.json").read_text())["prompts"]]
    lines = []
    for i, text in enumerate(texts[:prompts]):
        lines.append({"prompt": text, "temperature": 0, "max_tokens": 32, "category": "code"})
        lines.append({"prompt": text, "temperature": temperature, "seed": i, "max_tokens": 32, "category": "code"})
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    from orchestrator.hypotheses.board import HypothesisBoard
    from orchestrator.session.reader import read_session

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sglang", default="0.5.23", help="the SGLang tree the lab stands in for")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--prompts", type=int, default=12)
    p.add_argument("--work", type=Path, default=None)
    ns = p.parse_args(argv)
    work = ns.work or Path(tempfile.mkdtemp(prefix="traffic-sampled-"))
    work.mkdir(parents=True, exist_ok=True)
    traffic = traffic_file(work / "sampled.jsonl", ns.prompts, ns.temperature)
    started = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).parent / "orchestrator"), "run", "playbooks/eagle3.yaml",
                           "-e", f"traffic={traffic}", "--sessions-dir", str(work / "sessions")],
                          cwd=REPO, env={**os.environ, "ORCHESTRATOR_LAB_SGLANG": ns.sglang},
                          capture_output=True, text=True)
    took = time.monotonic() - started
    [directory] = sorted((work / "sessions").iterdir())
    events = read_session(directory).events
    board = HypothesisBoard.from_events(events)
    print(f"exit {done.returncode} in {took:.0f}s, lab standing in for SGLang {ns.sglang}, {ns.prompts} prompts "
          f"greedy and at temperature {ns.temperature}; session {directory}")
    for entry in board.entries["traffic_sampling"].history:
        print(f"- traffic_sampling: {entry.state}: {entry.evidence}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
