"""SIGKILL of a real vLLM's EngineCore or Worker in the middle of a benchmark (issue 25), shared by
tests/lab/test_real_vllm_engine_kill.py (one kill) and bench/reliability.py engine-kill (repeated, RELIABILITY.md).

A playbook on the real vLLM host (local transport, the lab's target and seed-wiring draft) starts the server,
benchmarks it, goes on with a step after the benchmark and stops the server. While the benchmark runs (its server
log shows two answered requests: a state, not a time), the chosen process of the server is killed. What must hold:
the bench step fails with vLLM's own error read from its log, the next step runs, the session ends, and nothing
of the server's three processes (API server, EngineCore, Worker) is left.

vLLM's EngineCore and Worker rename themselves (``VLLM::EngineCore``, ``VLLM::Worker`` via setproctitle), which
overwrites their /proc environ: they are found through the server's session (tests/reliability/crash.py
``in_sessions``), not by an environment marker.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.inventory import Inventory
from tests.reliability.crash import in_sessions, session_of
from tests.servers.conftest import processes_with, run_playbook
from tests.waiting import wait_until

PLAYBOOK = """
name: kill the engine mid-benchmark
steps:
  - name: Start the speculative server
    server: {name: v, flags: "{{ candidate_flags }}", ready_timeout: 900}
    register: srv
  - name: Benchmark
    bench: {server: v, n: %(n)d, max_new_tokens: %(tokens)d}
    register: b
    ignore_errors: true
  - name: The investigation goes on
    shell: "echo goes on"
  - name: Stop
    server: {action: stop, name: v}
    ignore_errors: true
"""


@dataclass
class EngineKill:
    target: str                                  # EngineCore | Worker
    killed: dict[str, Any] = field(default_factory=dict)  # pid, name, seconds into the run
    processes: dict[int, str] = field(default_factory=dict)  # the server's processes when the kill came
    status: str = ""                             # the session's
    steps: list[tuple[str, str, str]] = field(default_factory=list)  # (name, status, error)
    left: list[int] = field(default_factory=list)  # the server's processes alive after the session ended
    seconds: float = 0.0

    def step(self, name: str) -> tuple[str, str, str]:
        return next(s for s in self.steps if s[0] == name)

    @property
    def bench_error(self) -> str:
        return self.step("Benchmark")[2]

    @property
    def held(self) -> bool:
        """The step failed with vLLM's own words, the next step ran, nothing is left."""
        bench, after = self.step("Benchmark"), self.step("The investigation goes on")
        return bool(self.killed) and bench[1] == "failed" and "the server's own error" in bench[2] \
            and after[1] == "ok" and not self.left


def _name(pid: int) -> str:
    try:
        return (Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")).strip()
    except OSError:
        return ""


def real_inventory(directory: Path, host: Any, lab_root: Path, marker: str) -> Inventory:
    from orchestrator.lab.vllm_host.inventory import real_vllm_inventory

    inv = real_vllm_inventory("seed-wiring", root=lab_root, host=host, run_dir=directory / "run")
    doc = inv.model_dump(mode="json", exclude_none=True)
    doc.pop("source", None)
    lab = doc["hosts"]["lab"]
    lab["state_dir"] = str(directory / "state")
    lab["env"] = {**lab.get("env", {}), "ORCH_KILL_MARK": marker}
    return Inventory.model_validate(doc)


def kill_engine_mid_bench(directory: Path, host: Any, lab_root: Path, target: str = "EngineCore", *,
                          n: int = 20, tokens: int = 32) -> EngineKill:
    if target not in ("EngineCore", "Worker"):
        raise ValueError(target)
    marker = f"orch-kill-{uuid.uuid4().hex[:10]}"
    result = EngineKill(target)
    sids: set[int] = set()
    own = session_of(os.getpid())
    done = threading.Event()
    started = time.monotonic()

    def killer() -> None:
        while not done.wait(0.3):
            marked = processes_with(marker)
            sids.update(s for s in map(session_of, marked) if s is not None and s != own)
            logs = list((directory / "state").rglob("server-v.log"))
            text = "".join(p.read_text(errors="replace") for p in logs)
            if text.count('"POST /v1/completions HTTP/1.1" 200') < 2:
                continue
            members = {pid: _name(pid) for pid in in_sessions(sids)}
            chosen = [pid for pid, name in members.items() if name.startswith(f"VLLM::{target}")]
            if chosen:
                result.processes = members
                os.kill(chosen[0], signal.SIGKILL)
                result.killed = {"pid": chosen[0], "name": members[chosen[0]],
                                 "after_s": round(time.monotonic() - started, 1)}
                return

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        inventory = real_inventory(directory, host, lab_root, marker)
        ran = run_playbook(PLAYBOOK % {"n": n, "tokens": tokens}, inventory, directory / "sessions")
    finally:
        done.set()
        thread.join(timeout=10)
    result.seconds = round(time.monotonic() - started, 1)
    result.status = ran.status
    result.steps = [(e.get("name") or e["step_id"], e["status"], e.get("error") or "")
                    for e in ran.of_type("step_finished")]
    wait_until(lambda: not in_sessions(sids), timeout=30)  # the group was stopped: the kernel reaps it
    result.left = in_sessions(sids)
    for pid in result.left:  # never leave a test's server behind, even when the check failed
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return result
