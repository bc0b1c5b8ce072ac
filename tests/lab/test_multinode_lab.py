"""The lab server's ranks (--nnodes/--node-rank/--dist-init-addr), really coordinated over TCP on loopback:
rank 0 is not ready until every rank joined, a dead worker takes the server down, a dead rank 0 ends its workers."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orchestrator.lab.building.build import LabPaths
from orchestrator.lab.building.inventory import lab_env
from orchestrator.lab.stand_in.process import free_port, http_json
from tests.waiting import wait_until

pytestmark = [pytest.mark.lab, pytest.mark.torch]


@pytest.fixture
def rank(lab: LabPaths, tmp_path: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], Path]]]:
    started: list[subprocess.Popen[bytes]] = []
    env = {**os.environ, **lab_env(lab.root)}

    def start(node_rank: int, dist: str, port: int, nnodes: int = 2) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"rank{node_rank}-{len(started)}.log"
        argv = [sys.executable, "-m", "orchestrator.lab.stand_in.server", "--model-path", str(lab.target), "--port", str(port),
                "--nnodes", str(nnodes), "--node-rank", str(node_rank), "--dist-init-addr", dist]
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        started.append(proc)
        return proc, log

    yield start
    for proc in started:  # only the processes this test started, by their own group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    return wait_until(predicate, timeout, interval=0.1)


def turned_away(dist: str) -> bool:
    """Knock at rank 0's rendezvous as a stranger (no rank's hello): True once rank 0 has read us and closed on us,
    i.e. it went round its waiting loop after its log line, and is back waiting for its real worker."""
    host, _, port = dist.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=30) as knock:
        knock.sendall(b"not a rank\n")
        knock.settimeout(30)
        return knock.recv(64) == b""


def answers(port: int) -> int | None:
    try:
        return http_json(f"http://127.0.0.1:{port}/health_generate", timeout=30)[0]
    except OSError:
        return None


def test_rank0_waits_for_its_worker_and_goes_down_with_it(rank) -> None:  # noqa: ANN001
    port, dist = free_port(), f"127.0.0.1:{free_port()}"
    rank0, log0 = rank(0, dist, port)
    assert wait_for(lambda: "waiting for 1 more rank(s)" in log0.read_text(), 60), log0.read_text()
    assert turned_away(dist)  # a stranger is not a rank: rank 0 keeps waiting...
    assert answers(port) is None and rank0.poll() is None  # ...alone: up, but serving nothing
    worker, log1 = rank(1, dist, free_port())
    assert wait_for(lambda: answers(port) == 200, 180), log0.read_text()[-2000:]
    assert "joined rank 0" in log1.read_text() and "Uvicorn running" not in log1.read_text()  # no HTTP on rank 1
    worker.kill()
    assert wait_for(lambda: rank0.poll() is not None, 15), "rank 0 kept serving after its worker died"
    assert rank0.returncode == 1 and "rank 1 went away" in log0.read_text()


def test_a_worker_ends_when_rank0_dies_and_bad_ranks_are_refused(rank) -> None:  # noqa: ANN001
    dist = f"127.0.0.1:{free_port()}"
    worker, log1 = rank(1, dist, free_port())  # before rank 0: it retries until rank 0 listens
    rank0, log0 = rank(0, dist, free_port())
    assert wait_for(lambda: "rank 1 joined" in log0.read_text(), 60), log0.read_text()
    rank0.kill()
    assert wait_for(lambda: worker.poll() is not None, 15), log1.read_text()
    assert worker.returncode == 1 and "went away: rank 1 exits" in log1.read_text()
    bad, log_bad = rank(2, dist, free_port())  # --node-rank 2 of --nnodes 2
    assert bad.wait(60) == 1 and "--node-rank 2 is outside 0..1" in log_bad.read_text()
