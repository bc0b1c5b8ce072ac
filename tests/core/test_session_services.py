"""The session's services are one typed object composed around the engine (orchestrator.session.compose):
servers, the hypothesis board and the Slurm allocations, handed to the engine as services and hooks that got
``emit`` and narrow ports; a step reaches them through its ActionContext (no string-keyed dict, no import that may
silently fail). A bare engine has none, and a step that needs one says so."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.errors import OrchestratorError
from orchestrator.hypotheses.board import HypothesisBoard
from orchestrator.inventory import Inventory
from orchestrator.playbook.models import Hypothesis, Playbook
from orchestrator.runner import PlaybookRunner
from orchestrator.servers.manager import ServerManager
from orchestrator.session.compose import SessionServices, compose_runner
from orchestrator.transport.factory import make_transport
from orchestrator.transport.local import LocalTransport


def test_every_composed_engine_has_typed_services() -> None:
    engine = compose_runner(Playbook(name="p", steps=[], hypotheses=[Hypothesis(id="h1", title="t")]))
    services = engine.services
    assert isinstance(services, SessionServices)
    assert isinstance(services.servers, ServerManager) and isinstance(services.board, HypothesisBoard)
    assert list(services.board.entries) == ["h1"]
    assert engine.make_transport is make_transport
    assert len(engine.step_hooks) == 1  # rules are judged
    # finalizers run in reverse: servers stop first, then the Slurm allocations are released (after their servers)
    assert services.slurm is not None
    assert engine.finalizers == [services.slurm.release, engine.finalizers[1]] and len(engine.finalizers) == 2
    assert engine.preparers == [services.slurm.acquire]


def test_a_bare_engine_says_it_has_no_services() -> None:
    engine = PlaybookRunner(Playbook(name="p", steps=[]))
    assert engine.step_hooks == [] and engine.finalizers == [] and engine.preparers == []
    with pytest.raises(OrchestratorError, match="no server manager.*compose_runner"):
        _ = engine.services.servers


def test_the_transport_factory_lives_in_transport_and_makes_local_transports() -> None:
    spec = Inventory().host("localhost")
    transport = make_transport(spec, "sid")
    assert isinstance(transport, LocalTransport)


async def test_the_engine_reaches_hosts_through_its_transport_factory(run_playbook, monkeypatch: Any) -> None:
    made: list[tuple[str, str]] = []
    original_init = PlaybookRunner.__init__

    def init(self: PlaybookRunner, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)

        def recording_factory(spec: Any, session_id: str) -> Any:
            made.append((spec.name, session_id))
            return make_transport(spec, session_id)

        self.make_transport = recording_factory

    monkeypatch.setattr(PlaybookRunner, "__init__", init)
    run = await run_playbook("name: t\nhosts: localhost\nsteps:\n  - {name: hi, shell: echo hi}\n")
    assert run.outcome.status == "ok"
    assert made == [("localhost", run.engine.options.session_id)]
