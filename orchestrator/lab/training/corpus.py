"""The lab's training corpus: the Python standard library's own .py files (ships with every Python; no downloads)."""

from __future__ import annotations

import sysconfig
from dataclasses import dataclass
from pathlib import Path

# Tests are repetitive and huge, idlelib is GUI glue: both skew the tiny model (lab-feasibility.md).
_EXCLUDED_PARTS = {"test", "tests", "idlelib", "site-packages", "dist-packages", "__pycache__", "lib2to3", "encodings"}


@dataclass(frozen=True)
class Corpus:
    train_text: str
    held_out: dict[str, str]  # relative path -> source, never trained on (prompts come from these)
    files: int


def stdlib_files(root: Path | None = None) -> list[Path]:
    """All stdlib .py files in a stable order, excluding tests and idlelib."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    found = [p for p in base.rglob("*.py") if not (_EXCLUDED_PARTS & set(p.relative_to(base).parts))]
    return sorted(found, key=lambda p: p.relative_to(base).as_posix())


def build_corpus(*, max_bytes: int = 4_000_000, held_out: int = 8, root: Path | None = None) -> Corpus:
    """Deterministic corpus: every 37th file (up to ``held_out``) is held out, the rest fill ``max_bytes``.

    :raises RuntimeError: when the standard library sources cannot be found (a Python without .py files).
    """
    base = Path(root or sysconfig.get_paths()["stdlib"])
    files = stdlib_files(base)
    if len(files) < 50:
        raise RuntimeError(f"found only {len(files)} .py files under {base}; the lab needs the Python "
                           "standard library sources")
    held: dict[str, str] = {}
    parts: list[str] = []
    size = 0
    used = 0
    for index, path in enumerate(files):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if index % 37 == 5 and len(held) < held_out and 2_000 < len(text) < 60_000:
            held[path.relative_to(base).as_posix()] = text
            continue
        if size >= max_bytes:
            continue
        parts.append(text)
        size += len(text)
        used += 1
    return Corpus(train_text="\n\n".join(parts), held_out=held, files=used)
