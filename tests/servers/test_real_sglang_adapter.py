"""The orchestrator's SGLang adapter (orchestrator/servers/sglang.py, driven by the `server` step and ServerManager)
against a REAL SGLang 0.5.15.post1 on this CPU (the host `orchestrator lab sglang-host` builds; research/sglang-cpu.md).

The host is an inventory host as a user's CPU box would be: transport local, ``engine: sglang``, the SGLang host's venv
python and environment (``SGLANG_USE_CPU_ENGINE=1``...), the host module's CPU flags as the step's flags. Through it:
a start is checked by SGLang's own parser (the pre-flight), becomes ready, and the adapter's requested-vs-effective
flags are /server_info's (the seed's EAGLE-3 flags refused by SGLang itself, the failed start quoting the
scheduler's own error line: tests/lab/test_flagship_real_sglang.py, through the flagship); `kill -9` of the orchestrator that launched the servers (and of one server's SGLang
launcher) leaves process trees that `orchestrator cleanup` stops, 0 processes left. Each test starts real servers
(~20-40 s to ready on 2 loaded cores, ~25 s to the EAGLE-3 crash)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from orchestrator.inventory import Inventory
from orchestrator.lab.sglang_host.host import CPU_FLAGS, SGLANG_VERSION, SglangHost
from orchestrator.servers.flags import flag_key
from tests.reliability.crash import in_sessions
from tests.servers.conftest import REPO, listening, processes_with, run_playbook
from tests.waiting import wait_until

pytestmark = [pytest.mark.lab, pytest.mark.slow]
HOST = "sglang"
#: what a real SGLang on a CPU resolves differently from the request, and never logs: ``--device cpu`` makes the
#: sampling backend ``pytorch`` whatever was asked (srt/server_args.py ``_handle_cpu_backends``, 0.5.15.post1). Only
#: /server_info can tell the adapter.
SAMPLING = {"sampling-backend": "flashinfer"}
#: the host's python reads /server_info itself (a `shell` step beside the server), for the test to hold the adapter's
#: effective values against
FETCH_INFO = ("import sys, urllib.request; open(sys.argv[2], 'wb').write(urllib.request.urlopen(sys.argv[1] + "
              "'/server_info', timeout=120).read())")


def cpu_flags() -> dict[str, Any]:
    """The host module's CPU command line (``CPU_FLAGS``) as a step's flags: ``--x v`` -> ``x: v``, a bare ``--x``
    -> ``x: true``."""
    flags: dict[str, Any] = {}
    words = list(CPU_FLAGS)
    while words:
        name = words.pop(0)
        assert name.startswith("--"), CPU_FLAGS
        flags[name[2:]] = words.pop(0) if words and not words[0].startswith("--") else True
    return flags


def draft_of(lab_models: dict[str, str]) -> Path:
    healthy = Path(lab_models["target"]).parent / "drafts" / "healthy"  # the lab's healthy EAGLE-3 draft
    return healthy if healthy.is_dir() else Path(lab_models["draft"])


def inventory_doc(host: SglangHost, lab_models: dict[str, str], work: Path, marker: str) -> dict[str, Any]:
    """Host ``sglang``: the local transport, the SGLang host's python and environment (TMPDIR and the Triton cache
    under ``work``), ``engine: sglang``, the lab's target and draft; ``marker`` in its environment."""
    return {"hosts": {HOST: {"transport": "local", "python": str(host.python), "state_dir": str(work / "state"),
                             "env": {**host.env(work / "run"), "ORCH_TEST_MARK": marker},
                             "vars": {"engine": "sglang", "target": lab_models["target"],
                                      "draft": str(draft_of(lab_models))}}},
            "default_hosts": HOST}


def session_processes(sids: set[int]) -> list[int]:
    """The live processes of the servers' sessions (each server is ``setsid``'s session leader, so its pgid is its
    session): SGLang's scheduler and detokenizer rename themselves (setproctitle), so their environment cannot be
    trusted to show a marker, their session can."""
    return in_sessions(set(sids))


def kill_left(sids: set[int], marker: str) -> None:
    for pid in session_processes(sids) + processes_with(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(900)
def test_a_start_through_the_adapter_reports_server_infos_resolved_flags(
        sglang_host: SglangHost, lab_models: dict[str, str], tmp_path: Path, marker: str) -> None:
    inventory = Inventory.model_validate(inventory_doc(sglang_host, lab_models, tmp_path, marker))
    requested = {**cpu_flags(), **SAMPLING}
    info_file = tmp_path / "server_info.json"
    sids: set[int] = set()
    try:
        ran = run_playbook(f"""
name: a real SGLang through the adapter
steps:
  - server: {{name: real, flags: {json.dumps(requested)}}}
    register: srv
  - shell: {{argv: {json.dumps([str(sglang_host.python), "-c", FETCH_INFO, "{{ srv.url }}", str(info_file)])}}}
  - bench: {{server: real, n: 2, max_new_tokens: 8}}
    register: b
""", inventory, tmp_path / "sessions")
        srv, bench = ran.result("s1", HOST)["result"], ran.result("s3", HOST)["result"]
        sids.add(int(srv["pgid"]))
        assert ran.status == "ok", [e.get("error") for e in ran.of_type("step_finished")]
        print(f"\nreal SGLang through the adapter: pre-flight {srv['preflight']['seconds']}s, ready in "
              f"{srv['ready_s']}s; bench {bench['completion_tokens']} tokens in {bench['wall_s']}s")
        # the host's python, SGLang's own launcher, the step's flags as SGLang's argv
        assert srv["command"][:3] == [str(sglang_host.python), "-m", "sglang.launch_server"], srv["command"]
        assert srv["command"][srv["command"].index("--device") + 1] == "cpu"
        # the pre-flight ran SGLang's real prepare_server_args with the host's python and environment
        check = srv["preflight"]
        assert check["ok"] and check["route"] == "runtime" and check["version"] == SGLANG_VERSION, check
        assert check["adjustments"] == [], check  # it predicts the speculative adjustments only
        # the adapter's effective values are the server's own /server_info, key by key
        info = json.loads(info_file.read_text())
        assert info["version"] == SGLANG_VERSION and info["device"] == "cpu"
        assert set(srv["effective"]) == {flag_key(k) for k in requested} | {"model_path"}, srv["effective"]
        assert {k: info[k] for k in srv["effective"]} == srv["effective"]
        assert srv["effective"]["model_path"] == lab_models["target"] and srv["unverified"] == []
        # ... requested-vs-effective: what the server resolved differently, and said nowhere but /server_info
        assert srv["overrides"] == [{"flag": "sampling_backend", "requested": "flashinfer", "effective": "pytorch",
                                     "source": "server_info"}], srv["overrides"]
        assert info["sampling_backend"] == "pytorch" and srv["failure"] is None
        ready = ran.of_type("server_ready")
        assert len(ready) == 1 and ready[0]["overrides"] == srv["overrides"], ready
        # the adapter's /flush_cache, /generate and /server_info against it
        assert bench["completed"] == 2 and bench["errors"] == [] and bench["flush_status"] == 200, bench
        assert bench["completion_tokens"] == 16 and bench["server_info_path"] == "/server_info", bench
        assert bench["server_accept_length"] is None  # no speculation, no accept length
        # the session's end stopped the server: none of its processes, its port free, no pidfile
        assert session_processes(sids) == [], "processes of the server outlived the session"
        assert not listening(int(srv["port"]))
        assert list((tmp_path / "state").glob("sessions/*/procs/*.json")) == []
    finally:
        kill_left(sids, marker)


def group_members(pgid: int) -> list[int]:
    """Every process of the group, zombies included (what ``kill -0 -- -PGID``, the transport's liveness check,
    still finds)."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                found.append(int(entry.name))
    return found


def command_of(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def events(sessions: Path) -> list[dict[str, Any]]:
    found = []
    for log in sessions.glob("*/events.jsonl"):
        for line in log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                found.append(json.loads(line))  # a torn last line while the writer is mid-write is skipped
    return found


@pytest.mark.timeout(900)
def test_kill_9_then_orchestrator_cleanup_leaves_no_sglang_process(
        sglang_host: SglangHost, lab_models: dict[str, str], tmp_path: Path) -> None:
    """A real `orchestrator run` starts a SGLang server and is SIGKILLed: the server's whole process tree outlives
    it (the launcher, the scheduler, the detokenizer). `orchestrator cleanup` stops the orphaned server and the run's
    other command: 0 processes, the port free, no pidfile. (One server: a second one, whose launcher was killed too,
    showed SGLang's own PR_SET_PDEATHSIG and the stale pidfile's removal, which tests/servers/test_reliability.py
    holds on the lab; it cost a real SGLang start in CI.)"""
    marker = f"orch-sglang-crash-{uuid.uuid4().hex[:10]}"
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps(inventory_doc(sglang_host, lab_models, tmp_path, marker)))
    flags = json.dumps(cpu_flags())
    playbook = tmp_path / "crash.yaml"
    playbook.write_text(f"""
name: a real SGLang server, then a crash
steps:
  - server: {{name: orphaned, flags: {flags}}}
  - shell: {{argv: [sleep, "900"]}}
""")
    sessions = tmp_path / "sessions"
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    stderr = tmp_path / "run.stderr"
    with stderr.open("wb") as err:  # a file, not a pipe: nobody reads it while the run goes on
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(playbook), "-i", str(inventory),
                                 "--sessions-dir", str(sessions)], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=err)
    sids: set[int] = set()
    try:
        def ready() -> list[dict[str, Any]]:
            return [e for e in events(sessions) if e["type"] == "server_ready"]

        def sleeping() -> bool:  # the step after the servers runs, and its pidfile is written (the orchestrator
            # records a command just after it spawns it: killed in between, no cleanup could know of it)
            return (any(command_of(pid)[:2] == ["sleep", "900"] for pid in processes_with(marker))
                    and bool(list((tmp_path / "state").glob("sessions/*/procs/run-*.json"))))

        assert wait_until(lambda: (len(ready()) == 1 and sleeping()) or proc.poll() is not None, 600, interval=0.2), \
            "the real SGLang server not ready within 600 s"
        assert len(ready()) == 1 and sleeping(), \
            f"the run ended ({proc.returncode}): {stderr.read_text(errors='replace')[-3000:]}"
        servers = {e["server_id"]: e for e in ready()}
        sids.update(int(e["pgid"]) for e in servers.values())
        proc.send_signal(signal.SIGKILL)  # the orchestrator that launched them
        proc.wait(timeout=30)
        # what the crash left: each server's whole tree (launcher, scheduler, detokenizer) and its port
        trees = {name: in_sessions({int(e["pgid"])}) for name, e in servers.items()}
        assert all(len(pids) >= 3 for pids in trees.values()), trees
        assert all(listening(int(e["port"])) for e in servers.values())

        started = time.monotonic()
        cleanup = subprocess.run([sys.executable, "-m", "orchestrator", "cleanup", HOST, "-i", str(inventory),
                                  "--json"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
        took = time.monotonic() - started
        assert cleanup.returncode == 0, (cleanup.stdout[-5000:], cleanup.stderr[-3000:])
        rows = {r["name"]: r for r in json.loads(cleanup.stdout)}
        assert rows["server-orphaned"]["action"] == "stopped" and rows["server-orphaned"]["owner"] == "gone", rows
        assert rows["server-orphaned"]["port_free"] is True
        commands = [r["action"] for n, r in rows.items() if n.startswith("run-")]  # the sleep, and any stale record
        assert "stopped" in commands and set(commands) <= {"stopped", "removed stale pidfile"}, rows
        # 0 processes: of either server's session, of anything the run started (the marker), no port, no pidfile
        assert session_processes(sids) == [], "processes of the servers outlived the cleanup"
        assert processes_with(marker) == []
        assert not any(listening(int(e["port"])) for e in servers.values())
        assert list((tmp_path / "state").glob("sessions/*/procs/*.json")) == []
        print(f"\nkill -9: trees left {({n: len(p) for n, p in trees.items()})}; cleanup in {took:.1f}s: "
              f"{sorted((n, r['action']) for n, r in rows.items())}")
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_left(sids, marker)
