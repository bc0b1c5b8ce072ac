"""The contract every step kind implements. One module per kind, registered in ``actions/__init__``.

An action turns its (rendered, validated) arguments into work on one host through ``ActionContext``
and returns a result dict, which the runner registers and records. Failure is ``StepFailed`` with a
message and whatever result is worth keeping (a failed shell command still has its output).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from orchestrator.events import OutputStream, StepStatus
from orchestrator.templating import render, render_shell

if TYPE_CHECKING:
    from orchestrator.hypotheses.board import HypothesisBoard
    from orchestrator.inventory import HostSpec
    from orchestrator.servers.manager import ServerManager
    from orchestrator.transport.base import Transport


class StepServices(Protocol):
    """The session's services a step (and an ad-hoc poke) may use. Built where the session is composed
    (``orchestrator.session.compose``), handed to the runner, which passes them on without knowing them."""

    @property
    def servers(self) -> ServerManager: ...  # the servers this session started; stopped at its end unless kept

    @property
    def board(self) -> HypothesisBoard: ...  # the hypotheses and their evidence


class ActionArgs(BaseModel):
    """Base of every step kind's arguments: unknown keys are mistakes."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def secret_values(cls, args: Any) -> list[str]:
        """Values in these arguments (raw or rendered, a dict) that are secrets whatever their name (a server's API
        key): the runner redacts them everywhere. Secret-named ``env`` entries are the runner's own rule."""
        return []


A = TypeVar("A", bound=ActionArgs)


class StepFailed(Exception):
    """The step ran and failed; ``result`` is still registered and recorded."""

    def __init__(self, message: str, result: dict[str, Any] | None = None, *, status: StepStatus = "failed") -> None:
        super().__init__(message)
        self.message = message
        self.result = result or {}
        self.status = status


@dataclass
class ActionContext:
    """What an action may touch. Everything explicit: no module globals."""

    step_id: str
    step_name: str
    host: str
    host_spec: HostSpec | None
    transport: Transport | None
    variables: dict[str, Any]
    session_id: str
    session_dir: Path | None
    emit_output: Callable[[OutputStream, str], None]  # (stream, text)
    services: StepServices  # the session's servers and hypothesis board
    emit: Callable[[Any], None] | None = None  # emit a typed event (server lifecycle, artifacts)
    timeout: float | None = None
    #: the step's hosts in order (``host`` among them): a step that runs once over several (``server: {nodes: N}``)
    step_hosts: list[str] = field(default_factory=list)
    #: another host's spec and connected transport (the session's, shared with its steps); None outside a runner
    peer: Callable[[str], Awaitable[tuple[HostSpec, Transport]]] | None = None

    def output(self, text: str, stream: OutputStream = "info") -> None:
        self.emit_output(stream, text)

    def require_transport(self) -> Transport:
        if self.transport is None:
            raise StepFailed(f"step needs a host, but none was resolved for {self.host!r}")
        return self.transport


class Action(ABC, Generic[A]):
    """A step kind. Subclasses set ``kind``, ``Args`` and implement ``run``."""

    kind: ClassVar[str]
    Args: ClassVar[type[BaseModel]]  # an ActionArgs, except `set`'s RootModel (any variable names)
    #: the field a bare string value maps to (``shell: "echo hi"`` -> command)
    shorthand: ClassVar[str | None] = None
    #: fields rendered with shell quoting for every ``{{ }}``
    shell_fields: ClassVar[tuple[str, ...]] = ()
    #: fields left unrendered (expressions the action evaluates itself)
    raw_fields: ClassVar[tuple[str, ...]] = ()
    #: False for actions that run once on the controller (``set``), not per host
    per_host: ClassVar[bool] = True
    #: the step starts a server from ``flags``: the TUI and MCP may show them and rerun it with edited ones
    takes_server_flags: ClassVar[bool] = False
    #: the probes this kind runs that import torch: a session whose playbook has the step warms their
    #: interpreter when it starts (session/compose.py), so the import is paid before anything is measured
    warm_probes: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def secret_values(cls, args: Any) -> list[str]:
        """This step's secret argument values (its ``Args.secret_values``): what the runner must redact."""
        found = getattr(cls.Args, "secret_values", None)
        return list(found(args)) if callable(found) else []

    @classmethod
    def runs_once(cls, raw_args: Any) -> bool:
        """True when this step (its unrendered arguments) runs once, on its first host, using the others itself
        (``ctx.step_hosts``) rather than once per host."""
        return False
    #: one-line description for `orchestrator schema` and the docs
    summary: ClassVar[str] = ""

    @classmethod
    def normalize(cls, raw: Any) -> Any:
        """Shorthand expansion before validation (``shell: "cmd"``)."""
        if cls.shorthand and not isinstance(raw, dict):
            return {cls.shorthand: raw}
        return raw if raw is not None else {}

    @classmethod
    def render_step_args(cls, raw: Any, variables: dict[str, Any]) -> Any:
        """A step's arguments as written, expanded from their shorthand and rendered by this kind's rules: what the
        step executes, and what its StepStarted records (one function, so the two cannot differ). Raises
        TemplateError."""
        normalized = cls.normalize(raw)
        return cls.render_args(normalized, variables) if isinstance(normalized, dict) else render(normalized, variables)

    @classmethod
    def render_args(cls, raw: dict[str, Any], variables: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in raw.items():
            if key in cls.raw_fields:
                out[key] = value
            elif key in cls.shell_fields and isinstance(value, str):
                out[key] = render_shell(value, variables)
            else:
                out[key] = render(value, variables)
        return out

    @abstractmethod
    async def run(self, args: A, ctx: ActionContext) -> dict[str, Any]:
        """Do the work on ``ctx.host``; return the result to register. Raise StepFailed on failure."""
