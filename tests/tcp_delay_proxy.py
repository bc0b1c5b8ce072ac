"""A TCP proxy that adds round-trip time and packet loss, for SSH over a "real-world" link.

This kernel has no ``netem`` qdisc, so the link is shaped in user space: the proxy sits in front of an sshd and
delays every chunk it forwards by RTT/2 in each direction, keeping order (a delay line: bytes keep flowing while
earlier ones wait, so throughput is not cut to one chunk per RTT).

Loss, honestly modelled: TCP hides a lost packet from both ends by retransmitting it, so what a lost packet does
to an SSH session is a stall of the stream for the retransmission timeout, with everything behind it held up
(head-of-line). The proxy does exactly that: a chunk of ``n`` bytes counts as ceil(n / 1448) packets (Ethernet
MSS), it is "lost" with probability 1 - (1 - p)**packets, and a lost chunk is held for RTO extra (200 ms,
Linux's minimum RTO) before it goes on, with every later chunk of that direction behind it. What this does not
model: the sender's congestion window shrinking after a loss (a real link also loses throughput on bulk
transfers), duplicate ACKs triggering fast retransmit (a real link often recovers faster than one RTO), and loss
of the connection's SYN (3 s in Linux).

Run as its own process so its timing is not disturbed by the event loop it is measuring:

    python tests/tcp_delay_proxy.py --rtt-ms 30 --loss 0.01 LISTEN_HOST=TARGET_HOST:PORT [...]

prints ``listening LISTEN_HOST:PORT`` per mapping (a free port), then ``ready``. Tests and benchmarks use
:func:`start_proxy`.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import socket
import subprocess
import sys
from dataclasses import dataclass, field

MSS = 1448
RTO = 0.200  # Linux TCP_RTO_MIN


@dataclass
class Shaping:
    rtt: float  # seconds
    loss: float  # per-packet probability
    rng: random.Random = field(default_factory=random.Random)
    chunks: int = 0
    stalls: int = 0

    def delivery_delay(self, size: int) -> float:
        self.chunks += 1
        delay = self.rtt / 2
        if self.loss and self.rng.random() < 1 - (1 - self.loss) ** math.ceil(size / MSS):
            self.stalls += 1
            delay += RTO
        return delay


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, shaping: Shaping) -> None:
    loop = asyncio.get_running_loop()
    line: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await line.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(deliver())
    last = 0.0
    try:
        while data := await reader.read(65536):
            last = max(loop.time() + shaping.delivery_delay(len(data)), last)  # never overtakes what is held
            line.put_nowait((last, data))
    except OSError:
        pass
    line.put_nowait((max(loop.time() + shaping.rtt / 2, last), b""))
    try:
        await sender
    except OSError:
        pass


async def _serve(listen: str, target: tuple[str, int], shaping: Shaping) -> asyncio.Server:
    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(*target)
        except OSError:
            client_writer.close()
            return
        for w in (client_writer, server_writer):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # the proxy adds no Nagle delay of its own
        try:
            await asyncio.gather(_pipe(client_reader, server_writer, shaping),
                                 _pipe(server_reader, client_writer, shaping))
        except asyncio.CancelledError:
            pass  # the proxy is stopping with this connection open: asyncio's stream callback would print a traceback
        finally:
            for w in (client_writer, server_writer):
                w.close()

    return await asyncio.start_server(handle, listen, 0)


async def _main(maps: list[tuple[str, tuple[str, int]]], shaping: Shaping) -> None:
    servers = [await _serve(listen, target, shaping) for listen, target in maps]
    for server in servers:
        host, port = server.sockets[0].getsockname()[:2]
        print(f"listening {host}:{port}", flush=True)
    print("ready", flush=True)
    # Stop when the parent closes our stdin (or dies): no proxy outlives its test.
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    for server in servers:
        server.close()
    # connections still open (a client that has not closed yet): end them here, not as pending tasks at exit
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
    print(f"chunks {shaping.chunks} stalled {shaping.stalls}", file=sys.stderr, flush=True)


def _mapping(text: str) -> tuple[str, tuple[str, int]]:
    listen, _, target = text.partition("=")
    host, _, port = target.rpartition(":")
    if not listen or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not LISTEN_HOST=TARGET_HOST:PORT")
    return listen, (host, int(port))


@dataclass
class ProxyProcess:
    process: subprocess.Popen[str]
    endpoints: list[tuple[str, int]]  # (host, port) per mapping, in order

    def stop(self) -> str:
        """Stop the proxy; returns its summary line (chunks forwarded, chunks stalled)."""
        try:
            _, err = self.process.communicate(timeout=10)  # closes its stdin first: that is the stop signal
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        return err.strip()


def start_proxy(maps: list[tuple[str, str, int]], *, rtt_ms: float, loss: float, seed: int | None = None) -> ProxyProcess:
    """Start a proxy process; ``maps`` are (listen host, target host, target port)."""
    argv = [sys.executable, __file__, "--rtt-ms", str(rtt_ms), "--loss", str(loss)]
    if seed is not None:
        argv += ["--seed", str(seed)]
    argv += [f"{listen}={host}:{port}" for listen, host, port in maps]
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    endpoints = []
    for line in process.stdout:
        if line.startswith("listening "):
            host, _, port = line.split()[1].rpartition(":")
            endpoints.append((host, int(port)))
        elif line.strip() == "ready":
            return ProxyProcess(process, endpoints)
    process.kill()
    raise RuntimeError(f"the proxy did not start: {process.communicate()[1][-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rtt-ms", type=float, default=30.0)
    parser.add_argument("--loss", type=float, default=0.0, help="per-packet loss probability (0.01 = 1 %%)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("maps", nargs="+", type=_mapping, metavar="LISTEN_HOST=TARGET_HOST:PORT")
    args = parser.parse_args()
    shaping = Shaping(rtt=args.rtt_ms / 1000, loss=args.loss, rng=random.Random(args.seed))
    asyncio.run(_main(args.maps, shaping))


if __name__ == "__main__":
    main()
