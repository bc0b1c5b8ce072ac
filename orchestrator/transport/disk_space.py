"""Why a copy to a host failed, when the file system on the far side is full.

OpenSSH's sftp-server speaks SFTP version 3, which has no "no space" status: a write to a full disk comes back as
the bare ``Failure``. After such a failure we ask the host (``df``) and, when the disk (or its inodes) is what ran
out, say so, with the numbers. This is only an explanation: the copy's failure is raised either way.
"""

from __future__ import annotations

import asyncio
import posixpath
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

from orchestrator.errors import TransportError

if TYPE_CHECKING:
    from orchestrator.transport.base import Transport


def _fields(line: str) -> list[str] | None:
    # df -P: Filesystem, size, used, available, capacity, mounted on (which may hold spaces)
    parts = line.split(None, 5)
    return parts if len(parts) == 6 and parts[3].isdigit() else None


def describe_full_disk(df_blocks: str, df_inodes: str, *, needed: int, name: str) -> str | None:
    """From ``df -Pk`` and ``df -Pi`` of the target directory (their last lines): a sentence when the file system
    has less room than ``needed`` bytes, or no inode left; None when it has room (the failure is something else)."""
    blocks, inodes = _fields(df_blocks.strip()), _fields(df_inodes.strip())
    if inodes is not None and inodes[1] != "0" and inodes[3] == "0":  # btrfs and others report 0 of 0: no limit
        return f"the remote file system is out of inodes (no file can be created on {inodes[5]})"
    if blocks is None:
        return None
    free_kib = int(blocks[3])
    if free_kib * 1024 >= needed:
        return None
    return (f"the remote disk is full: {free_kib} KiB free on {blocks[5]} ({blocks[0]}), "
            f"{name} needs {max(1, -(-needed // 1024))} KiB")


async def explain_copy_failure(transport: Transport, remote_path: str, *, size: int,
                               also_remove: Sequence[str] = ()) -> str | None:
    """Remove what the failed copies left (``remote_path`` and ``also_remove``) and say whether a full disk is why
    (None: not that, or the host could not be asked)."""
    directory = posixpath.dirname(remote_path) or "."
    targets = " ".join(shlex.quote(path) for path in dict.fromkeys([remote_path, *also_remove]))
    where = shlex.quote(directory)
    script = f"rm -f -- {targets}; df -Pk -- {where} | tail -n 1; df -Pi -- {where} | tail -n 1"
    try:
        result = await transport.run(script, timeout=30)
    except (TransportError, OSError, asyncio.TimeoutError):
        return None  # the copy's own error is raised; this was only an explanation
    lines = result.stdout.splitlines()
    if result.exit_code != 0 or len(lines) < 2:
        return None
    return describe_full_disk(lines[-2], lines[-1], needed=size, name=posixpath.basename(remote_path))
