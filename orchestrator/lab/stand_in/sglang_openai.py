"""The lab SGLang stand-in's OpenAI-compatible routes (``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``),
in SGLang's shapes (srt/entrypoints/openai): what a traffic file is replayed through (orchestrator/traffic/).

SGLang answers these with no per-request speculative stats up to 0.5.15.post1 (its OpenAI protocol has no field for
them) and, from the 0.5.23 tree on, with ``sglext.spec_tokens_details`` at the response's level when the request
asks ``return_spec_tokens_details: true`` (protocol.py ``SglExt``; serving_completions.py and serving_chat.py build
it from the request's meta_info). The lab follows the version it stands in for. The chat template is
``--chat-template`` (a Jinja file), else the tokenizer's. A request's penalties are served by SGLang's own "relaxed"
rule in speculative decoding (remote_probes/evaluation/penalties.py ``RULES["sglang"]``). A request that samples
(temperature > 0, or none written: 1.0) is sampled as SGLang on CUDA verifies a chain or a draft tree (``sampling``;
remote_probes/evaluation/decoding.py: its target-only kernel, with ``--speculative-accept-threshold-single/-acc``).
Deviations, all visible, each a "lab (NOT SGLang)" 400 rather than a figure that is not SGLang's: a sampled request
with ``--speculative-use-rejection-sampling`` (the draft's own probabilities), or with a min_p on a speculative server
(SGLang's verify leaves min_p out, its first token does not).
"""

from __future__ import annotations

import math
import time
import uuid
from pathlib import Path
from typing import Any

from remote_probes.evaluation.penalties import NONE as NO_PENALTIES
from remote_probes.evaluation.penalties import RULES, Penalties

#: the first SGLang tree read here whose OpenAI answers carry per-request speculative stats (SglExt)
SPEC_DETAILS_FROM = (0, 5, 23)


class OpenAIRequestError(Exception):
    """A request SGLang (or the lab) answers with 400 and ``{"object": "error", "message": ...}``."""


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def spec_details_served(version: str) -> bool:
    return _version(version) >= SPEC_DETAILS_FROM


def greedy_options(body: dict[str, Any], engine: str, error: type[Exception],
                   max_tokens_said: str = "max_tokens must be positive", penalties: bool = False,
                   samples: bool = False) -> dict[str, Any]:
    """The generation options of an OpenAI body, for either stand-in (``engine`` names it in the refusals, ``error``
    is its 400). ``penalties``: a request's penalties are applied as the engine does (``opts["penalties"]``,
    remote_probes/evaluation/penalties.py), else refused. ``samples``: a temperature > 0 (none written: the engine's
    default, 1.0 for the lab's target, whose generation_config sets none) is sampled as vLLM's rejection sampler
    does (remote_probes/evaluation/decoding.py; ``seed`` kept; the caller adds top-k/top-p/min-p: vllm_sampling.py);
    else a request that samples is refused, never served greedily in its place (module doc)."""
    temperature = body.get("temperature")
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
                                    or temperature < 0):
        raise error(f"temperature must be a non-negative number, got {temperature!r}")
    sampled = temperature is None or temperature > 0
    if sampled and not samples:
        said = f"no temperature ({engine}'s default: 1.0)" if temperature is None else f"temperature {temperature}"
        raise error(f"lab (NOT {engine}): the lab's {engine} stand-in decodes greedily only; this request "
                    f"samples ({said}): give temperature 0, or replay it on a real {engine}")
    asked = Penalties.from_body(body, error, RULES[engine.lower()])
    if not penalties:
        for name, value in (("frequency_penalty", asked.frequency), ("presence_penalty", asked.presence),
                            ("repetition_penalty", asked.repetition != 1.0)):
            if value:
                raise error(f"lab (NOT {engine}): the lab's {engine} stand-in applies no {name}")
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens", 16))
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise error(max_tokens_said)
    stop = body.get("stop") or []
    seed = body.get("seed")
    return {"max_new_tokens": max_tokens, "stop": [stop] if isinstance(stop, str) else list(stop),
            "stop_token_ids": list(body.get("stop_token_ids") or []), "ignore_eos": bool(body.get("ignore_eos")),
            "temperature": (1.0 if temperature is None else float(temperature)) if sampled else 0.0,
            "seed": int(seed) if isinstance(seed, int) and not isinstance(seed, bool) else None,
            "penalties": asked if penalties else NO_PENALTIES, "rule": RULES[engine.lower()]}


def options(body: dict[str, Any]) -> dict[str, Any]:
    """SGLang's stand-in's options (``greedy_options``): penalties served by SGLang's rule, a sampled request with
    its top-k, top-p and min-p as SGLang takes them (``sampling``)."""
    opts = greedy_options(body, "SGLang", OpenAIRequestError, penalties=True, samples=True)
    return {**opts, **sampling(body, opts["temperature"], OpenAIRequestError)}


def number_field(body: dict[str, Any], name: str, default: float, error: type[Exception]) -> float:
    """``body[name]`` as a finite float (``default`` when absent), else ``error`` naming it (both stand-ins)."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise error(f"{name} must be a number, got {value!r}")
    return float(value)


def sampling(body: dict[str, Any], temperature: float, error: type[Exception]) -> dict[str, Any]:
    """``{"top_k", "top_p", "min_p"}`` as SGLang's sampling_params.py takes them: checked with its ``verify``
    messages, top_k -1 (every token, as 0 in decoding.py) unless given, and a temperature below its _SAMPLING_EPS
    (1e-6) greedy (``normalize``: top_k 1)."""
    top_p = number_field(body, "top_p", 1.0, error)
    min_p = number_field(body, "min_p", 0.0, error)
    top_k = body.get("top_k")
    top_k = -1 if top_k is None else top_k
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise error(f"top_k must be an integer, got {type(top_k).__name__}")
    if not 0.0 < top_p <= 1.0:
        raise error(f"top_p must be in (0, 1], got {top_p}.")
    if not 0.0 <= min_p <= 1.0:
        raise error(f"min_p must be in [0, 1], got {min_p}.")
    if top_k < 1 and top_k != -1:
        raise error(f"top_k must be -1 (disable) or at least 1, got {top_k}.")
    if temperature < 1e-6:
        return {"top_k": 0, "top_p": 1.0, "min_p": 0.0}
    return {"top_k": 0 if top_k == -1 else top_k, "top_p": top_p, "min_p": min_p}


def speculative_sampling(opts: dict[str, Any], args: Any, error: type[Exception]) -> dict[str, float]:
    """SGLang's acceptance thresholds for a sampled request on a speculative server (``{}`` otherwise), or the
    lab's refusal of what it does not model (module doc): rejection sampling, a min_p."""
    if not opts["temperature"] or not args.speculative_algorithm:
        return {}
    parsed = args.parsed or {}
    if parsed.get("speculative_use_rejection_sampling"):
        raise error("lab (NOT SGLang): --speculative-use-rejection-sampling verifies with the draft's own "
                    "probabilities, which the lab does not model: replay it on a real SGLang")
    if opts["min_p"] > 0:
        raise error("lab (NOT SGLang): SGLang's speculative verify leaves min_p out (its first token keeps it), "
                    "which the lab does not model: give min_p 0, or replay it on a real SGLang")
    return {"threshold_single": float(parsed.get("speculative_accept_threshold_single", 1.0)),
            "threshold_acc": float(parsed.get("speculative_accept_threshold_acc", 1.0))}


def chat_prompt(tokenizer: Any, chat_template: str | None, body: dict[str, Any]) -> list[int]:
    """The messages through the chat template, as token ids (the template's own special tokens, none added)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAIRequestError("messages must be a non-empty list")
    template = None
    if chat_template:
        path = Path(chat_template).expanduser()
        if not path.is_file():
            raise OpenAIRequestError(f"lab (NOT SGLang): --chat-template {chat_template}: the lab reads a Jinja file "
                                     "only (SGLang's built-in template names are not served)")
        template = path.read_text(encoding="utf-8")
    template = template or getattr(tokenizer, "chat_template", None)
    if not template:
        raise OpenAIRequestError("lab (NOT SGLang): the tokenizer has no chat template; give --chat-template FILE")
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise OpenAIRequestError("chat_template_kwargs must be an object")
    try:
        text = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False,
                                             add_generation_prompt=True, **kwargs)
    except Exception as exc:  # noqa: BLE001 - a template that fails is the request's error
        raise OpenAIRequestError(f"the chat template failed: {type(exc).__name__}: {exc}") from None
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def answer(kind: str, model: str, text: str, meta: dict[str, Any], version: str,
           want_spec: bool) -> dict[str, Any]:
    """A completion or chat answer in SGLang's shape; ``sglext.spec_tokens_details`` where the version serves it
    and the request asked."""
    finish = meta.get("finish_reason") or {}
    reason = finish.get("type") if isinstance(finish, dict) else finish
    usage = {"prompt_tokens": meta.get("prompt_tokens", 0), "completion_tokens": meta.get("completion_tokens", 0),
             "total_tokens": int(meta.get("prompt_tokens", 0)) + int(meta.get("completion_tokens", 0))}
    if kind == "chat":
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text,
                                                          "reasoning_content": None, "tool_calls": None},
                                  "logprobs": None, "finish_reason": reason, "matched_stop": None}
        doc: dict[str, Any] = {"id": meta.get("id") or uuid.uuid4().hex, "object": "chat.completion"}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason, "matched_stop": None}
        doc = {"id": meta.get("id") or uuid.uuid4().hex, "object": "text_completion"}
    doc.update({"created": int(time.time()), "model": model, "choices": [choice], "usage": usage,
                "metadata": {"weight_version": "default"}})
    if want_spec and spec_details_served(version) and meta.get("spec_verify_ct"):
        doc["sglext"] = {"spec_tokens_details": {
            key: meta.get(key, 0) for key in ("spec_accept_rate", "spec_accept_length", "spec_num_correct_drafts",
                                              "spec_num_proposed_drafts", "spec_verify_ct")}
            | {"spec_correct_drafts_histogram": list(meta.get("spec_correct_drafts_histogram") or [])}}
    return doc
