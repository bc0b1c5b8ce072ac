"""The lab server's multi-node ranks: SGLang's ``--nnodes N --node-rank R --dist-init-addr HOST:PORT``, really
coordinated over TCP (the lab's stand-in for torch.distributed's rendezvous; it is NOT that).

As in SGLang: rank 0 serves HTTP, and only once every rank has joined (``waiting for N more rank(s)`` until
then); ranks > 0 never serve HTTP, they join rank 0 and stay joined. Each side holds its TCP connection open
for life, so the death of any rank is seen at once by the other side: a worker's death takes rank 0 (the
server) down, and rank 0's death ends every worker, as a broken NCCL group ends a real engine.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable

from orchestrator.lab.stand_in.sglang_args import StartupError

JOIN_TIMEOUT_S = 600.0  # how long ranks wait for each other (SGLang's dist init waits minutes as well)
HELLO = b"orchestrator-lab-rank "


def _address(dist_init_addr: str | None) -> tuple[str, int]:
    host, _, port = (dist_init_addr or "").rpartition(":")
    if not host or not port.isdigit():
        raise StartupError(f"--dist-init-addr must be HOST:PORT for --nnodes > 1, got {dist_init_addr!r}")
    return host.strip("[]"), int(port)


def _die(log: Callable[[str], None], message: str) -> None:
    log(message)
    logging.shutdown()
    os._exit(1)  # the whole server goes, from any thread: what a broken process group does to a real engine


def _watch(conn: socket.socket, log: Callable[[str], None], message: str) -> None:
    """Block until the peer closes (or dies), then take this process down."""
    try:
        while conn.recv(64):
            pass
    except OSError:
        pass
    _die(log, message)


def wait_for_workers(nnodes: int, dist_init_addr: str | None, log: Callable[[str], None],
                     timeout: float = JOIN_TIMEOUT_S) -> list[socket.socket]:
    """Rank 0: listen on --dist-init-addr until ranks 1..nnodes-1 have joined; then watch each of them."""
    host, port = _address(dist_init_addr)
    server = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind((host, port))
    except OSError as exc:
        raise StartupError(f"cannot bind --dist-init-addr {host}:{port}: {exc.strerror or exc}", kind="OSError") from None
    server.listen(nnodes)
    joined: dict[int, socket.socket] = {}
    deadline = time.monotonic() + timeout
    log(f"rank 0 of {nnodes}: waiting for {nnodes - 1} more rank(s) on {host}:{port}")
    while len(joined) < nnodes - 1:
        server.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            conn, peer = server.accept()
        except TimeoutError:
            server.close()
            missing = sorted(set(range(1, nnodes)) - set(joined))
            raise StartupError(f"rank(s) {missing} did not join rank 0 at {host}:{port} in {timeout:g}s",
                               kind="RuntimeError") from None
        conn.settimeout(10)
        try:
            hello = conn.recv(64)
        except OSError:
            conn.close()
            continue
        rank = int(hello[len(HELLO):].strip() or 0) if hello.startswith(HELLO) else 0
        if not 0 < rank < nnodes or rank in joined:
            conn.close()  # not one of ours (a port scanner, a stale rank): keep waiting
            continue
        conn.settimeout(None)
        conn.sendall(b"ok\n")
        joined[rank] = conn
        log(f"rank {rank} joined from {peer[0]}; waiting for {nnodes - 1 - len(joined)} more rank(s)")
    server.close()
    for rank, conn in joined.items():
        threading.Thread(target=_watch, args=(conn, log, f"rank {rank} went away: the server goes down with it"),
                         name=f"rank-{rank}", daemon=True).start()
    return list(joined.values())


def serve_as_worker(nnodes: int, node_rank: int, dist_init_addr: str | None, log: Callable[[str], None],
                    timeout: float = JOIN_TIMEOUT_S) -> int:
    """Rank > 0: join rank 0 (retrying while it is not up yet), then stay joined; returns only on failure."""
    if not 0 < node_rank < nnodes:
        raise StartupError(f"--node-rank {node_rank} is outside 0..{nnodes - 1} (--nnodes {nnodes})")
    host, port = _address(dist_init_addr)
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=10)
            conn.sendall(HELLO + str(node_rank).encode() + b"\n")
            if conn.recv(8).startswith(b"ok"):
                break
            conn.close()
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise StartupError(f"rank {node_rank} could not join rank 0 at {host}:{port} in {timeout:g}s",
                               kind="RuntimeError")
        time.sleep(0.2)
    conn.settimeout(None)
    log(f"rank {node_rank} of {nnodes}: joined rank 0 at {host}:{port}; serving as a worker (no HTTP on this rank)")
    _watch(conn, log, f"rank 0 at {host}:{port} went away: rank {node_rank} exits")
    return 1
