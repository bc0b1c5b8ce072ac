"""Ad-hoc actions on a live session: what a person (the TUI) or an assistant (MCP) asks for outside the
playbook. Each one is a step made with ``PlaybookRunner.adhoc_step`` (ids x1, x2, ...) and run by the runner, so the
session log, replay and the report see it exactly like a playbook step, with who asked for it (``author``).

The TUI's ``Controller`` and the MCP server both go through this class: one seam, so an ad-hoc read or
command is recorded the same way whichever front end asked for it.
"""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Any

from orchestrator.actions import get_action
from orchestrator.errors import UserInputError
from orchestrator.events import HypothesisUpdated, NoteAdded, StepFinished

if TYPE_CHECKING:
    from orchestrator.playbook.models import Step
    from orchestrator.runner.playbook_runner import PlaybookRunner


def current_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry (containers): still record something
        return "unknown"


def source_args(*, package: str, file: str | None = None, address: str | None = None, symbol: str | None = None,
                pattern: str | None = None, context: int | None = None) -> dict[str, Any]:
    """read_source arguments from what a person types: ``address`` is sed-style ("155,200", "/regex/")."""
    if not package.strip():
        raise UserInputError("read source: give a package (e.g. sglang)")
    args: dict[str, Any] = {"package": package.strip()}
    if file and file.strip():
        args["file"] = file.strip()
    given = [name for name, value in (("address", address), ("symbol", symbol), ("pattern", pattern))
             if value and value.strip()]
    if len(given) > 1:
        raise UserInputError(f"read source: give one of address, symbol or pattern, not {' and '.join(given)}")
    if symbol and symbol.strip():
        args["symbol"] = symbol.strip()
    elif pattern and pattern.strip():
        args["pattern"] = pattern
    elif address and address.strip():
        address = address.strip()
        if len(address) >= 2 and address.startswith("/") and address.endswith("/"):
            args["pattern"] = address[1:-1]
        else:
            args["lines"] = address
    if context is not None:
        args["context"] = context
    return args


class AdhocActions:
    """Recorded ad-hoc steps, notes and verdicts on one live ``PlaybookRunner``, all attributed to ``author``."""

    def __init__(self, runner: PlaybookRunner, *, author: str | None = None) -> None:
        self.runner = runner
        self.author = author or current_user()
        self.closed = False  # set when the session has ended: nothing more can be recorded

    # -- steps ----------------------------------------------------------------------------------
    async def run(self, step: Step) -> StepFinished:
        """Run a step made with ``engine.adhoc_step``. Raises UserInputError if the kind is unknown or the
        session has ended."""
        if get_action(step.action) is None:
            raise UserInputError(f"step kind {step.action!r} is not available in this installation")
        if self.closed:
            raise UserInputError("the session has ended; start a new one to run more steps")
        return await self.runner.run_step(step, author=self.author)

    async def step(self, action: str, args: Any, *, name: str, host: str | None = None,
                   timeout: float | None = None) -> StepFinished:
        return await self.run(self.runner.adhoc_step(action, args, name=name, hosts=host or None, timeout=timeout))

    async def read_source(self, *, package: str, file: str | None = None, address: str | None = None,
                          symbol: str | None = None, pattern: str | None = None, host: str | None = None,
                          context: int | None = None, timeout: float | None = None) -> StepFinished:
        """Read installed source on a host by sed address, symbol or pattern."""
        args = source_args(package=package, file=file, address=address, symbol=symbol, pattern=pattern,
                           context=context)
        where = args.get("file", args["package"])
        what = args.get("symbol") or args.get("lines") or args.get("pattern") or ""
        return await self.step("read_source", args, name=f"read {where} {what}".strip(), host=host, timeout=timeout)

    async def run_command(self, command: str | None = None, *, argv: list[str] | None = None, host: str | None = None,
                          timeout: float | None = None) -> StepFinished:
        """A shell command (``bash -c``) or an argv (no shell)."""
        if (command is None) == (argv is None):
            raise UserInputError("run command: give a command or an argv, not both")
        if command is not None:
            if not command.strip():
                raise UserInputError("run command: the command is empty")
            return await self.step("shell", {"command": command}, name=command.strip()[:60], host=host,
                                   timeout=timeout)
        assert argv is not None
        if not argv or not str(argv[0]).strip():
            raise UserInputError("run command: the argv is empty")
        return await self.step("shell", {"argv": [str(a) for a in argv]}, name=" ".join(map(str, argv))[:60],
                               host=host, timeout=timeout)

    # -- the board ------------------------------------------------------------------------------
    def note(self, text: str, *, hypothesis_id: str | None = None, step_id: str | None = None) -> NoteAdded:
        if not text.strip():
            raise UserInputError("a note needs some text")
        board = self.runner.services.board
        if hypothesis_id and hypothesis_id not in board.entries:
            raise UserInputError(f"unknown hypothesis {hypothesis_id!r} (known: {', '.join(board.entries) or 'none'})")
        event = NoteAdded(text=text.strip(), hypothesis_id=hypothesis_id or None, step_id=step_id or None,
                          author=self.author)
        self.runner.emit(event)
        return event

    def verdict(self, hypothesis_id: str, state: str, because: str) -> HypothesisUpdated:
        """A manual verdict. Raises UserInputError for an unknown hypothesis or state, or no reason."""
        if not because.strip():
            raise UserInputError("a verdict needs the observation that decides it")
        from orchestrator.hypotheses.board import manual_verdict

        return manual_verdict(self.runner.services.board, self.runner.emit, hypothesis_id, state, because.strip(),
                              author=self.author)
