"""The exception tree. A user mistake is an OrchestratorError: shown as a panel, never a traceback."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Location:
    """A place in a user's file; rendered the way compilers do so editors can jump to it."""

    file: str
    line: int  # 1-based
    col: int  # 1-based

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class OrchestratorError(Exception):
    """Base of every error the tool reports to a user. ``exit_code`` is what the CLI returns."""

    title = "Error"
    exit_code = 1

    def __init__(self, message: str, *, title: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if title is not None:
            self.title = title


class UserInputError(OrchestratorError):
    """Invalid input from the user (files, flags, arguments): exit code 2."""

    title = "Invalid input"
    exit_code = 2


class PlaybookError(UserInputError):
    """A mistake in a playbook, with the place it was found."""

    title = "Playbook error"

    def __init__(self, message: str, location: Location | None = None) -> None:
        self.location = location
        self.bare_message = message
        super().__init__(f"{location}: {message}" if location else message)


class PlaybookErrors(UserInputError):
    """Several playbook mistakes found in one pass, reported together so none is lost."""

    title = "Playbook errors"

    def __init__(self, errors: list[PlaybookError]) -> None:
        self.errors = errors
        super().__init__("\n".join(e.message for e in errors))


class TemplateError(OrchestratorError):
    """A template or expression that failed while running (undefined value, bad filter use)."""

    title = "Template error"


class TransportError(OrchestratorError):
    title = "Transport error"


class HostUnreachable(TransportError):
    """The host cannot be reached (connection refused, timed out, host key refused, auth failed)."""

    title = "Host unreachable"


class HostKeyError(HostUnreachable):
    title = "Host key not trusted"


class ProbeError(OrchestratorError):
    title = "Probe error"
    #: the probe's own error kind and sentence when it reported one (run_probe sets them), for callers that
    #: turn a kind they understand into their own message
    kind: str | None = None
    reason: str | None = None


class ServerError(OrchestratorError):
    title = "Server error"


class SessionError(UserInputError):
    title = "Session error"
