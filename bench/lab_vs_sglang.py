"""The lab's SGLang stand-in held to a real SGLang 0.5.15.post1 on this CPU (issue 43), for everything but
speculation (the host cannot run EAGLE-3: research/sglang-cpu.md): greedy output ids on the flagship's bench prompts,
the refusal of a handful of flag sets, and /server_info on the keys the product reads (tests/sglang_differential.py).

    .venv/bin/python bench/lab_vs_sglang.py                     # 12 prompts x 64 tokens (the flagship's bench)
    .venv/bin/python bench/lab_vs_sglang.py --n 4 --max-tokens 16 --json out.json

Needs the SGLang host (``orchestrator lab sglang-host``; ``$ORCH_TEST_SGLANG_HOST`` names another) and the test
lab's target (built on first use). One server at a time; each is stopped, its whole process group, before the next.
Run from the repository root. Paste the tables into BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests import sglang_differential as sd  # noqa: E402
from tests import vllm_differential as vd  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    from orchestrator.lab.building.builder import build_lab
    from orchestrator.lab.sglang_host.host import ensure_sglang_host, host_dir, is_built
    from orchestrator.servers.prompts import load_prompts
    from tests.labdir import test_lab_root

    vd.stop_servers_on_sigterm()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=12, help="requests (the bundled prompts, cycled; the flagship's bench_n)")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--ready-timeout", type=float, default=600)
    p.add_argument("--work", type=Path, default=None, help="logs (default: a temp dir)")
    p.add_argument("--json", type=Path, default=None, help="write every figure here")
    ns = p.parse_args(argv)
    where = os.environ.get("ORCH_TEST_SGLANG_HOST") or None
    if not is_built(where):
        print(f"no SGLang host at {host_dir(where)} (run `orchestrator lab sglang-host`)", file=sys.stderr)
        return 2
    host = ensure_sglang_host(where)
    target = build_lab("seed-wiring", root=test_lab_root()).target
    work = ns.work or Path(tempfile.mkdtemp(prefix="lab-vs-sglang-"))
    prompts = load_prompts(None)
    prompts = [prompts[i % len(prompts)] for i in range(ns.n)]
    root = sd.real_root(host)
    started = time.monotonic()
    argvs = sd.case_argvs(target, 30000)
    real_says, lab_says = sd.real_refusals(host, argvs, work), sd.lab_refusals(root, host.version, argvs)
    lab = sd.serve(sd.lab_server(target, work / "lab", sd.tree_site(root, work)), prompts, ns.max_tokens,
                   ns.ready_timeout)
    real = sd.serve(sd.real_server(host, target, work / "real"), prompts, ns.max_tokens, ns.ready_timeout)
    outputs = sd.compare_outputs(lab, real)
    info = sd.compare_info(lab.info, real.info)
    took = time.monotonic() - started

    print(f"\n### Greedy /generate, {ns.n} bundled prompts x {ns.max_tokens} new tokens, float32\n")
    print("| request | prompt tokens | lab = real | first differing position | finish (lab / real) |")
    print("|---|---|---|---|---|")
    for r, o in zip(outputs["rows"], real.outputs, strict=True):
        print(f"| {r['request']} | {o['prompt_tokens']} | {'yes' if r['same'] else 'NO'} | "
              f"{'-' if r['first_diff'] is None else r['first_diff']} | {r['lab_finish']['type']} / "
              f"{r['real_finish']['type']} |")
    print(f"\n{outputs['identical']}/{outputs['requests']} requests identical; {outputs['tokens_same_prefix']}/"
          f"{outputs['tokens_compared']} output tokens in agreeing prefixes")
    print("\n### Refusals (real: SGLang's prepare_server_args; lab: its parser from the same tree + its rules)\n")
    print("| flag set | real SGLang | lab | same |")
    print("|---|---|---|---|")
    for name in argvs:
        print(f"| {name} | {real_says[name] or 'accepted'} | {lab_says[name] or 'accepted'} | "
              f"{'yes' if real_says[name] == lab_says[name] else 'NO'} |")
    print("\n### /server_info, the keys the product reads (host CPU flags)\n")
    print("| key | real SGLang | lab | same |")
    print("|---|---|---|---|")
    for r in info:
        mark = "yes" if r["same"] else ("no (hardware/run-time: BENCHMARKS.md)" if r["hardware"] else "NO")
        print(f"| {r['key']} | {short(r['real'])} | {short(r['lab'])} | {mark} |")
    print(f"\nready+serve: lab {lab.seconds}s, real {real.seconds}s; total {took:.0f}s; load average "
          f"{Path('/proc/loadavg').read_text().split()[:3]}; logs under {work}")
    if ns.json:
        ns.json.write_text(json.dumps({"outputs": outputs, "refusals": {"real": real_says, "lab": lab_says},
                                       "server_info": info, "seconds": {"lab": lab.seconds, "real": real.seconds}},
                                      indent=2, default=str) + "\n")
    return 0


def short(value: object) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 60 else "..." + text[-57:]


if __name__ == "__main__":
    sys.exit(main())
