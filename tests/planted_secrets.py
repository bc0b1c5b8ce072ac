"""Every secret a test plants, and the one scan that proves none leaked (issue 19).

A test that runs a session with a secret takes the value from here. At the end of the pytest run, the
session-scoped fixture in tests/conftest.py scans every artifact the tests left (each session directory
under pytest's temporary root: events.jsonl, outputs/, report.md/html, artifacts/, TUI screenshots saved
there; every exported .tar.gz, member by member; the committed TUI snapshots) and fails on any hit.

Two tiers:
- ``NEVER_WRITTEN``: values the run itself knows are secret (secret vars, secret-named env): they must not
  reach any file at all.
- ``NEVER_EXPORTED``: values the run cannot know are secret (a token printed by a command, a credential in
  the shape of one): the session log may hold them, an export must not.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

# tests/core/test_redaction.py
INLINE = "inline-s3cret-4f8a9c1d"
FROM_ENV = "fromenv-s3cret-77e2b0aa"
HF = "hf_tokenvalue_9d8c7b6a5f"
API = "apikey-value-31337-zz"
# tests/servers/test_api_key.py
SERVER_API_KEY = "sk-lab-7f3a9c2e41d8b6"
# tests/reliability (export, TUI, crash, fuzz)
SHARE_VAR = "share-s3cret-0b7e6f5d4c"
SHARE_ENV = "sharenv-s3cret-a1b2c3d4e5"
TUI_VAR = "tui-s3cret-9a8b7c6d5e"

NEVER_WRITTEN = (INLINE, FROM_ENV, HF, API, SERVER_API_KEY, SHARE_VAR, SHARE_ENV, TUI_VAR)

# A token a command prints: the run does not know it is one; its shape gives it away on export.
PRINTED_HF_TOKEN = "hf_" + "Q7rT2mXw9LpZ4vKc8NbY1sHd6FgJ3aUe5o"
# A secret-named variable of the exporter's own shell, printed by a step that was not given it as env.
EXPORTER_SHELL_TOKEN = "shell-token-6c5d4e3f2a1b"

NEVER_EXPORTED = (*NEVER_WRITTEN, PRINTED_HF_TOKEN, EXPORTER_SHELL_TOKEN)

# The committed TUI snapshots are artifacts of test sessions too.
SNAPSHOTS = Path(__file__).resolve().parent / "tui" / "__snapshots__"


@dataclass(frozen=True)
class Leak:
    where: str
    secret: str

    def __str__(self) -> str:
        return f"{self.secret!r} in {self.where}"


def _hits(data: bytes, where: str, secrets: Iterable[str]) -> Iterator[Leak]:
    for secret in secrets:
        # The secret itself, or a recognisable head of it (one split across two output chunks).
        if secret.encode() in data or secret[:10].encode() in data:
            yield Leak(where, secret)


def scan_session_dir(directory: Path, secrets: Iterable[str] = NEVER_WRITTEN) -> list[Leak]:
    """Every file of one session directory, binary or not (an SVG screenshot, a PNG chart)."""
    secrets = tuple(secrets)
    leaks: list[Leak] = []
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            leaks.extend(_hits(path.read_bytes(), str(path), secrets))
    return leaks


def scan_archive(path: Path, secrets: Iterable[str] = NEVER_EXPORTED) -> list[Leak]:
    """Every member of an exported .tar.gz (and its manifest)."""
    secrets = tuple(secrets)
    leaks: list[Leak] = []
    with tarfile.open(path, "r:*") as tar:
        for member in tar.getmembers():
            handle = tar.extractfile(member) if member.isfile() else None
            if handle is not None:
                leaks.extend(_hits(handle.read(), f"{path}!{member.name}", secrets))
    return leaks


def scan_everything(root: Path, snapshots: Path = SNAPSHOTS) -> tuple[list[Leak], dict[str, int]]:
    """All test-session artifacts under ``root`` and the committed snapshots: (leaks, what was scanned)."""
    leaks: list[Leak] = []
    counts = {"sessions": 0, "archives": 0, "snapshots": 0}
    if root.is_dir():
        for log in sorted(root.rglob("events.jsonl")):
            counts["sessions"] += 1
            leaks.extend(scan_session_dir(log.parent))
        for archive in sorted([*root.rglob("*.tar.gz"), *root.rglob("*.tgz")]):
            counts["archives"] += 1
            try:
                leaks.extend(scan_archive(archive))
            except (tarfile.TarError, EOFError, OSError):
                pass  # a deliberately broken archive (tests/reliability/test_session_share.py)
        for shot in sorted(root.rglob("*.screenshot.svg")):
            counts["snapshots"] += 1
            leaks.extend(_hits(shot.read_bytes(), str(shot), NEVER_WRITTEN))
    for shot in sorted(snapshots.rglob("*.svg")) if snapshots.is_dir() else []:
        counts["snapshots"] += 1
        leaks.extend(_hits(shot.read_bytes(), str(shot), NEVER_WRITTEN))
    return leaks, counts
