"""Real parts or a red run: the one place a test says "I cannot run my real component here".

Elsewhere a test whose real part is missing (no sshd, no tmux, no torch, no sglang tree) skips, so a laptop
without them still runs the rest. With ``CI`` set (non-empty, not ``0``/``false``/``no``; ``.ci/run`` sets it)
the same test fails instead, so a green CI run means every real part ran.

    from tests import realparts
    torch = realparts.importorskip("torch")          # at module level too (a collection error under CI)
    realparts.require(shutil.which("tmux") is not None, "tmux is not installed")
    realparts.missing(f"{exc.message} (offline?)")   # never returns
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import NoReturn

import pytest

OFF = ("", "0", "false", "no", "off")


def strict() -> bool:
    """True under CI: a missing real part is a failure, not a skip."""
    return os.environ.get("CI", "").strip().lower() not in OFF


def missing(reason: str) -> NoReturn:
    """Skip (or, under CI, fail) the current test, fixture or module because a real part is missing."""
    __tracebackhide__ = True  # reports point at the caller, not at this file
    if strict():
        pytest.fail(f"{reason} [CI is set: a missing real part fails instead of skipping]", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require(ok: object, reason: str) -> None:
    """``missing(reason)`` unless ``ok`` is true."""
    __tracebackhide__ = True
    if not ok:
        missing(reason)


def importorskip(modname: str, minversion: str | None = None, reason: str | None = None) -> ModuleType:
    """``pytest.importorskip``, failing instead of skipping under CI."""
    __tracebackhide__ = True
    try:
        return pytest.importorskip(modname, minversion=minversion, reason=reason)
    except pytest.skip.Exception as exc:
        if not strict():
            raise
        reason = str(exc.msg)
    missing(reason)  # outside the except: no "during handling of the above exception" in the report
