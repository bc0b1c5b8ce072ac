"""``--debug`` (or ``ORCHESTRATOR_DEBUG=1``): the SSH, agent and server-client traffic through standard logging,
redacted like everything else.

Each part logs to its own logger under ``orchestrator`` (``orchestrator.ssh``, ``orchestrator.agent``,
``orchestrator.server_client``) at DEBUG; nothing is printed unless debugging is on. The handler masks every secret
a live session knows (each engine registers its redactor: secret vars, API keys, secret-named env values) and the
values of this process's secret-named environment variables, before a line is written.
"""

from __future__ import annotations

import logging
import os
import sys
import weakref
from pathlib import Path
from typing import IO

from orchestrator.redact import Redactor

ENV_VAR = "ORCHESTRATOR_DEBUG"
FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
LIMIT = 2000  # characters of one logged payload (a pushed script, a probe's arguments)


def requested(flag: bool = False) -> bool:
    """``--debug`` given, or ORCHESTRATOR_DEBUG set to something other than "", "0" or "false"."""
    return flag or os.environ.get(ENV_VAR, "").strip().lower() not in ("", "0", "false", "no")


def clip(text: str, limit: int = LIMIT) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


class RedactingFilter(logging.Filter):
    """Masks the secrets of every registered redactor (and the environment's) in a record's message."""

    def __init__(self) -> None:
        super().__init__()
        self._redactors: weakref.WeakSet[Redactor] = weakref.WeakSet()
        self._environment = Redactor()
        self._environment.add_env(dict(os.environ))

    def watch(self, redactor: Redactor) -> None:
        self._redactors.add(redactor)

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        for redactor in [self._environment, *self._redactors]:
            text = redactor.text(text)
        record.msg, record.args = text, None
        if record.exc_info:  # a traceback's text is masked too (its frames may quote a secret)
            formatted = logging.Formatter().formatException(record.exc_info)
            for redactor in [self._environment, *self._redactors]:
                formatted = redactor.text(formatted)
            record.exc_text, record.exc_info = formatted, None
        return True


#: the one filter every debug handler shares; engines register their redactors with it (see ``watch``)
FILTER = RedactingFilter()


def watch(redactor: Redactor) -> None:
    """Mask ``redactor``'s secrets in debug lines for as long as it lives (a runner's, for its session)."""
    FILTER.watch(redactor)


def enable(*, stream: IO[str] | None = None, path: Path | None = None) -> logging.Handler:
    """Send the orchestrator's loggers at DEBUG to ``path`` (appended) or ``stream`` (stderr), redacted. Returns
    the handler (``disable`` takes it off again)."""
    handler: logging.Handler = (logging.FileHandler(path, encoding="utf-8") if path is not None
                                else logging.StreamHandler(stream or sys.stderr))
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(FILTER)
    root = logging.getLogger("orchestrator")
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    return handler


def disable(handler: logging.Handler) -> None:
    root = logging.getLogger("orchestrator")
    root.removeHandler(handler)
    handler.close()
    if not any(h for h in root.handlers):
        root.setLevel(logging.NOTSET)
