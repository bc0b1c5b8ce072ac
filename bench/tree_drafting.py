"""Chains against trees on one host, through the CLI (issue 39): a sweep of SGLang's EAGLE-3 configurations, chain
(``--speculative-eagle-topk 1``) and tree (topk > 1 with a draft-token budget), one server restart per point plus the
no-speculation baseline, the flagship's bench (bundled prompts, greedy). Prints accept length and tok/s per point
with their 95% intervals over requests, and the tree's candidate count (topk + (steps - 1) x topk^2).

On the lab the trees are drafted as SGLang drafts them (remote_probes/eagle3/tree.py), verified in one target forward
under the tree mask; on CPU the verify forward's cost grows with the budget, which a GPU hides up to its batch width.

Usage:
  python bench/tree_drafting.py                               # the lab, the healthy draft (ORCHESTRATOR_LAB_SCENARIO)
  python bench/tree_drafting.py --scenario seed-wiring --n 12 --tokens 64 --concurrency 1
  python bench/tree_drafting.py -i inventory.yaml --host gpu1  # any SGLang host of an inventory
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

#: (steps, topk, draft tokens): SGLang's chains at three lengths, then trees of growing width and budget
CONFIGS = [(3, 1, 4), (5, 1, 6), (7, 1, 8), (3, 2, 6), (3, 4, 8), (5, 4, 8), (5, 4, 16), (7, 4, 16), (5, 8, 32)]


def playbook(configs: list[tuple[int, int, int]], n: int, tokens: int, concurrency: int) -> str:
    rows = "\n".join(f"        - {{speculative-num-steps: {s}, speculative-eagle-topk: {k}, "
                     f"speculative-num-draft-tokens: {d}}}" for s, k, d in configs)
    return f"""name: tree-drafting
description: Chains against trees, one restart per point.
steps:
  - name: Chains and trees
    sweep:
      flags:
        speculative-algorithm: EAGLE3
        speculative-draft-model-path: "{{{{ draft }}}}"
      configs:
{rows}
      baseline: true
      bench: {{n: {n}, max_new_tokens: {tokens}, concurrency: {concurrency}}}
    register: sw
always:
  - server: {{action: stop_all}}
"""


def _figure(value: float | None, ci: list[float] | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" + (f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]" if ci else "")


def main(argv: list[str] | None = None) -> int:
    from remote_probes.eagle3.tree import candidate_count

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-i", "--inventory", default=None)
    p.add_argument("--host", default=None)
    p.add_argument("--scenario", default="healthy", help="the lab scenario whose draft is served (the lab only)")
    p.add_argument("--n", type=int, default=12)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=1)
    ns = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="tree-drafting-"))
    book = work / "tree.yaml"
    book.write_text(playbook(CONFIGS, ns.n, ns.tokens, ns.concurrency))
    exe = Path(sys.executable).parent / "orchestrator"
    cmd = [str(exe), "run", str(book), "--sessions-dir", str(work / "sessions")]
    if ns.inventory:
        cmd += ["-i", ns.inventory] + (["--host", ns.host] if ns.host else [])
    env = dict(os.environ)
    env.setdefault("ORCHESTRATOR_LAB_SCENARIO", ns.scenario)
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=str(REPO), env=env)
    seconds = time.monotonic() - started
    sessions = sorted((work / "sessions").glob("*"))
    if not sessions:
        raise SystemExit(f"the sweep left no session: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    result = None
    for line in (sessions[-1] / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("type") == "step_finished" and event.get("action") == "sweep":
            result = ((event.get("results") or [{}])[0].get("result")) or {}
    if result is None:
        raise SystemExit(f"no sweep result in {sessions[-1]}: {proc.stdout[-1500:]}")
    print(f"tree drafting, {ns.n} requests x {ns.tokens} tokens, concurrency {ns.concurrency}, "
          f"scenario {env['ORCHESTRATOR_LAB_SCENARIO']}; {seconds:.0f} s in all (session {sessions[-1].name})")
    print("| steps | topk | draft tokens | candidates | accept length [95%] | tok/s [95%] | status |")
    print("|---|---|---|---|---|---|---|")
    for row in result.get("rows", []):
        flags = row.get("flags") or {}
        steps, topk = flags.get("speculative-num-steps"), flags.get("speculative-eagle-topk")
        budget = flags.get("speculative-num-draft-tokens")
        cands = candidate_count(int(steps), int(topk)) if steps and topk else "-"
        accept, tok_s = _figure(row.get("accept_length"), row.get("accept_length_ci")), _figure(
            row.get("tok_s"), row.get("tok_s_ci"), 0)
        status = row["status"] + (f": {row.get('reason')}" if row.get("reason") else "")
        print(f"| {steps or '-'} | {topk or '-'} | {budget or '-'} | {cands} | {accept} | {tok_s} | {status} |")
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
