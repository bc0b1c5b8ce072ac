"""A benchmark's context ladder: a few prompts that grow towards the serving context, sent after the benchmark's own
requests and reported apart from them (``b.ladder``), so that acceptance by prompt length reaches the lengths
the server is configured for, not only the bundled prompts' (the longest is a few hundred tokens).

A fault that grows with position (a RoPE base or scaling the draft was not trained with, a training context shorter
than the serving one) shows on long prompts first; the benchmark's headline figures (tok/s, accept length and their
intervals) stay those of its own prompts, which the lab's calibration and every rule weigh.

The serving context: the server's resolved args (``context_length``, ``max_model_len``, ``max_seq_len``), else its
launch flags (``context-length``, ``max-model-len``), else the model's ``max_position_embeddings`` (config.json,
read on the server's host). The rungs are cut from the bundled prompts joined end to end, at lengths spread up to
the context less the generated tokens, in characters estimated from the tokens the server counted for the
benchmark's own prompts; a rung the estimate overshoots is answered with an error, counted and said, never fatal.

Public API: ``serving_context(record) -> (tokens, where) | (None, why)``, ``chars_per_token(prompts, rows)``,
``ladder_prompts(prompts, *, context, max_new_tokens, rungs, cpt, longest)``, ``run_ladder(...)``.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

from orchestrator.errors import OrchestratorError

#: the share of the budget the top rung aims at: the characters-per-token estimate is a mean, and a prompt a few
#: percent over the context is refused by the server
HEADROOM = 0.9
#: resolved (effective) arg names, then launch flag names, that hold the serving context
EFFECTIVE_KEYS = ("context_length", "max_model_len", "max_seq_len")
FLAG_KEYS = ("context-length", "context_length", "max-model-len", "max_model_len")


def _positive_int(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 and not isinstance(value, bool) else None


async def serving_context(record: Any) -> tuple[int | None, str]:
    """(the context in tokens, where it was read) or (None, why not)."""
    for key in EFFECTIVE_KEYS:
        found = _positive_int((record.effective or {}).get(key))
        if found:
            return found, f"the server's resolved {key}"
    flags = record.spec.flags or {}
    for key in FLAG_KEYS:
        found = _positive_int(flags.get(key))
        if found:
            return found, f"the launch flag {key}"
    path = f"{str(record.spec.model).rstrip('/')}/config.json"
    text = await record.transport.read_file_tail(path, lines=2000)
    try:
        config = json.loads(text)
    except ValueError:
        return None, f"no context in the server's args or flags, and {path} is not readable JSON"
    if not isinstance(config, dict):
        return None, f"no context in the server's args or flags, and {path} is not a JSON object"
    nested = config.get("text_config")  # a multimodal target nests its text config
    text_config: dict[str, Any] = nested if isinstance(nested, dict) else config
    found = _positive_int(text_config.get("max_position_embeddings"))
    if found:
        return found, f"max_position_embeddings in {path}"
    return None, f"no context in the server's args or flags, nor max_position_embeddings in {path}"


def chars_per_token(prompts: list[str], rows: list[dict[str, Any]]) -> float | None:
    """Characters per prompt token, as the server counted the benchmark's own prompts (request i sent prompt
    i % len(prompts))."""
    pairs = [(len(prompts[i % len(prompts)]), int(row["prompt_tokens"])) for i, row in enumerate(rows)
             if _positive_int(row.get("prompt_tokens"))]
    tokens = sum(t for _c, t in pairs)
    return sum(c for c, _t in pairs) / tokens if tokens else None


def ladder_prompts(prompts: list[str], *, context: int, max_new_tokens: int, rungs: int, cpt: float,
                   longest: int) -> list[tuple[int, str]]:
    """(the tokens aimed at, the prompt) per rung: evenly spread from above the longest bundled prompt
    (``longest`` tokens) to HEADROOM of the budget the generation leaves; none when that budget is no longer."""
    top = int((context - max_new_tokens) * HEADROOM)
    if top <= longest or not prompts:
        return []
    aims = [longest + (top - longest) * (j + 1) // rungs for j in range(rungs)]
    joined = "\n\n".join(prompts)
    need = int(max(aims) * cpt) + 1
    text = (joined + "\n\n") * (need // (len(joined) + 2) + 1)
    out = []
    for aim in aims:
        cut = text[:int(aim * cpt)]
        space = cut.rfind(" ")
        out.append((aim, cut[:space] if space > len(cut) // 2 else cut))
    return out


async def run_ladder(client: Any, url: str, record: Any, settings: Any, prompts: list[str], result: dict[str, Any],
                     rungs: int) -> dict[str, Any]:
    """Send the rungs (one at a time, the benchmark's sampling, ``ladder_tokens`` new tokens each, else its
    max_new_tokens) and say what they measured."""
    context, where = await serving_context(record)
    if context is None:
        return {"skipped": where}
    rows = result.get("per_request") or []
    cpt = chars_per_token(prompts, rows)
    if cpt is None:
        return {"context": context, "context_from": where,
                "skipped": "the server counted no prompt tokens, so no rung length can be estimated"}
    longest = max(_positive_int(r.get("prompt_tokens")) or 0 for r in rows)
    tokens = settings.ladder_tokens or settings.max_new_tokens
    planned = ladder_prompts(prompts, context=context, max_new_tokens=tokens, rungs=rungs, cpt=cpt, longest=longest)
    if not planned:
        return {"context": context, "context_from": where,
                "skipped": f"the bundled prompts ({longest} tokens) already reach the context less the generation"}
    texts = [text for _aim, text in planned]
    try:
        sent = await client.call("bench", {
            "url": url.rstrip("/"), "prompts": texts, "n": len(texts), "concurrency": 1,
            "max_new_tokens": tokens, "temperature": settings.temperature, "stream": False,
            "ignore_eos": settings.ignore_eos, "flush": False, "timeout": settings.request_timeout,
        }, timeout=settings.request_timeout * len(texts) + 120)
    except OrchestratorError as exc:  # the benchmark's own figures stand; the ladder says why it has none
        return {"context": context, "context_from": where, "skipped": f"the ladder's requests failed: {exc.message}"}
    per_request = sent.get("per_request") or []
    accepts = [r.get("accept_length") for r in per_request if r.get("accept_length") is not None]
    return {"context": context, "context_from": where, "chars_per_token": round(cpt, 3),
            "aimed_tokens": [aim for aim, _text in planned], "max_new_tokens": tokens, "prompts": texts,
            "per_request": per_request,
            "completed": sent.get("completed", len(per_request)), "errors": sent.get("errors") or [],
            "accept_length": round(statistics.mean(accepts), 4) if accepts else None}


def ladder_line(label: str, ladder: dict[str, Any]) -> str:
    """The console's line for a ladder (the TUI and MCP show the step's output)."""
    if ladder.get("skipped"):
        return f"bench {label}: no context ladder: {ladder['skipped']}\n"
    rungs = ", ".join(f"{r.get('prompt_tokens')} tok -> accept {r.get('accept_length')}"
                      for r in ladder.get("per_request") or [])
    errors = ladder.get("errors") or []
    return (f"bench {label}: context ladder up to {ladder['context']} tokens ({ladder['context_from']}): {rungs}"
            + (f"; {len(errors)} rung(s) failed: {errors[0]}" if errors else "") + "\n")
