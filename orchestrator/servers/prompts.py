"""The prompts a benchmark sends a server: the bundled set (orchestrator/data/bench_prompts.json) or a user's file.

Shared by the `bench` step kind and the lab's calibration (which must not import a step kind)."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.errors import UserInputError

BUNDLED_PROMPTS = Path(__file__).resolve().parent.parent / "data" / "bench_prompts.json"


def load_prompts(path: str | None) -> list[str]:
    """:raises UserInputError: naming the file when it is missing or not a prompt list."""
    source = Path(path).expanduser() if path else BUNDLED_PROMPTS
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserInputError(f"prompts: cannot read {source}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UserInputError(f"prompts: {source} is not JSON: {exc}") from None
    items = data.get("prompts") if isinstance(data, dict) else data
    prompts = [p.get("text") if isinstance(p, dict) else p for p in items] if isinstance(items, list) else None
    texts = [p for p in prompts or [] if isinstance(p, str) and p]
    if not prompts or len(texts) != len(prompts):
        raise UserInputError(f"prompts: {source} must hold a non-empty list of strings or of {{text: ...}}")
    return texts
