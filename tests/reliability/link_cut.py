"""A link cut mid-step on a host in a network namespace: shared by tests/reliability/test_network_faults.py (one
cut per run of the suite) and bench/net_faults.py cut (many).

Two hosts, each an sshd in its own namespace (tests/netns.py), run a long step; the link of one ("cut") is taken
down while the step runs there. A trial checks what issue 19 asks: the cut host's step is ``unreachable`` within the
keepalive bound; the other host ("steady") finishes the step and runs the next one while the link is still down;
once the link is back, nothing the step started is left on the cut host (no process, no sshd session), and the
host takes a new session.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from netns import NamespacedHost

from orchestrator.events import Event
from orchestrator.inventory import Inventory
from orchestrator.playbook.loader import load_playbook_text
from orchestrator.runner.playbook_runner import RunnerOptions
from orchestrator.runner.sinks import ListSink
from orchestrator.session.compose import compose_runner
from tests.ssh.conftest import pgrep, wait_until

COUNT_MAX = 3  # the transport's keepalive_count_max: asyncssh gives up at the 4th silent interval
SLACK = 8.0  # a loaded 2-core machine: event loop and sshd scheduling
CLEANUP_WAIT = 120.0  # after the link is back: TCP's retransmission back-off decides when sshd hears of the end


def keepalive_bound(interval: float) -> float:
    return (COUNT_MAX + 1) * interval


def inventory(hosts: dict[str, tuple[NamespacedHost, str, int]], host_vars: dict[str, dict[str, Any]] | None = None,
              **extra: Any) -> Inventory:
    """Hosts by name: (namespaced host, address to dial, port to dial) — the sshd itself or a proxy in front."""
    entries = {}
    for name, (host, address, port) in hosts.items():
        assert host.sshd is not None
        spec = host.sshd.host_spec(name, address=address, port=port, **extra)
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


@dataclass
class CutTrial:
    keepalive: float
    cut_after: float  # seconds between the long step's processes showing up and the cut
    detected: float | None = None  # seconds from the cut to the cut host's `unreachable`
    alive_during_cut: bool = False  # the step's process still ran while the link was down (nothing could tell it)
    cleaned: float | None = None  # seconds from the link's return until nothing of the step was left there
    problems: list[str] = field(default_factory=list)

    @property
    def bound(self) -> float:
        return keepalive_bound(self.keepalive)

    @property
    def held(self) -> bool:
        return not self.problems


async def cut_mid_step(cut: NamespacedHost, steady: NamespacedHost, *, keepalive: float = 1.0,
                       rng: random.Random | None = None) -> CutTrial:
    assert cut.sshd is not None and steady.sshd is not None
    cut_sshd = cut.sshd
    trial = CutTrial(keepalive=keepalive, cut_after=(rng or random.Random()).uniform(0.0, 1.5))
    mark = f"{300 + uuid.uuid4().int % 10**6 / 10**6:.6f}"  # sleep arguments no other process has
    short = f"2.{uuid.uuid4().int % 10**6:06d}"
    inv = inventory({"cut": (cut, cut.address, cut.sshd.port), "steady": (steady, steady.address, steady.sshd.port)},
                    {"cut": {"nap": mark}, "steady": {"nap": short}}, keepalive_interval=keepalive)
    sink = TimedSink()
    engine = compose_runner(load_playbook_text(
        "name: link cut\nhosts: gpus\nvars: {nap: 1}  # each host sets its own\nsteps:\n"
        "  - name: before\n    shell: echo before\n"
        "  - name: long\n    shell: 'echo started; sleep {{ nap }}'\n"
        "  - name: after\n    shell: 'echo after from $(hostname -I)'\n"), inventory=inv, sinks=[sink],
        options=RunnerOptions(session_id=f"cut-{uuid.uuid4().hex[:8]}"))
    run = asyncio.ensure_future(engine.run())
    problems = trial.problems
    try:
        if not await asyncio.to_thread(wait_until, lambda: bool(pgrep(mark)) and bool(pgrep(short)), 30):
            problems.append("the long step did not start on both hosts")
            return trial
        await asyncio.sleep(trial.cut_after)
        cut_at = time.monotonic()
        await asyncio.to_thread(cut.cut)
        try:
            outcome = await asyncio.wait_for(asyncio.shield(run), trial.bound + SLACK + 30)
        except asyncio.TimeoutError:
            problems.append(f"the run did not end within {trial.bound + SLACK + 30:g}s of the cut")
            return trial
    finally:
        if not run.done():
            run.cancel()
        trial.alive_during_cut = bool(pgrep(mark))
        await asyncio.to_thread(cut.restore)
        restored_at = time.monotonic()

    finished = sink.of_type("step_finished")
    if [f.name for f in finished] != ["before", "long", "after"]:
        problems.append(f"steps finished: {[f.name for f in finished]}")
        return trial
    before, long, after = finished
    by_host = {o.host: o for o in long.results}
    lost = by_host.get("cut")
    if before.status != "ok":
        problems.append(f"the first step: {before.status}")
    if lost is None or lost.status != "unreachable" or "connection lost" not in (lost.error or ""):
        problems.append(f"the cut host's step: {lost}")
    else:
        [started_at] = [t for t, e in sink.arrived if e.type == "step_started" and e.step_id == long.step_id]
        trial.detected = started_at + lost.duration - cut_at
        if not 0 < trial.detected <= trial.bound + SLACK:
            problems.append(f"unreachable {trial.detected:.2f}s after the cut (bound {trial.bound:g}s + {SLACK:g}s)")
    kept = by_host.get("steady")
    if kept is None or kept.status != "ok" or kept.result.get("stdout") != "started\n":
        problems.append(f"the steady host's step: {kept}")
    # the steady host went on while the link was down; the cut one was not tried again
    if [o.host for o in after.results] != ["steady"] or after.status != "ok" \
            or steady.address not in str(after.results[0].result.get("stdout")):
        problems.append(f"the step after: {after.status} {[(o.host, o.status) for o in after.results]}")
    if outcome.status != "ok":  # as for a host down at the start: the reachable hosts finished the run
        problems.append(f"the run: {outcome.status}")

    # Link back: sshd on the cut host gets the connection's end (the client's FIN, retransmitted) and closes the
    # session; the guardian, its stdin closed, kills the step's process group.
    if await asyncio.to_thread(wait_until, lambda: not pgrep(mark), CLEANUP_WAIT, 0.2):
        trial.cleaned = time.monotonic() - restored_at
    else:
        problems.append(f"left on the cut host after the link came back: {pgrep(mark)}")
    if not await asyncio.to_thread(wait_until, lambda: not cut_sshd.descendants(), 30, 0.2):
        problems.append(f"sshd sessions left on the cut host: {cut_sshd.descendants()}")
    if pgrep(short):
        problems.append(f"left on the steady host: {pgrep(short)}")

    again = compose_runner(load_playbook_text("name: again\nhosts: cut\nsteps:\n  - shell: echo back\n"), inventory=inv,
                   sinks=[ListSink()], options=RunnerOptions(session_id=f"again-{uuid.uuid4().hex[:8]}"))
    if (await again.run()).status != "ok":
        problems.append("the cut host did not take a new session after the link came back")
    return trial
