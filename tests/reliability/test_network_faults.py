"""Network faults on real hosts (issue 19): sshd in network namespaces joined by veth pairs (tests/netns.py).

* A link cut mid-step (the host-side veth taken down: packets dropped, nothing refused): the step fails as
  ``unreachable`` on that host within the keepalive bound, the other host goes on, and once the link is back no
  process the step started is left on the cut host (the guardian kills them when sshd sees the connection end).
* 30 ms RTT and 1 % loss through a user-space TCP proxy (tests/tcp_delay_proxy.py; this kernel has no netem): a
  playbook of shell and probe steps (a 380 kB push, the agent) runs through it unchanged. The figures are in
  ``bench/net_faults.py``; nothing here is timed beyond generous bounds.

Root only (namespaces need CAP_NET_ADMIN): elsewhere these skip with the reason, and fail under CI (tests/realparts.py).
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from netns import NamespacedHost, make_host, netns_missing_reason  # noqa: E402
from tcp_delay_proxy import start_proxy  # noqa: E402

from orchestrator.engine.runner import Engine, EngineOptions  # noqa: E402
from orchestrator.engine.sinks import ListSink  # noqa: E402
from orchestrator.events import Event  # noqa: E402
from orchestrator.inventory import Inventory  # noqa: E402
from orchestrator.playbook.loader import load_playbook_text  # noqa: E402
from tests import realparts  # noqa: E402
from tests.ssh.conftest import pgrep, wait_until  # noqa: E402

KEEPALIVE = 1.0  # the inventory's keepalive_interval for these hosts (the product's default is 15 s)
KEEPALIVE_BOUND = 4 * KEEPALIVE  # asyncssh drops the connection at the 4th silent interval (keepalive_count_max 3)
SLACK = 8.0  # a loaded 2-core machine: event loop and sshd scheduling


@pytest.fixture
def namespaced_hosts(tmp_path: Path) -> Iterator[Any]:
    """``make(n)`` -> n hosts, each an sshd in its own namespace; all torn down after the test."""
    reason = netns_missing_reason()
    if reason:
        realparts.missing(reason)
    made: list[NamespacedHost] = []

    def make(count: int) -> list[NamespacedHost]:
        for _ in range(count):
            made.append(make_host(tmp_path / f"ns{len(made)}"))
        return made[-count:]

    try:
        yield make
    finally:
        for host in made:
            host.close()


def inventory(hosts: dict[str, tuple[NamespacedHost, str, int]], host_vars: dict[str, dict[str, Any]] | None = None,
              **extra: Any) -> Inventory:
    """Hosts by name: (namespaced host, address to dial, port to dial) — the sshd itself or a proxy in front."""
    entries = {}
    for name, (host, address, port) in hosts.items():
        assert host.sshd is not None
        spec = host.sshd.host_spec(name, address=address, port=port, keepalive_interval=KEEPALIVE, **extra)
        spec.pop("name")
        spec["vars"] = (host_vars or {}).get(name, {})
        entries[name] = spec
    return Inventory.model_validate({"hosts": entries, "groups": {"gpus": {"hosts": list(hosts)}}})


class TimedSink(ListSink):
    """Events with the monotonic time they arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived: list[tuple[float, Event]] = []

    def handle(self, event: Event) -> None:
        super().handle(event)
        self.arrived.append((time.monotonic(), event))


def _mark() -> str:
    return f"{300 + uuid.uuid4().int % 10**6 / 10**6:.6f}"  # a sleep argument no other process has


async def test_link_cut_mid_step_is_unreachable_within_keepalive_others_go_on_no_orphans(namespaced_hosts: Any) -> None:
    cut, steady = namespaced_hosts(2)
    mark, short = _mark(), f"2.{uuid.uuid4().int % 10**6:06d}"
    inv = inventory({"cut": (cut, cut.address, cut.sshd.port), "steady": (steady, steady.address, steady.sshd.port)},
                    {"cut": {"nap": mark}, "steady": {"nap": short}})
    sink = TimedSink()
    engine = Engine(load_playbook_text(
        "name: link cut\nhosts: gpus\nvars: {nap: 1}  # each host sets its own\nsteps:\n  - name: before\n    shell: echo before\n"
        "  - name: long\n    shell: 'echo started; sleep {{ nap }}'\n"
        "  - name: after\n    shell: 'echo after from $(hostname -I)'\n"), inventory=inv, sinks=[sink],
        options=EngineOptions(session_id=f"cut-{uuid.uuid4().hex[:8]}"))
    run = asyncio.ensure_future(engine.run())
    try:
        assert await asyncio.to_thread(wait_until, lambda: bool(pgrep(mark)) and bool(pgrep(short)), 30), \
            "the long step did not start on both hosts"
        cut_at = time.monotonic()
        cut.cut()
        outcome = await asyncio.wait_for(run, KEEPALIVE_BOUND + SLACK + 30)
    finally:
        if not run.done():
            run.cancel()
        alive_during_cut = bool(pgrep(mark))  # nothing can tell the host while the link is down
        cut.restore()
        restored_at = time.monotonic()

    before, long, after = sink.of_type("step_finished")
    assert before.status == "ok"
    by_host = {o.host: o for o in long.results}
    assert by_host["cut"].status == "unreachable", by_host["cut"]
    assert "connection lost" in (by_host["cut"].error or "") and "keepalive" in (by_host["cut"].error or "")
    assert by_host["steady"].status == "ok" and by_host["steady"].result["stdout"] == "started\n"
    # the cut host's result came within the keepalive bound of the cut (its step started before the cut)
    [(started_at, _)] = [(t, e) for t, e in sink.arrived if e.type == "step_started" and e.step_id == long.step_id]
    detected = started_at + by_host["cut"].duration - cut_at
    assert 0 < detected <= KEEPALIVE_BOUND + SLACK, detected
    # the steady host went on while the link was still down; the cut one was not tried again
    assert [o.host for o in after.results] == ["steady"] and after.status == "ok"
    assert steady.address in after.results[0].result["stdout"]
    assert outcome.status == "ok"  # as for a host down at the start: the reachable hosts finished the run
    print(f"cut host unreachable {detected:.2f}s after the cut (bound {KEEPALIVE_BOUND:g}s)")

    # Link back: sshd on the cut host gets the connection's end (the client's FIN, retransmitted), the guardian
    # kills the step's process group. TCP backs off its retransmissions, so this may take a while.
    gone = await asyncio.to_thread(wait_until, lambda: not pgrep(mark), 120, 0.2)
    assert gone, f"left on the cut host after the link came back: {pgrep(mark)}"
    assert await asyncio.to_thread(wait_until, lambda: not cut.sshd.descendants(), 30, 0.2), \
        f"sshd sessions left on the cut host: {cut.sshd.descendants()}"
    assert not pgrep(short)
    print(f"the step's processes on the cut host: {'alive' if alive_during_cut else 'gone'} while the link was down, "
          f"gone {time.monotonic() - restored_at:.1f}s after it came back")

    # and the host is usable again
    again = Engine(load_playbook_text("name: again\nhosts: cut\nsteps:\n  - shell: echo back\n"),
                   inventory=inv, sinks=[ListSink()], options=EngineOptions(session_id=f"again-{uuid.uuid4().hex[:8]}"))
    assert (await again.run()).status == "ok"


async def test_playbook_through_30ms_rtt_and_one_percent_loss(namespaced_hosts: Any) -> None:
    [host] = namespaced_hosts(1)
    assert host.sshd is not None
    proxy = start_proxy([(host.near_address, host.address, host.sshd.port)], rtt_ms=30, loss=0.01)
    try:
        address, port = proxy.endpoints[0]
        host.sshd.trust(address, port)
        sink = ListSink()
        engine = Engine(load_playbook_text(
            "name: far\nhosts: gpus\nsteps:\n"
            + "".join(f"  - name: s{i}\n    shell: 'echo {i}'\n" for i in range(10))
            + "  - name: env\n    probe: env_info\n    register: env\n"
            "  - name: big\n    shell: 'head -c 2000000 /dev/zero | tr \"\\\\0\" x'\n"),
            inventory=inventory({"far": (host, address, port)}), sinks=[sink],
            options=EngineOptions(session_id=f"far-{uuid.uuid4().hex[:8]}"))
        outcome = await asyncio.wait_for(engine.run(), 300)
    finally:
        summary = proxy.stop()
    finished = sink.of_type("step_finished")
    assert outcome.status == "ok", [(f.name, f.error, [o.error for o in f.results]) for f in finished]
    assert [f.results[0].result["stdout"] for f in finished[:10]] == [f"{i}\n" for i in range(10)]
    assert engine.vars.shared["env"]["python"]["executable"]
    assert finished[-1].results[0].result["stdout"].count("x") >= 1_000_000  # the capture may keep a tail only
    # every step paid at least one round trip: the proxy really is in the way
    assert min(f.duration for f in finished[1:10]) >= 0.030, [f.duration for f in finished]
    assert summary.startswith("chunks "), summary
