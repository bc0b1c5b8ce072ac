"""The per-session helpers step kinds and the TUI share, as one typed object built in one place.

``build_services`` is called by the engine as it is made, so an engine built by hand (tests, the TUI)
has the same servers, board and transports as one built by the session runner. Every import here is a
plain first-party import: a broken module fails the build loudly instead of dropping a step kind or the
hypothesis board without a word.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.hypotheses.board import HypothesisBoard, rule_hook
from orchestrator.servers.manager import ServerManager
from orchestrator.slurm.session import SlurmAllocations
from orchestrator.transport.factory import TransportFactory, make_transport

if TYPE_CHECKING:
    from orchestrator.engine.runner import Engine


@dataclass
class SessionServices:
    servers: ServerManager  # the servers this session started; stopped at its end unless kept
    board: HypothesisBoard  # the hypotheses and their evidence
    make_transport: TransportFactory = make_transport  # how a host is reached (tests may swap it)
    slurm: SlurmAllocations | None = None  # the Slurm allocations this session holds


def build_services(engine: Engine) -> SessionServices:
    """Make the session's services and hook them into ``engine``: evidence rules run after each step;
    servers stop at session end (after success, failure or cancel) unless a step said ``keep: true``."""
    servers = ServerManager(emit=engine.emit, session_id=engine.options.session_id)

    async def stop_servers() -> None:
        await servers.stop_all(include_kept=False)

    engine.finalizers.append(stop_servers)
    # Slurm allocations: granted before the first step; released last (finalizers run in reverse), after the
    # servers on their nodes were stopped.
    slurm = SlurmAllocations(engine)
    engine.preparers.append(slurm.acquire)
    engine.finalizers.insert(0, slurm.release)
    board = HypothesisBoard(engine.playbook.hypotheses)
    engine.step_hooks.append(rule_hook(board))
    return SessionServices(servers=servers, board=board, slurm=slurm)
