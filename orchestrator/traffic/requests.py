"""A traffic file: the user's own requests, one JSON object per line, as their logs hold them.

A line is one of
- an OpenAI request body: ``{"messages": [...], ...}`` (chat) or ``{"prompt": "...", ...}`` (completion);
- an OpenAI batch-API line: ``{"custom_id", "method", "url": "/v1/chat/completions", "body": {...}}``;
- a log record: ``{"request": {...}, "response"?: {...}}``.
Its category is the line's ``category`` (beside the body or in it), else ``metadata.category``, else "uncategorized".
Empty lines and lines starting with ``#`` are skipped.

The body is sent as written, except what cannot be: ``model`` is the name the server under test serves (the logged
one named a production deployment), ``stream`` is off (the benchmark reads whole answers), ``category`` is ours; a
request without ``max_tokens`` gets the benchmark's (a replay is bounded). What a request sets for sampling is read
into ``sampling`` (the setting its acceptance is grouped by); a request that sets none gets the server's defaults,
and is grouped as such.

Prompts may be private: the loaded requests keep their text for sending only; what reaches a session is the
categories, the settings and the figures (``TrafficRequest.public``).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from orchestrator.errors import UserInputError

CHAT_PATH, COMPLETION_PATH = "/v1/chat/completions", "/v1/completions"
UNCATEGORIZED = "uncategorized"
#: the request fields that choose how tokens are sampled (OpenAI's and the engines' extensions), in label order; a
#: ``seed`` is sent as written but groups nothing (each request's own draw, not a setting)
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty",
                   "repetition_penalty")
#: the fields that switch a chat template's parts (a thinking suffix): grouped like sampling, sent as written
TEMPLATE_FIELDS = ("chat_template_kwargs",)
#: fields the replay sets itself, whatever the line says
REPLACED = ("model", "stream", "stream_options")


class TrafficRequest(BaseModel):
    """One request of the file: where it goes, its body as sent, and what it is grouped by."""

    model_config = ConfigDict(frozen=True)

    line: int
    kind: Literal["chat", "completion"]
    body: dict[str, Any]
    category: str
    sampling: str          # e.g. "temperature=0.7 top_p=0.9", or "server defaults"

    @property
    def path(self) -> str:
        return CHAT_PATH if self.kind == "chat" else COMPLETION_PATH

    def public(self) -> dict[str, Any]:
        """What a session may record: no prompt, no message."""
        return {"line": self.line, "kind": self.kind, "category": self.category, "sampling": self.sampling,
                "max_tokens": self.body.get("max_tokens")}

    def sent(self, model: str | None, max_tokens: int) -> dict[str, Any]:
        """The body the server gets: as written, with the served model's name and no streaming; a request that
        did not bound its answer is bounded at the benchmark's ``max_tokens``."""
        body = {k: v for k, v in self.body.items() if k not in REPLACED}
        if model is not None:
            body["model"] = model
        if "max_tokens" not in body and "max_completion_tokens" not in body:
            body["max_tokens"] = max_tokens
        body["stream"] = False
        return body


def sampling_label(body: dict[str, Any]) -> str:
    """The request's sampling setting as written: the fields it sets, in a fixed order; "server defaults" when it
    sets none (each engine then applies the model's generation_config, or its own defaults)."""
    parts = [f"{name}={body[name]:g}" if isinstance(body[name], (int, float)) and not isinstance(body[name], bool)
             else f"{name}={json.dumps(body[name], sort_keys=True)}"
             for name in SAMPLING_FIELDS + TEMPLATE_FIELDS if body.get(name) is not None]
    return " ".join(parts) if parts else "server defaults"


def _where(path: Path, line: int, col: int = 1) -> str:
    return f"{path}:{line}:{col}"


def _request_of(path: Path, number: int, record: dict[str, Any]) -> TrafficRequest:
    place = _where(path, number)
    category = record.get("category")
    body: Any = record
    url = None
    if isinstance(record.get("body"), dict):          # batch-API line
        body, url = record["body"], record.get("url")
    elif isinstance(record.get("request"), dict):     # a log record
        body = record["request"]
    body = {k: v for k, v in body.items() if k != "category"} if isinstance(body, dict) else body
    if category is None and isinstance(body, dict):
        inner = record.get("body", record.get("request", {}))
        category = inner.get("category") if isinstance(inner, dict) else None
        meta = body.get("metadata")
        if category is None and isinstance(meta, dict):
            category = meta.get("category")
    if category is not None and (not isinstance(category, str) or not category.strip()):
        raise UserInputError(f"{place}: category must be a non-empty string, got {json.dumps(category)}")
    messages, prompt = body.get("messages"), body.get("prompt")
    if (messages is None) == (prompt is None):
        raise UserInputError(f"{place}: a request needs either messages (chat) or prompt (completion)"
                             + (", not both" if messages is not None else ""))
    kind: Literal["chat", "completion"] = "chat" if messages is not None else "completion"
    if url is not None and url not in (CHAT_PATH, COMPLETION_PATH):
        raise UserInputError(f"{place}: url {url!r}: a traffic file replays {CHAT_PATH} and {COMPLETION_PATH}")
    if url is not None and url != (CHAT_PATH if kind == "chat" else COMPLETION_PATH):
        raise UserInputError(f"{place}: url {url} does not take {'messages' if kind == 'chat' else 'a prompt'}")
    if kind == "chat" and not (isinstance(messages, list) and messages
                               and all(isinstance(m, dict) and "role" in m for m in messages)):
        raise UserInputError(f"{place}: messages must be a non-empty list of {{role, content}} objects")
    if kind == "completion" and not (isinstance(prompt, str) and prompt):
        raise UserInputError(f"{place}: prompt must be a non-empty string (one prompt per request)")
    for name in (*SAMPLING_FIELDS, "seed"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise UserInputError(f"{place}: {name} must be a number, got {json.dumps(value)}")
    tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        raise UserInputError(f"{place}: max_tokens must be a positive integer, got {json.dumps(tokens)}")
    return TrafficRequest(line=number, kind=kind, body=body, category=(category or UNCATEGORIZED).strip(),
                          sampling=sampling_label(body))


def load_traffic(path: str | Path, *, sample: int | None = None, seed: int = 0) -> list[TrafficRequest]:
    """Every request of the file, in order; ``sample``: that many, drawn without replacement with ``seed`` (the
    same sample on every run), kept in file order.

    :raises UserInputError: naming the file, line and column of the first line that is not a request.
    """
    source = Path(path).expanduser()
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserInputError(f"traffic: cannot read {source}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UserInputError(f"traffic: {source} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    requests = []
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise UserInputError(f"{_where(source, number, exc.colno)}: not JSON: {exc.msg}") from None
        if not isinstance(record, dict):
            raise UserInputError(f"{_where(source, number)}: a line must be a JSON object (a request)")
        requests.append(_request_of(source, number, record))
    if not requests:
        raise UserInputError(f"traffic: {source} holds no request")
    if sample is not None and sample < len(requests):
        if sample < 1:
            raise UserInputError(f"traffic: a sample must hold at least one request, got {sample}")
        chosen = sorted(random.Random(seed).sample(range(len(requests)), sample))
        requests = [requests[i] for i in chosen]
    return requests
