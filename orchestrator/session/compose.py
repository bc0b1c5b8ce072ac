"""The session composed around the runner: its services built here and handed to the runner as hooks that
receive ``emit`` and narrow ports, never the runner itself.

Every front end builds its session through ``compose_runner`` (the CLI's run/exec/read, the TUI and MCP through
``session.recording.open_session``, which hands them a ``PreparedSession``, never the runner), and so do tests
that need a whole session. The runner runs steps; it knows nothing of servers, Slurm or the board, and nothing but
its own package and this composer holds it (the import-linter contracts in pyproject.toml and
tests/core/test_runner_ownership.py say so).
Every import here is a plain first-party import: a broken module fails the build loudly instead of dropping a
step kind or the hypothesis board without a word.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.actions import get_action
from orchestrator.hypotheses.board import HypothesisBoard, rule_hook
from orchestrator.inventory import Inventory
from orchestrator.playbook.models import Playbook
from orchestrator.runner.playbook_runner import PlaybookRunner, RunnerOptions
from orchestrator.runner.sinks import EventSink
from orchestrator.servers.manager import ServerManager
from orchestrator.servers.warm import warm_starts_enabled
from orchestrator.slurm.session_allocations import SlurmAllocations, SlurmSessionPort
from orchestrator.transport.base import Transport
from orchestrator.transport.factory import TransportFactory, make_transport
from orchestrator.transport.spec import ConnectionSpec


@dataclass
class SessionServices:
    """What the session's steps and front ends share (``ActionContext.services``: a ``StepServices``)."""

    servers: ServerManager  # the servers this session started; stopped at its end unless kept
    board: HypothesisBoard  # the hypotheses and their evidence
    slurm: SlurmAllocations | None = None  # the Slurm allocations this session holds


def compose_runner(
    playbook: Playbook,
    *,
    inventory: Inventory | None = None,
    sinks: Iterable[EventSink] = (),
    options: RunnerOptions | None = None,
    make_transport: TransportFactory = make_transport,
) -> PlaybookRunner:
    """A runner with the session's services around it: evidence rules run after each step; servers stop at
    session end (after success, failure or cancel) unless a step said ``keep: true``; Slurm allocations are
    granted before the first step and released last (finalizers run in reverse), after the servers on their
    nodes were stopped."""
    runner = PlaybookRunner(playbook, inventory=inventory, sinks=sinks, options=options,
                            make_transport=_warming(make_transport,
                                                    warm_probes(playbook) if warm_starts_enabled() else ()))
    servers = ServerManager(emit=runner.emit, session_id=runner.options.session_id)

    async def stop_servers() -> None:
        await servers.stop_all(include_kept=False)

    runner.finalizers.append(stop_servers)
    slurm = SlurmAllocations(SlurmSessionPort(
        inventory=runner.inventory,
        host_patterns=[playbook.hosts or runner.inventory.default_hosts, *(s.hosts for s in playbook.all_steps())],
        session_id=runner.options.session_id, keep_remote=runner.options.keep_remote, emit=runner.emit,
        take_transport=lambda host: runner.transports.pop(host, None), problem=runner.problems.add,
    ))
    runner.preparers.append(slurm.acquire)
    runner.finalizers.insert(0, slurm.release)
    board = HypothesisBoard(playbook.hypotheses)
    runner.step_hooks.append(rule_hook(board, runner.emit))
    runner.services = SessionServices(servers=servers, board=board, slurm=slurm)
    return runner


def warm_probes(playbook: Playbook) -> tuple[str, ...]:
    """The torch probes the playbook's steps run (their kinds' ``warm_probes``), in a stable order."""
    kinds = [get_action(step.action) for step in playbook.all_steps()]
    return tuple(sorted({p for kind in kinds if kind is not None for p in kind.warm_probes}))


def _warming(make: TransportFactory, probes: tuple[str, ...]) -> TransportFactory:
    """Each host's transport told which torch probes the session may run there: its agents start their warm
    interpreters with their first call. A host that never runs them pays one idle interpreter, never a result.
    With no such probe (or warm starts turned off) the factory is used as it is."""
    if not probes:
        return make

    def make_warm(spec: ConnectionSpec, session_id: str) -> Transport:
        transport = make(spec, session_id)
        transport.agents.warm_probes = probes
        return transport

    return make_warm
