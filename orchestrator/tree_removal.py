"""Removing a directory tree that other processes may be removing too (a second build, ``lab clean``, a test
worker's teardown): an entry that is already gone when we reach it is what we wanted, not a failure; anything
else (permission denied, a read-only or busy file system) is said, with the path, never swallowed."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.errors import OrchestratorError


class RemovalError(OrchestratorError):
    """A tree could not be removed; the message names the entry and the reason."""

    title = "Cannot remove a directory"


def remove_tree(path: Path | str) -> None:
    """``rm -rf path`` for a tree, or nothing when it is not there. A symlink is unlinked, never followed.

    :raises RemovalError: an entry could not be removed for any reason but being gone already.
    """
    target = Path(path)
    try:
        if target.is_symlink() or target.is_file():
            target.unlink(missing_ok=True)
            return
        if not target.exists():
            return

        def failed(_function: Callable[..., Any], _path: str, exc: BaseException) -> None:
            if isinstance(exc, FileNotFoundError):
                return  # removed by someone else between the listing and our unlink: the goal is reached
            raise exc

        if sys.version_info >= (3, 12):
            shutil.rmtree(target, onexc=failed)
        else:  # 3.10, 3.11: onerror gets (type, value, traceback)
            shutil.rmtree(target, onerror=lambda fn, p, info: failed(fn, p, info[1]))
    except OSError as exc:
        where = exc.filename or target
        raise RemovalError(f"cannot remove {target}: {where}: {exc.strerror or exc}") from None
