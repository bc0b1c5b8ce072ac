"""kill -9 of a real `python -m orchestrator run` at a random moment, then `orchestrator cleanup`: shared by
tests/reliability/test_crash_points.py (a few kills) and bench/reliability.py crash (20 and more).

Each trial checks what issue 19 asks: after cleanup, 0 processes of the run and 0 ports it listened on; the
session log parses to its last complete line (at most the last one torn); `orchestrator report` renders it and
marks it incomplete.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.servers.conftest import listening, processes_with  # the server tests' own /proc and port checks

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def local_playbook(marker: str, ports: list[int]) -> str:
    """Quick steps between two long-lived listeners (as a server is): a kill lands before, during or after
    each, and both listeners are detached process groups that only cleanup can stop."""
    return f"""name: crash points
hosts: localhost
steps:
  - name: quick one
    shell: {{command: "echo one", env: {{MARK: {marker}}}}}
  - name: first listener
    shell: {{command: "python3 -m http.server {ports[0]} --bind 127.0.0.1 & sleep 0.5; echo up; sleep 30",
             env: {{MARK: {marker}}}}}
    timeout: 2
    ignore_errors: true
  - name: note
    set: {{seen: 1}}
  - name: second listener
    shell: {{command: "python3 -m http.server {ports[1]} --bind 127.0.0.1", env: {{MARK: {marker}}}}}
"""


@dataclass
class Trial:
    killed_after: float
    events: int = 0
    orphans_before_cleanup: int = 0  # processes of the run alive after the kill: what cleanup had to stop
    ports_before_cleanup: int = 0
    torn_lines: int = 0
    left_processes: list[int] = field(default_factory=list)
    left_ports: list[int] = field(default_factory=list)
    cleanup_rc: int = 0
    report_marked_incomplete: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def held(self) -> bool:
        return not (self.left_processes or self.left_ports or self.cleanup_rc or self.problems) \
            and self.report_marked_incomplete


def env_for() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "COLUMNS": "200"}


def inventory_file(directory: Path, state_dir: Path) -> Path:
    path = directory / "inventory.yaml"
    path.write_text(json.dumps({"hosts": {"localhost": {"transport": "local", "python": sys.executable,
                                                        "state_dir": str(state_dir)}},
                                "default_hosts": "localhost"}), encoding="utf-8")
    return path


@dataclass(frozen=True)
class LabRun:
    """A playbook of playbooks/ run on the lab host (a built lab at ``root``, one scenario); with ``vllm_host``
    (orchestrator.lab.vllm_host.host.VllmHost) the host ``lab`` is a REAL vLLM serving the lab's models
    (orchestrator/lab/vllm_host/inventory.py), not the lab's stand-in."""

    playbook: str  # eagle3.yaml (the flagship) or sweep.yaml
    scenario: str
    root: Path
    vllm_host: Any = None


def session_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])
    except (OSError, ValueError, IndexError):
        return None


def in_sessions(sids: set[int]) -> list[int]:
    """Live processes of these sessions. vLLM's EngineCore and Worker rename themselves (setproctitle
    ``VLLM::EngineCore``), which overwrites their /proc environ: the marker cannot find them, their session can
    (the server's ``setsid`` wrapper made it; multiprocessing children keep it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid() and session_of(int(entry.name)) in sids:
            try:
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def run_processes(marker: str, sids: set[int]) -> list[int]:
    """The run's processes: those carrying the marker, and every process of their sessions (recorded in ``sids``,
    so children are still found once the marked leader is gone). The orchestrator's own session is never one of
    them: ``sids`` holds only sessions other than this process's."""
    marked = processes_with(marker)
    own = session_of(os.getpid())
    sids |= {sid for sid in map(session_of, marked) if sid is not None and sid != own}
    return sorted(set(marked) | set(in_sessions(sids)))


def lab_inventory_file(directory: Path, state_dir: Path, marker: str, scenario: str, lab_root: Path,
                       vllm_host: Any = None) -> Path:
    """The lab's inventory (host ``lab``) with its own state dir, and the marker in the host's environment, so
    every process the run starts there (probes, the lab servers) carries it."""
    from orchestrator.lab.building.inventory import lab_inventory

    if vllm_host is not None:
        from orchestrator.lab.vllm_host.inventory import real_vllm_inventory

        inv = real_vllm_inventory(scenario, root=lab_root, host=vllm_host, run_dir=directory / "run")
    else:
        inv = lab_inventory(scenario, root=lab_root)
    doc = inv.model_dump(mode="json", exclude_none=True)
    doc.pop("source", None)
    for host in doc["hosts"].values():
        host["state_dir"] = str(state_dir)
        host["env"] = {**host.get("env", {}), "ORCH_CRASH_MARK": marker}
    path = directory / "inventory.yaml"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def served_ports(sessions: Path) -> list[int]:
    """The ports the run's servers were started on, from its (possibly torn) log."""
    ports: set[int] = set()
    for log in sessions.glob("*/events.jsonl"):
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if str(event.get("type", "")).startswith("server_") and isinstance(event.get("port"), int):
                ports.add(event["port"])
    return sorted(ports)


def kill_and_clean(directory: Path, *, rng: random.Random, earliest: float = 0.3, latest: float = 4.0,
                   playbook_text: str | None = None, marker: str | None = None,
                   ports: list[int] | None = None, after_listener: int | None = None,
                   lab: LabRun | None = None) -> Trial:
    """One trial in ``directory``: run, SIGKILL after a random delay, cleanup, check. Leaves nothing running
    even when a check fails (whatever carries the marker is killed at the end). With ``after_listener`` (0 or
    1), the random delay counts from the moment that listener answers, not from the start: on a loaded machine
    the start alone can take seconds. With ``lab`` the run is a real playbook (the flagship, the sweep) on the lab
    host, and the ports checked are those its servers were started on."""
    marker = marker or f"orch-crash-{uuid.uuid4().hex[:10]}"
    state_dir = directory / "state"
    state_dir.mkdir(parents=True, exist_ok=True)
    if lab is not None:
        ports = ports or []
        inventory = lab_inventory_file(directory, state_dir, marker, lab.scenario, lab.root, lab.vllm_host)
        playbook, host = REPO / "playbooks" / lab.playbook, "lab"
    else:
        ports = ports or [free_port(), free_port()]
        inventory = inventory_file(directory, state_dir)
        playbook, host = directory / "pb.yaml", "localhost"
        playbook.write_text(playbook_text or local_playbook(marker, ports), encoding="utf-8")
    sessions = directory / "sessions"
    delay = rng.uniform(earliest, latest)
    env = env_for()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(playbook), "-i", str(inventory),
                             "--sessions-dir", str(sessions)], cwd=directory, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    trial = Trial(killed_after=round(delay, 2))
    sids: set[int] = set()  # the sessions of the run's detached servers, once seen
    try:
        if after_listener is not None:
            deadline = time.monotonic() + (600 if lab is not None else 60)

            watched = ports[after_listener] if lab is None else None

            def up() -> bool:
                if watched is None:  # a lab run's listeners are its servers: wait for the first to answer
                    return any(listening(p) for p in served_ports(sessions))
                return listening(watched)

            while not up() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
        time.sleep(delay)
        if proc.poll() is not None:
            trial.problems.append(f"the run ended by itself (rc {proc.returncode}) before the kill")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        trial.orphans_before_cleanup = len(run_processes(marker, sids))
        if lab is not None:
            ports = sorted(set(ports) | set(served_ports(sessions)))
        trial.ports_before_cleanup = sum(listening(p) for p in ports)
        cleanup = subprocess.run([sys.executable, "-m", "orchestrator", "cleanup", host, "-i", str(inventory),
                                  "--json"], cwd=directory, env=env, capture_output=True, text=True, timeout=240)
        trial.cleanup_rc = cleanup.returncode
        if cleanup.returncode:
            trial.problems.append(f"cleanup exit {cleanup.returncode}: {cleanup.stderr[-500:]}")
        # a SIGTERMed group may take a moment to be reaped (a real vLLM's three processes: about 3 s)
        deadline = time.monotonic() + (30 if lab is not None and lab.vllm_host is not None else 3)
        while (run_processes(marker, sids) or any(listening(p) for p in ports)) and time.monotonic() < deadline:
            time.sleep(0.05)
        trial.left_processes = run_processes(marker, sids)
        trial.left_ports = [p for p in ports if listening(p)]
        _check_log(sessions, directory, env, trial)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in run_processes(marker, sids):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return trial


def _check_log(sessions: Path, directory: Path, env: dict[str, str], trial: Trial) -> None:
    logs = list(sessions.glob("*/events.jsonl"))
    if not logs:  # killed before the session directory existed: nothing to read, nothing to report
        trial.report_marked_incomplete = True
        return
    lines = logs[0].read_text(encoding="utf-8", errors="replace").splitlines()
    for number, line in enumerate(lines, start=1):
        try:
            json.loads(line)
            trial.events += 1
        except ValueError:
            trial.torn_lines += 1
            if number != len(lines):
                trial.problems.append(f"line {number} of {len(lines)} is torn: only the last may be")
    report = subprocess.run([sys.executable, "-m", "orchestrator", "report", str(logs[0].parent), "--stdout"],
                            cwd=directory, env=env, capture_output=True, text=True, timeout=60)
    if report.returncode or "Traceback" in report.stderr:
        trial.problems.append(f"report failed ({report.returncode}): {report.stderr[-500:]}")
    trial.report_marked_incomplete = "did not finish" in report.stdout
