"""A user's traffic replayed offline as the engine serves it (issue 40): the reconcile's side of a traffic file.

Each request (the body a benchmark sent: ``prompt`` or ``messages``, its ``max_tokens``, its sampling fields) is
tokenised as the server does: a completion's prompt with the tokenizer's special tokens, a chat request through
the chat template the server applies (its ``--chat-template`` file, else the tokenizer's), with the request's
``chat_template_kwargs`` and the generation prompt, tokenised without special tokens (vLLM's renderer, SGLang's
serving_chat). The target then generates greedily with the request's penalties applied to its logits as vLLM
applies them (penalties.py), and one forward captures the hidden states the drafts need. A request that samples
(temperature > 0, or none written: the target's generation_config temperature, else 1.0) cannot be predicted from
one generation, since what is served depends on the draws; nor can a penalised request on SGLang, whose relaxed
penalty (penalties.py ``RULES["sglang"]``) feeds one token per verify cycle. Those are served again offline, cycle
by cycle, by each configuration's draft (spec_simulation.py: vLLM's rejection rule; one draw per request, its
``seed`` else its index), its top-k and top-p cutting the target's distribution as vLLM's do (decoding.py), and on
SGLang its chain or draft tree verified by SGLang's target-only rule with the server's acceptance thresholds. Not
modelled, and
counted in ``skipped`` with the reason: on vLLM a sampled request with a min_p or a logit_bias, which a speculative
vLLM refuses (sampling_params.py ``_validate_spec_decode``); on SGLang a logit_bias, and a sampled request with
rejection sampling or with a min_p (its verify leaves min_p out).

``penalised_proposals`` is the counterfactual of the engine change that would mend a penalty's cost: the draft's
logits penalised with the same output so far as the target's, before its argmax.

A chat request item's ``without_template`` (true) asks for a second replay of a greedy request without its chat
template (``untemplated_run``): its messages' text alone, as a completion's prompt. What the draft loses to a template
it never learned (a thinking suffix, a chat format its training data did not use) comes back there.

A chat request item's ``thinking_off`` (true) asks for a replay of a greedy request with its template's thinking
switched off (``thinking_off_run``: ``chat_template_kwargs`` with the first of ``THINKING_SWITCHES`` false that renders
otherwise, named in ``thinking_switch``): what the draft loses to the thinking suffix alone, the template's other
parts kept; a template with no such switch gives none.

A request item's ``keep_last`` (a positive int) asks for a second replay of a greedy request with its prompt cut to
its last ``keep_last`` tokens (``cut_run``): the same request at a shorter context, which tells what a category of
long prompts owes to its length from what it owes to its content (the orchestrator asks it for a category below
the best-served one whose prompts are longer, cut to the best one's mean length).

Public API: ``parse_requests(raw)``, ``capture_traffic(torch, tokenizer, model, requests, a, needed)``,
``penalised_proposals(torch, draft, outs, seq, prompt_len, penalties)``.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

from remote_probes.agent.protocol import ProbeFailure, progress
from remote_probes.evaluation.penalties import Penalties


def parse_requests(raw: Any) -> List[Dict[str, Any]]:
    """``[{"body": {...}}, ...]``: each the body a benchmark sent (``prompt`` or ``messages``)."""
    if not isinstance(raw, list) or not raw:
        raise ProbeFailure("bad_args", "requests must be a non-empty list of {body}", field="requests")
    out = []
    for i, item in enumerate(raw):
        body = item.get("body") if isinstance(item, dict) else None
        if not isinstance(body, dict) or (body.get("prompt") is None) == (body.get("messages") is None):
            raise ProbeFailure("bad_args", "requests[%d] needs a body with a prompt or messages" % i, field="requests")
        tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise ProbeFailure("bad_args", "requests[%d].body.max_tokens must be a positive integer" % i,
                               field="requests")

        class _Bad(Exception):
            pass

        try:
            penalties = Penalties.from_body(body, _Bad)
        except _Bad as exc:
            raise ProbeFailure("bad_args", "requests[%d]: %s" % (i, exc), field="requests") from None
        temperature = body.get("temperature")
        sampled = temperature is None or (isinstance(temperature, (int, float)) and temperature > 0)
        keep = item.get("keep_last")
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise ProbeFailure("bad_args", "requests[%d].keep_last must be a positive integer" % i, field="requests")
        bare, thinking = item.get("without_template", False), item.get("thinking_off", False)
        for name, flag in (("without_template", bare), ("thinking_off", thinking)):
            if not isinstance(flag, bool):
                raise ProbeFailure("bad_args", "requests[%d].%s must be true or false" % (i, name), field="requests")
        out.append({"body": body, "max_tokens": tokens, "penalties": penalties, "sampled": sampled,
                    "temperature": temperature, "seed": body.get("seed"), "keep_last": keep,
                    "without_template": bare and body.get("messages") is not None,
                    "thinking_off": thinking and body.get("messages") is not None, **_filters(body, i)})
    return out


def _filters(body: Dict[str, Any], i: int) -> Dict[str, Any]:
    """The request's top_k, top_p and min_p (None where it writes none: the target's defaults then apply)."""
    out: Dict[str, Any] = {}
    for name, kind in (("top_k", int), ("top_p", float), ("min_p", float)):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or (kind is int and not isinstance(value, int))):
            raise ProbeFailure("bad_args", "requests[%d].body.%s must be a%s number, got %r"
                               % (i, name, "n integer" if kind is int else "", value), field="requests")
        out[name] = value
    return out


def generation_defaults(target: str) -> Dict[str, float]:
    """What an engine samples a request at for the fields it writes none of: the target's generation_config's
    temperature, top_k, top_p and min_p, else 1.0, 0 (all), 1.0 and 0 (vLLM's ``--generation-config auto``)."""
    import json

    out = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    try:
        with open(os.path.join(target, "generation_config.json"), encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError):
        return out
    for name in out:
        value = config.get(name) if isinstance(config, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = int(value) if name == "top_k" else float(value)
    return out


def sampling_of(req: Dict[str, Any], defaults: Dict[str, float], index: int, engine: str,
                thresholds: Optional[Dict[str, float]] = None) -> Any:
    """The request's ``Decoding`` as the engine of ``engine`` serves it: its temperature, top-k and top-p (each the
    target's default where it writes none; all neutral when it decodes greedily), penalties, a seed (its own, else
    its index), and SGLang's acceptance ``thresholds`` (``{"single", "acc"}``, the server's
    ``--speculative-accept-threshold-*``; 1.0 each where it gives none)."""
    from remote_probes.evaluation.decoding import Decoding
    from remote_probes.evaluation.penalties import RULES

    def pick(name: str) -> Any:
        return defaults[name] if req[name] is None else req[name]

    seed = req["seed"] if isinstance(req["seed"], int) and not isinstance(req["seed"], bool) else index
    rule = RULES.get(engine, RULES["vllm"])
    if not req["sampled"]:
        return Decoding(req["penalties"], rule, 0.0, seed)
    given = thresholds or {}
    return Decoding(req["penalties"], rule, float(pick("temperature")), seed, int(pick("top_k")),
                    float(pick("top_p")), threshold_single=float(given.get("single", 1.0)),
                    threshold_acc=float(given.get("acc", 1.0)))


#: vLLM's _SAMPLING_EPS: a min_p above it is one a speculative vLLM refuses
SAMPLING_EPS = 1e-5


def how_replayed(req: Dict[str, Any], engine: str, defaults: Optional[Dict[str, float]] = None,
                 configs: Optional[List[Dict[str, Any]]] = None) -> Tuple[str, str]:
    """("capture", "") for a request one greedy generation predicts; ("simulate", "") for one whose served tokens
    depend on the draws or the cycles (spec_simulation.py); ("skip", why) for one not modelled (``defaults``: the
    target's generation_defaults, whose min_p a request writing none is served with; ``configs``: the served
    configurations, whose rejection sampling SGLang samples otherwise)."""
    body = req["body"]
    min_p = req.get("min_p")
    min_p = (defaults or {}).get("min_p", 0.0) if min_p is None else min_p
    if engine == "sglang" and body.get("logit_bias"):
        return "skip", ("has a logit_bias, which SGLang adds to the target's logits in verification "
                        "(eagle_utils.py) and the offline replay does not")
    if req["sampled"] and engine == "sglang":
        if any(c.get("rejection_sampling") for c in configs or []):
            return "skip", ("samples with --speculative-use-rejection-sampling, which verifies with the draft's own "
                            "probabilities: not modelled")
        if min_p > SAMPLING_EPS:
            return "skip", ("samples with min_p=%g, which SGLang's speculative verify leaves out (its first token "
                            "keeps it): not modelled" % min_p)
        return "simulate", ""
    if req["sampled"]:
        if min_p > SAMPLING_EPS or body.get("logit_bias"):
            return "skip", ("samples with %s, which a speculative vLLM refuses (sampling_params.py "
                            "_validate_spec_decode: \"not yet supported with speculative decoding\")"
                            % ("min_p=%g" % min_p if min_p > SAMPLING_EPS else "a logit_bias"))
        return "simulate", ""
    if engine == "sglang" and not req["penalties"].neutral:
        return "simulate", ""
    return "capture", ""


def _template(tokenizer: Any, path: Optional[str]) -> Optional[str]:
    if path:
        if not os.path.isfile(path):
            raise ProbeFailure("bad_args", "chat_template %s is not a file on this host" % path, field="chat_template")
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    return getattr(tokenizer, "chat_template", None) or None


def encode(tokenizer: Any, body: Dict[str, Any], template: Optional[str]) -> List[int]:
    """The request's prompt ids as the server builds them."""
    if body.get("prompt") is not None:
        return list(tokenizer(body["prompt"])["input_ids"])
    if not template:
        raise ProbeFailure("bad_args", "a chat request needs a chat template: the server's --chat-template or the "
                           "tokenizer's (it has none)", field="chat_template")
    kwargs = body.get("chat_template_kwargs") or {}
    text = tokenizer.apply_chat_template(body["messages"], chat_template=template, tokenize=False,
                                         add_generation_prompt=bool(body.get("add_generation_prompt", True)),
                                         **kwargs)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def untemplated(tokenizer: Any, body: Dict[str, Any]) -> List[int]:
    """A chat request's prompt ids without its chat template: its messages' text alone, one after another, tokenised
    as a completion's prompt is (the counterfactual of a template the draft never learned)."""
    text = "\n".join(_text_of(m.get("content")) for m in body["messages"] if isinstance(m, dict))
    return list(tokenizer(text)["input_ids"])


#: the chat-template switches that turn a model's thinking off, as the templates that have one name it (Qwen3's
#: ``enable_thinking``, DeepSeek-V3.1's ``thinking``), tried in this order
THINKING_SWITCHES = ("enable_thinking", "thinking")


def thinking_off(tokenizer: Any, body: Dict[str, Any], template: Optional[str],
                 prompt_ids: List[int]) -> Optional[Tuple[str, List[int]]]:
    """A chat request's prompt ids with its template's thinking switched off (the first of ``THINKING_SWITCHES``
    whose ``False`` renders otherwise than the request did: the counterfactual of a thinking suffix the draft never
    learned), with the switch's name; None where the template has no such switch or the request has it off."""
    kwargs = body.get("chat_template_kwargs") or {}
    for name in THINKING_SWITCHES:
        if kwargs.get(name) is False:
            return None
        try:
            ids = encode(tokenizer, dict(body, chat_template_kwargs=dict(kwargs, **{name: False})), template)
        except Exception:  # noqa: BLE001 - a template that fails on the switch has none we can use
            continue
        if ids != prompt_ids:
            return name, ids
    return None


def _text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts (OpenAI's multi-part form)."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return "" if content is None else str(content)


def _processor(torch: Any, prompt_len: int, penalties: Penalties) -> Any:
    """A transformers LogitsProcessor applying vLLM's penalties (penalties.penalise) during generate."""
    from transformers import LogitsProcessor

    from remote_probes.evaluation.penalties import penalise

    class VllmPenalties(LogitsProcessor):
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            vocab = scores.shape[-1]
            counts = torch.zeros(scores.shape[0], vocab, dtype=torch.float32, device=scores.device)
            out_ids = input_ids[:, prompt_len:]
            if out_ids.shape[1]:
                counts.scatter_add_(1, out_ids, torch.ones_like(out_ids, dtype=torch.float32))
            seen = torch.zeros(vocab, dtype=torch.bool, device=scores.device)
            seen[input_ids[0, :prompt_len]] = True
            return penalise(scores, seen, counts, penalties).to(scores.dtype)

    return VllmPenalties()


def _greedy_run(torch: Any, model: Any, prompt_ids: List[int], req: Dict[str, Any], needed: List[int], pad: Any,
                eos: Any) -> Tuple[Tuple[Any, int, Dict[int, Any]], Optional[List[float]]]:
    """(run, probabilities): one greedy request generated by the target with its max_tokens and penalties, and the
    hidden states the drafts need captured by one forward over prompt and answer; for an unpenalised request, that
    forward's probability of each token (confidence_match.py), else None."""
    from transformers import LogitsProcessorList

    ids = torch.tensor([prompt_ids], device=model.device)
    processors = LogitsProcessorList([] if req["penalties"].neutral else
                                     [_processor(torch, len(prompt_ids), req["penalties"])])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=req["max_tokens"],
                             do_sample=False, pad_token_id=pad, logits_processor=processors)
    generated = out[0, len(prompt_ids):].tolist()
    if eos is not None and eos in generated:
        generated = generated[:generated.index(eos) + 1]
    seq = torch.tensor([prompt_ids + generated], device=model.device)
    with torch.no_grad():
        forward = model(input_ids=seq, output_hidden_states=True)
    run = (seq, len(prompt_ids), {j: forward.hidden_states[j] for j in needed})
    probabilities = None
    if req["penalties"].neutral:  # a penalised token is not the one the target's own logits rank first
        from remote_probes.evaluation.confidence_match import token_probabilities

        probabilities = token_probabilities(torch, forward.logits, seq)
    del forward
    return run, probabilities


def capture_traffic(torch: Any, tokenizer: Any, model: Any, requests: List[Dict[str, Any]], a: Dict[str, Any],
                    needed: List[int]) -> Tuple[List[Tuple[Any, int, Dict[int, Any]]], List[int], List[Dict[str, Any]]]:
    """(runs, the request index of each run, skipped requests ``{index, reason}``): each greedy request generated
    one at a time (no padding a repetition penalty could count) with its own max_tokens and penalties."""
    if a.get("states_from") is not None:
        raise ProbeFailure("bad_args", "a traffic replay offline takes the target's states from transformers here; "
                           "engine-captured states do not carry a request's penalties yet", field="states_from")
    template = _template(tokenizer, a.get("chat_template_path"))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    eos = tokenizer.eos_token_id
    runs, order, skipped = [], [], []
    for index, req in enumerate(requests):
        how, why = how_replayed(req, str(a.get("engine")), generation_defaults(a["target"]), a.get("configs"))
        if how == "skip":
            skipped.append({"index": index, "reason": why})
            continue
        try:
            prompt_ids = encode(tokenizer, req["body"], template)
        except ProbeFailure:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's template or kwargs: said with the request, no traceback
            raise ProbeFailure("bad_args", "requests[%d]: the chat template failed: %s: %s"
                               % (index, type(exc).__name__, exc), field="requests") from None
        req["prompt_ids"] = prompt_ids
        if how == "simulate":
            req["simulate"] = True
            continue
        req["simulate"] = False
        run, req["token_probabilities"] = _greedy_run(torch, model, prompt_ids, req, needed, pad, eos)
        runs.append(run)
        order.append(index)
        keep = req.get("keep_last")
        if keep is not None and keep < len(prompt_ids):
            req["cut_run"] = _greedy_run(torch, model, prompt_ids[-keep:], req, needed, pad, eos)[0]
        if req["without_template"]:
            req["untemplated_run"] = _greedy_run(torch, model, untemplated(tokenizer, req["body"]), req, needed, pad,
                                                 eos)[0]
        switched = thinking_off(tokenizer, req["body"], template, prompt_ids) if req["thinking_off"] else None
        if switched is not None:
            req["thinking_switch"] = switched[0]
            req["thinking_off_run"] = _greedy_run(torch, model, switched[1], req, needed, pad, eos)[0]
        progress("request %d/%d replayed offline" % (index + 1, len(requests)), prompt=index + 1,
                 prompts=len(requests), tokens=int(runs[-1][0].shape[1]))
    return runs, order, skipped


def penalised_proposals(torch: Any, draft: Any, outs: List[Any], seq: Any, prompt_len: int,
                        penalties: Penalties) -> List[List[int]]:
    """[columns, K] target ids: the draft's step-k proposal from column t with its logits penalised by the output
    before that token (``seq[prompt_len : t + 2 + k]``: teacher-forced, as ttt_forward's chain is), through d2t."""
    from remote_probes.evaluation.penalties import penalise

    tokens = seq[0]
    length = int(tokens.shape[0])
    draft_vocab = int(outs[0].logits.shape[-1])
    to_target = draft.to_target_ids(torch.arange(draft_vocab, device=tokens.device))
    vocab = int(max(int(to_target.max()) + 1, int(tokens.max()) + 1))
    onehot = torch.zeros(length, vocab, dtype=torch.float32, device=tokens.device)
    onehot[torch.arange(prompt_len, length), tokens[prompt_len:]] = 1.0
    # counts[i]: the output tokens among positions < i
    counts = torch.cat([onehot.new_zeros(1, vocab), onehot.cumsum(0)], dim=0)
    seen = torch.zeros(vocab, dtype=torch.bool, device=tokens.device)
    seen[tokens[:prompt_len]] = True
    seen_d = seen[to_target]
    columns = int(outs[0].logits.shape[1])
    per_step = []
    for k, out in enumerate(outs):
        upto = torch.clamp(torch.arange(columns, device=tokens.device) + 2 + k, max=length)
        logits = penalise(out.logits[0], seen_d, counts[upto][:, to_target], penalties)
        per_step.append(to_target[logits.argmax(-1)])
    return torch.stack(per_step, dim=1).tolist()
