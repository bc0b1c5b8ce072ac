"""The lab's vLLM-mode HTTP API: vLLM's OpenAI-compatible routes and its Prometheus spec_decode counters.

Shapes follow vLLM 0.33.0 (entrypoints/openai, entrypoints/serve): ``GET /health`` (200, empty body),
``GET /v1/models`` (``{"object": "list", "data": [{"id", "object": "model", "owned_by": "vllm", ...}]}``),
``POST /v1/completions`` (``choices[0].text``, ``finish_reason``; ``usage``; streamed as ``data:`` chunks, the usage
chunk when ``stream_options.include_usage``), ``POST /v1/chat/completions`` (``--chat-template`` or the tokenizer's;
none: vLLM's refusal), ``GET /metrics`` and ``GET /version``. ``--api-key`` guards the
``/v1`` prefix only, as vLLM's AuthenticationMiddleware does (GUARDED_PREFIX). The counters follow
v1/spec_decode/metrics.py: per verify cycle, one draft of K tokens, ``accepted`` = drafts the target agreed with,
position k counted when the first k+1 drafts were accepted. Deviations, all visible: ``/version`` and the model card
say it is the lab; a request that samples is sampled with vLLM's rejection rule for a draft without probabilities
(remote_probes/evaluation/decoding.py: equal to vLLM's in distribution, not draw for draw), with its top-k and top-p as
vLLM cuts the target's distribution; min_p and logit_bias as vLLM takes them (vllm_sampling.py: refused with vLLM's
own 400 when the server speculates; without speculation min_p applied, a logit bias refused "lab (NOT vLLM)"). Penalties are served as vLLM serves them (remote_probes/evaluation/penalties.py):
on the target's logits, not the draft's.
"""

from __future__ import annotations

import hmac
import json
import os
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from orchestrator.lab.stand_in.model_runner import DraftStepError, Generation, LabModelRunner
from orchestrator.lab.stand_in.sglang_args import LabServerArgs
from orchestrator.lab.stand_in.sglang_http import LabHandler, RequestError
from orchestrator.lab.stand_in.sglang_openai import greedy_options
from orchestrator.lab.stand_in.vllm_sampling import sampling_filters

#: what vLLM answers every request with once its EngineCore is dead (v1/engine/exceptions.py), HTTP 500
ENGINE_DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."
def _line_of(path: str, statement: str) -> int:
    """The statement's line in the vLLM tree the lab follows (0 when that tree is not readable)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return next((i for i, line in enumerate(fh, 1) if line.strip() == statement), 0)
    except OSError:
        return 0


GUARDED_PREFIX = ("/v1", "/v2", "/inference", "/cohere")
LAB_NOTE = "the orchestrator lab's CPU stand-in for vLLM {version} (python -m orchestrator.lab.stand_in.vllm_server), not vLLM"


@dataclass
class VllmState:
    args: LabServerArgs
    models: LabModelRunner
    version: str
    spec: dict[str, Any]
    ready: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_position: list[int] = field(default_factory=list)
    created: int = field(default_factory=lambda: int(time.time()))
    dead: bool = False                 # the engine died at run time (vLLM: EngineDeadError)
    stopped: threading.Event = field(default_factory=threading.Event)  # the server shuts down (main exits)

    def engine_died(self, exc: DraftStepError) -> None:
        """vLLM 0.32.0's run-time death, in its own log lines: the Worker's exception, the EngineCore's fatal error,
        the API server's EngineDeadError (v1/executor/multiproc_executor.py, v1/engine/core.py,
        v1/engine/async_llm.py). The lab is one process: every line carries its pid."""
        pid, stamp = os.getpid(), time.strftime("%m-%d %H:%M:%S")
        root = (self.args.vllm_rules or {}).get("root") or "vllm"
        worker = f"(Worker pid={pid}) ERROR {stamp} [multiproc_executor.py:1063]"
        core = f"(EngineCore pid={pid}) ERROR {stamp} [core.py:1512]"
        api = f"(APIServer pid={pid}) ERROR {stamp} [async_llm.py:906]"
        rel, function, statement = exc.frame
        where = os.path.join(root, *rel.split("/"))
        lines = [f"{worker} WorkerProc hit an exception.", f"{worker} Traceback (most recent call last):",
                 f'{worker}   File "{where}", line {_line_of(where, statement)}, in {function}',
                 f"{worker}     {statement}", f"{worker} {exc.kind}: {exc}",
                 f"{core} EngineCore encountered a fatal error.",
                 f"{core} RuntimeError: Worker failed with error '{exc}', please check the stack trace above for "
                 "the root cause", f"{api} AsyncLLM output_handler failed.",
                 f"{api} vllm.v1.engine.exceptions.EngineDeadError: {ENGINE_DEAD}"]
        print("\n".join(lines), file=sys.stderr, flush=True)  # under the request lock: one death, one report
        self.dead = True

    def count(self, gen: Generation) -> None:
        spec = gen.spec
        self.drafts += spec.verify_ct
        self.draft_tokens += spec.proposed_drafts
        self.accepted += spec.correct_drafts
        k = len(gen.histogram) - 1
        if len(self.per_position) < k:
            self.per_position += [0] * (k - len(self.per_position))
        for pos in range(k):  # position pos accepted when at least pos + 1 drafts were
            self.per_position[pos] += sum(gen.histogram[pos + 1:])

    def metrics(self) -> str:
        labels = f'engine="0",model_name="{self.args.served_model_name}"'
        lines = ["# HELP vllm:num_requests_running Number of requests in model execution batches.",
                 "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{labels}}} 0.0"]
        if self.spec:  # vLLM registers the spec_decode counters only with a speculative config
            for name, doc, value in (("drafts", "Number of spec decoding drafts.", self.drafts),
                                     ("draft_tokens", "Number of draft tokens.", self.draft_tokens),
                                     ("accepted_tokens", "Number of accepted tokens.", self.accepted)):
                full = f"vllm:spec_decode_num_{name}_total"
                lines += [f"# HELP {full} {doc}", f"# TYPE {full} counter", f"{full}{{{labels}}} {float(value)}"]
            full = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
            lines += [f"# HELP {full} Accepted tokens per draft position.", f"# TYPE {full} counter"]
            positions = self.per_position or [0] * int(self.spec["num_spec_tokens"])
            lines += [f'{full}{{{labels},position="{k}"}} {float(v)}' for k, v in enumerate(positions)]
        return "\n".join(lines) + "\n"


class VllmHandler(LabHandler):
    server: VllmLabHTTPServer  # type: ignore[assignment]

    @property
    def vstate(self) -> VllmState:
        return self.server.vstate

    def _authorized(self, path: str) -> bool:
        key = self.vstate.args.api_key
        if not key or not path.startswith(GUARDED_PREFIX):
            return True
        parts = (self.headers.get("Authorization") or "").split(" ", 1)
        return len(parts) == 2 and parts[0].lower() == "bearer" and hmac.compare_digest(parts[1].encode(), key.encode())

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        state = self.vstate
        if not self._authorized(path):
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            return self._send(401, {"error": "Unauthorized"})
        try:
            if path == "/health":  # 503 once the engine is dead (entrypoints/serve/instrumentator/health.py)
                return self._send(200 if state.ready and not state.dead else 503, None)
            if path == "/version":
                return self._send(200, {"version": state.version, "lab": True,
                                        "lab_note": LAB_NOTE.format(version=state.version)})
            if path == "/metrics":
                return self._send(200, state.metrics().encode(), "text/plain; version=0.0.4; charset=utf-8")
            if path == "/v1/models":
                return self._send(200, {"object": "list", "data": [{
                    "id": state.args.served_model_name, "object": "model", "created": state.created,
                    "owned_by": "vllm", "root": state.args.model_path, "parent": None, "max_model_len": 2048,
                    "lab_note": LAB_NOTE.format(version=state.version)}]})
            if path == "/v1/completions" and method == "POST":
                return self._dead(None) if state.dead else self._completion()
            if path == "/v1/chat/completions" and method == "POST":
                return self._dead(None) if state.dead else self._chat()
            return self._send(404, {"detail": "Not Found"})
        except RequestError as exc:
            return self._send(400, {"error": {"message": str(exc), "type": "BadRequestError", "param": None,
                                              "code": 400}})
        except DraftStepError as exc:
            return self._dead(exc)
        except (BrokenPipeError, ConnectionResetError):
            return None

    def _dead(self, exc: DraftStepError | None) -> None:
        """vLLM's answer when its engine died (engine_error_handler: 500, then terminate_if_errored shuts the
        server down: the process exits once the answer is out)."""
        state = self.vstate
        if exc is not None and not state.dead:
            state.engine_died(exc)
        self._send(500, {"error": {"message": ENGINE_DEAD, "type": "InternalServerError", "param": None,
                                   "code": 500}})
        state.stopped.set()

    def _completion(self) -> None:
        state = self.vstate
        body = self._openai_body()
        if body is None:
            return None
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise RequestError("the lab serves one non-empty string prompt per request")
        opts = self._options(body)
        ids = state.models.tokenizer(prompt)["input_ids"]
        rid = f"cmpl-{uuid.uuid4().hex}"
        if body.get("stream"):
            return self._stream(ids, opts, rid, bool((body.get("stream_options") or {}).get("include_usage")))
        with state.lock:
            gen = self._run(ids, opts)
        text = self._text(gen)
        return self._send(200, {"id": rid, "object": "text_completion", "created": int(time.time()),
                                "model": state.args.served_model_name,
                                "choices": [{"index": 0, "text": text, "logprobs": None,
                                             "finish_reason": gen.finish_reason["type"], "stop_reason": None}],
                                "usage": self._usage(gen)})

    def _chat(self) -> None:
        """``/v1/chat/completions``: the messages through the chat template (``--chat-template``, else the
        tokenizer's; none: vLLM's own refusal), tokenized without special tokens as vLLM's renderer does, then
        generated as a completion is."""
        state = self.vstate
        body = self._openai_body()
        if body is None:
            return None
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("messages must be a non-empty list")
        tokenizer = state.models.tokenizer
        template = state.args.chat_template or getattr(tokenizer, "chat_template", None)
        if not template:  # renderers/hf.py (vLLM 0.32): ChatTemplateResolutionError, answered 400
            raise RequestError("As of transformers v4.44, default chat template is no longer allowed, so you must "
                               "provide a chat template if the tokenizer does not define one.")
        kwargs = body.get("chat_template_kwargs") or {}
        if not isinstance(kwargs, dict):
            raise RequestError("chat_template_kwargs must be an object")
        try:
            text = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False,
                                                 add_generation_prompt=bool(body.get("add_generation_prompt", True)),
                                                 **kwargs)
        except Exception as exc:  # noqa: BLE001 - a template error is the request's (vLLM answers 400)
            raise RequestError(f"the chat template failed: {type(exc).__name__}: {exc}") from None
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        opts = self._options(body)
        with state.lock:
            gen = self._run(ids, opts)
        content = self._text(gen)
        return self._send(200, {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
                                "created": int(time.time()), "model": state.args.served_model_name,
                                "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                             "logprobs": None, "finish_reason": gen.finish_reason["type"],
                                             "stop_reason": None}],
                                "usage": self._usage(gen)})

    def _options(self, body: dict[str, Any]) -> dict[str, Any]:
        """The generation options of an OpenAI body. A request that samples (temperature > 0 written, or none: vLLM
        then samples at the model's default, 1.0 for the lab's generation_config) is sampled as vLLM's rejection
        sampler verifies an EAGLE draft (remote_probes/evaluation/decoding.py), with its top-k and top-p; its min_p
        and logit_bias as vLLM takes them (vllm_sampling.py: refused with vLLM's message on a server that
        speculates). Penalties are applied as vLLM applies them, to the target's logits and not the draft's
        (remote_probes/evaluation/penalties.py)."""
        opts = greedy_options(body, "vLLM", RequestError, "max_tokens must be a positive integer", penalties=True,
                              samples=True)
        speculative = self.vstate.models is not None and self.vstate.models.draft is not None
        return {**opts, **sampling_filters(body, opts["temperature"], speculative, RequestError)}

    def _openai_body(self) -> dict[str, Any] | None:
        """An OpenAI request's body, or None once vLLM's 404 for another model's name is sent."""
        body = self._body()
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        if body.get("model") != self.vstate.args.served_model_name:
            self._send(404, {"error": {"message": f"The model `{body.get('model')}` does not exist.",
                                       "type": "NotFoundError", "param": "model", "code": 404}})
            return None
        return body

    def _run(self, ids: list[int], opts: dict[str, Any], on_step: Any = None) -> Generation:
        state = self.vstate
        try:
            gen = state.models.generate(ids, max_new_tokens=opts["max_new_tokens"], stop=opts["stop"],
                                        stop_token_ids=opts["stop_token_ids"], ignore_eos=opts["ignore_eos"],
                                        on_step=on_step, penalties=opts["penalties"], rule=opts["rule"],
                                        temperature=opts["temperature"], seed=opts["seed"], top_k=opts["top_k"],
                                        top_p=opts["top_p"], min_p=opts["min_p"])
        except ValueError as exc:
            raise RequestError(str(exc)) from None
        state.count(gen)  # under the lock: the counters move before the answer is sent, as one request's
        return gen

    def _text(self, gen: Generation) -> str:
        text = str(self.vstate.models.tokenizer.decode(gen.output_ids, skip_special_tokens=True))
        matched = gen.finish_reason.get("matched")
        return text[: text.index(matched)] if isinstance(matched, str) and matched in text else text

    @staticmethod
    def _usage(gen: Generation) -> dict[str, int]:
        return {"prompt_tokens": gen.prompt_tokens, "total_tokens": gen.prompt_tokens + len(gen.output_ids),
                "completion_tokens": len(gen.output_ids)}

    def _stream(self, ids: list[int], opts: dict[str, Any], rid: str, usage: bool) -> None:  # type: ignore[override]
        state = self.vstate
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        sent = [0]
        base = {"id": rid, "object": "text_completion", "created": int(time.time()),
                "model": state.args.served_model_name}

        def chunk(doc: Any) -> None:
            self.wfile.write(f"data: {doc if isinstance(doc, str) else json.dumps(doc)}\n\n".encode())
            self.wfile.flush()

        def on_step(out: list[int]) -> None:
            text = state.models.tokenizer.decode(out, skip_special_tokens=True)
            if len(text) > sent[0]:
                chunk({**base, "choices": [{"index": 0, "text": text[sent[0]:], "logprobs": None,
                                            "finish_reason": None, "stop_reason": None}]})
                sent[0] = len(text)

        with state.lock:
            try:
                gen = self._run(ids, opts, on_step=on_step)
            except RequestError as exc:
                chunk({"error": {"message": str(exc), "type": "BadRequestError", "code": 400}})
                chunk("[DONE]")
                return
            except DraftStepError as exc:  # the 200 is out: vLLM sends the error as the next chunk, then stops
                state.engine_died(exc)
                chunk({"error": {"message": ENGINE_DEAD, "type": "InternalServerError", "param": None,
                                 "code": 500}})
                chunk("[DONE]")
                state.stopped.set()
                return
        text = self._text(gen)
        chunk({**base, "choices": [{"index": 0, "text": text[sent[0]:], "logprobs": None,
                                    "finish_reason": gen.finish_reason["type"], "stop_reason": None}]})
        if usage:
            chunk({**base, "choices": [], "usage": self._usage(gen)})
        chunk("[DONE]")


class VllmLabHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, vstate: VllmState) -> None:
        super().__init__((vstate.args.host, vstate.args.port), VllmHandler)
        self.vstate = vstate
