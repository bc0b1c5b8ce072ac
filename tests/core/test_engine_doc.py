"""docs/adding-an-engine.md lists every file an inference engine touches: each path it names exists, and every
orchestrator or remote_probes module that names vLLM is listed (a new vLLM file without a line there fails)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "adding-an-engine.md"


def _listed() -> set[str]:
    text = DOC.read_text()
    found: set[str] = set()
    for cell in re.findall(r"`([^`]+)`", text):
        for part in (p.strip() for p in cell.split(",")):
            if re.fullmatch(r"[\w./-]+\.(py|yaml|log|md)|\.ci/run", part):
                found.add(part)
    return found


def _expand(listed: set[str]) -> set[str]:
    """``lab/stand_in/vllm_http.py`` after ``orchestrator/lab/stand_in/vllm_server.py`` in one cell: relative to the first's root."""
    paths = set()
    for name in listed:
        for root in ("", "orchestrator/", "remote_probes/", "tests/servers/", "tests/probes/", "tests/lab/"):
            if (ROOT / root / name).exists():
                paths.add(f"{root}{name}")
                break
        else:
            paths.add(name)
    return paths


def test_every_listed_file_exists() -> None:
    missing = sorted(p for p in _expand(_listed()) if not (ROOT / p).exists() and "*" not in p and "<" not in p)
    assert missing == []


def test_every_module_that_names_vllm_is_listed() -> None:
    listed = _expand(_listed())
    naming = sorted(str(p.relative_to(ROOT)) for base in ("orchestrator", "remote_probes") for p in (ROOT / base).rglob("*.py")
                    if re.search(r"vllm", p.read_text(), re.I))
    assert [p for p in naming if p not in listed] == []
