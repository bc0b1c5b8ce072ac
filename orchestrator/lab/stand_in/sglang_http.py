"""The lab server's HTTP API: SGLang 0.5.12.post1's shapes (research/sglang-interface.md), stdlib http.server only.

Requests are served one at a time (a lock around the models): the lab runs batch size 1.
Deviations, all visible: /server_info carries ``"lab": true`` and a note; on ``/generate`` temperature > 0 is served
greedily and says so in ``meta_info.lab_note``; batched requests cannot stream. ``/ready`` answers 404 as
0.5.12.post1 does (the route exists from 0.5.13 on). The OpenAI routes a traffic file is replayed through are
sglang_openai.py's, and they sample as SGLang does.

``--api-key`` / ``--admin-api-key`` are enforced as SGLang's ``utils/auth.py`` does (``decide_request_auth``):
``/health*`` and ``/metrics*`` are always open; ``/flush_cache`` is ADMIN_OPTIONAL (the admin key when one is set,
else the API key); every other path, unknown ones included (the middleware runs before routing), needs the API
key when one is set. A refusal is 401 ``{"error": "Unauthorized"}`` (403 ``{"error": "Forbidden"}`` for an
admin-force endpoint, which the lab has none of).
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from orchestrator.lab.stand_in.model_runner import Generation, LabModelRunner
from orchestrator.lab.stand_in.sglang_args import LabServerArgs
from orchestrator.lab.stand_in.sglang_openai import OpenAIRequestError, chat_prompt, speculative_sampling
from orchestrator.lab.stand_in.sglang_openai import answer as openai_answer
from orchestrator.lab.stand_in.sglang_openai import options as openai_options
from remote_probes.evaluation.penalties import NONE, RULES, Penalties

LAB_NOTE = ("This is the orchestrator lab's CPU stand-in for SGLang (python -m orchestrator.lab.stand_in.server), "
            "not SGLang. It speaks SGLang {version}'s flags and HTTP API and really runs greedy chain "
            "speculative decoding with tiny models.")
FLUSH_TEXT = ("Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting "
              "requests, the operation will not be performed.)\n")
log = logging.getLogger("orchestrator.lab.stand_in.server")


#: SGLang marks these ``@auth_level(AuthLevel.ADMIN_OPTIONAL)``; the lab serves only this one of them
ADMIN_OPTIONAL_PATHS = ("/flush_cache",)


def auth_allowed(path: str, authorization: str | None, api_key: str | None, admin_api_key: str | None) -> bool:
    """SGLang 0.5.12.post1's ``decide_request_auth`` for the NORMAL and ADMIN_OPTIONAL levels."""
    if path.startswith("/health") or path.startswith("/metrics"):
        return True
    expected = (admin_api_key or api_key) if path in ADMIN_OPTIONAL_PATHS else api_key
    if not expected:
        return True
    parts = (authorization or "").split(" ", 1)
    if len(parts) != 2 or parts[0].lower() != "bearer":
        return False
    return hmac.compare_digest(parts[1].encode(), expected.encode())


class RequestError(Exception):
    """A bad /generate request: answered 400 with SGLang's {"error": {"message": ...}} body."""


@dataclass
class ServerState:
    args: LabServerArgs
    models: LabModelRunner | None = None
    ready: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    started: float = field(default_factory=time.time)
    warned_temperature: bool = False

    # -- documents ----------------------------------------------------------------------------------------------
    def server_info(self) -> dict[str, Any]:
        args = self.args.public()
        internal: dict[str, Any] = {**args, "last_gen_throughput": 0.0, "memory_usage": {"weight": 0.0,
                                    "kvcache": 0.0, "token_capacity": 0, "graph": 0.0},
                                    "effective_max_running_requests_per_dp": args.get("max_running_requests") or 1}
        models = self.models
        if models is not None:
            internal["last_gen_throughput"] = round(models.stats.last_gen_throughput, 2)
            if models.draft is not None and models.stats.avg_spec_accept_length is not None:
                internal["avg_spec_accept_length"] = models.stats.avg_spec_accept_length
        ctx = self.args.context_length or (int(getattr(models.config, "max_position_embeddings", 0)) if models else 0)
        # SGLang's KV pool holds --max-total-tokens when set; the lab has no pool, so the context otherwise. Its
        # max_req_input_len is min(context - 1, pool - 1) - 5 (srt/managers/tp_worker.py), measured: 1018 for 1024
        pool = self.args.max_total_tokens or ctx
        return {**args, "status": "ready" if self.ready else "starting", "max_total_num_tokens": pool,
                "max_req_input_len": max(min(ctx, pool) - 1 - 5, 0), "internal_states": [internal],
                "version": self.args.sglang_version,
                "lab": True, "lab_note": LAB_NOTE.format(version=self.args.sglang_version),
                "lab_capture_layers_resolved": models.capture if models else None,
                "lab_draft_notes": models.notes if models else []}

    def model_info(self) -> dict[str, Any]:
        arch = [self.models.architecture] if self.models else None  # a wrapper's class, as SGLang answers
        model_type = self.models.target_config.get("model_type", "llama") if self.models else "llama"
        return {"model_path": self.args.model_path, "tokenizer_path": self.args.tokenizer_path,
                "is_generation": True, "preferred_sampling_params": None, "weight_version": "default",
                "has_image_understanding": False, "has_audio_understanding": False,
                "model_type": str(model_type),
                "architectures": arch}

    # -- generation ---------------------------------------------------------------------------------------------
    def parse_generate(self, body: dict[str, Any]) -> tuple[list[list[int]], bool, dict[str, Any]]:
        """Validate a /generate body into (prompts as ids, batched?, sampling options). Raises RequestError."""
        models = self.models
        assert models is not None
        text, ids = body.get("text"), body.get("input_ids")
        if (text is None) == (ids is None):
            raise RequestError("Either text or input_ids should be provided.")
        if text is not None:
            batched = isinstance(text, list)
            texts = text if batched else [text]
            if not texts or not all(isinstance(t, str) for t in texts):
                raise RequestError("text must be a string or a non-empty list of strings")
            prompts = [models.tokenizer(t)["input_ids"] for t in texts]
        else:
            if isinstance(ids, list) and ids and isinstance(ids[0], list):
                batched, prompts = True, ids
            else:
                batched, prompts = False, [ids]
            vocab = int(models.config.vocab_size)
            if not all(isinstance(p, list) and p and all(isinstance(i, int) and 0 <= i < vocab for i in p)
                       for p in prompts):
                raise RequestError(f"input_ids must be a non-empty list of token ids in [0, {vocab})")
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise RequestError("sampling_params must be an object")
        opts = {"max_new_tokens": sp.get("max_new_tokens", 128), "stop": sp.get("stop") or [],
                "stop_token_ids": sp.get("stop_token_ids") or [], "ignore_eos": bool(sp.get("ignore_eos", False)),
                "temperature": sp.get("temperature", 1.0), "greedy_only": True,
                # served by SGLang's relaxed rule in speculative decoding (remote_probes/evaluation/penalties.py)
                "penalties": Penalties.from_body(sp, RequestError, RULES["sglang"])}
        if not isinstance(opts["max_new_tokens"], int) or opts["max_new_tokens"] < 0:
            raise RequestError("sampling_params.max_new_tokens must be a non-negative integer")
        if isinstance(opts["stop"], str):
            opts["stop"] = [opts["stop"]]
        if not all(isinstance(s, str) for s in opts["stop"]):
            raise RequestError("sampling_params.stop must be a string or a list of strings")
        if not all(isinstance(i, int) for i in opts["stop_token_ids"]):
            raise RequestError("sampling_params.stop_token_ids must be a list of integers")
        if not isinstance(opts["temperature"], (int, float)) or opts["temperature"] < 0:
            raise RequestError("sampling_params.temperature must be a non-negative number")
        if int(sp.get("n", 1)) != 1:
            raise RequestError("the lab serves n=1 only")
        return prompts, batched, opts

    def run(self, prompt: list[int], opts: dict[str, Any], on_step=None) -> Generation:
        models = self.models
        assert models is not None
        return models.generate(prompt, max_new_tokens=opts["max_new_tokens"], stop=opts["stop"],
                               stop_token_ids=opts["stop_token_ids"], ignore_eos=opts["ignore_eos"], on_step=on_step,
                               penalties=opts.get("penalties", NONE), rule=RULES["sglang"],
                               # the OpenAI routes sample (sglang_openai.py); /generate serves greedily, said
                               **({} if opts.get("greedy_only") else
                                  {k: opts[k] for k in ("temperature", "seed", "top_k", "top_p", "min_p",
                                                        "threshold_single", "threshold_acc") if k in opts}))

    def response(self, gen: Generation, opts: dict[str, Any], rid: str, started: float) -> dict[str, Any]:
        models = self.models
        assert models is not None
        text = models.tokenizer.decode(gen.output_ids, skip_special_tokens=True)
        matched = gen.finish_reason.get("matched")
        if isinstance(matched, str) and matched in text:
            text = text[: text.index(matched)]
        meta: dict[str, Any] = {
            "id": rid, "finish_reason": gen.finish_reason, "prompt_tokens": gen.prompt_tokens,
            "weight_version": "default", "completion_tokens": len(gen.output_ids), "cached_tokens": 0,
            "num_retractions": 0, "reasoning_tokens": 0, "e2e_latency": round(time.monotonic() - started, 6)}
        spec = gen.spec
        if spec.verify_ct > 0:
            rate = spec.correct_drafts / max(spec.proposed_drafts, 1)
            meta.update({"spec_accept_rate": rate, "spec_accept_length": len(gen.output_ids) / spec.verify_ct,
                         "spec_num_correct_drafts": spec.correct_drafts,
                         "spec_num_proposed_drafts": spec.proposed_drafts, "spec_verify_ct": spec.verify_ct,
                         "spec_correct_drafts_histogram": list(gen.histogram),
                         "spec_accepted_drafts": spec.correct_drafts, "spec_proposed_drafts": spec.proposed_drafts,
                         "spec_accept_histogram": list(gen.histogram)})
        if opts["temperature"] > 0 and opts.get("greedy_only"):
            meta["lab_note"] = "temperature > 0 was served greedily: the lab implements greedy decoding only"
        return {"text": text, "output_ids": list(gen.output_ids), "meta_info": meta}


class LabHandler(BaseHTTPRequestHandler):
    server: LabHTTPServer  # the server this handler is built by (LabHTTPServer passes itself)
    server_version = "uvicorn"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    @property
    def state(self) -> ServerState:
        return self.server.state

    def log_message(self, format: str, *args: Any) -> None:
        pass  # errors are answered to the client; the access line is written by log_request

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """uvicorn's access-log shape as SGLang configures it: ``INFO:     host:port - "GET / HTTP/1.1" 200 OK``."""
        try:
            phrase = HTTPStatus(int(code)).phrase
        except ValueError:
            phrase = ""
        log.info('INFO:     %s:%s - "%s" %s %s', self.client_address[0], self.client_address[1], self.requestline,
                 code, phrase)

    # -- plumbing -----------------------------------------------------------------------------------------------
    def _send(self, status: int, body: bytes | str | dict | list | None, ctype: str = "application/json") -> None:
        if isinstance(body, (dict, list)):
            data = json.dumps(body).encode()
        elif isinstance(body, str):
            data, ctype = body.encode(), "text/plain; charset=utf-8"
        else:
            data = body or b""
        self.send_response(status)
        if data:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise RequestError(f"request body is not valid JSON: {exc}") from None

    # -- routes -------------------------------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        state = self.state
        if not auth_allowed(path, self.headers.get("Authorization"), state.args.api_key, state.args.admin_api_key):
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)  # an unread body would be taken for the next request on this connection
            return self._send(401, {"error": "Unauthorized"})
        try:
            if path in ("/health", "/health_generate"):
                if not state.ready:
                    return self._send(503, None)
                if path == "/health_generate":
                    models = state.models
                    assert models is not None  # ready: the models are loaded
                    with state.lock:
                        state.run(models.tokenizer("ping")["input_ids"],
                                  {"max_new_tokens": 1, "stop": [], "stop_token_ids": [], "ignore_eos": True})
                return self._send(200, None)
            if path in ("/server_info", "/get_server_info"):
                return self._send(200, state.server_info())
            if path in ("/model_info", "/get_model_info"):
                if state.models is None:
                    return self._send(503, {"error": {"message": "the model is still loading"}})
                return self._send(200, state.model_info())
            if path == "/flush_cache":
                with state.lock:
                    if state.models is not None:
                        state.models.reset_stats()
                log.info("Cache flushed successfully!")
                return self._send(200, FLUSH_TEXT)
            if path == "/generate":  # SGLang routes GET and POST here
                return self._generate()
            if path == "/v1/models":
                return self._send(200, {"object": "list", "data": [{
                    "id": state.args.served_model_name, "object": "model", "created": int(state.started),
                    "owned_by": "sglang", "root": state.args.served_model_name, "parent": None,
                    "max_model_len": state.server_info()["max_total_num_tokens"]}]})
            if path in ("/v1/completions", "/v1/chat/completions") and method == "POST":
                return self._openai("chat" if path.endswith("chat/completions") else "completion")
            return self._send(404, {"detail": "Not Found"})
        except RequestError as exc:
            return self._send(400, {"error": {"message": str(exc)}})
        except OpenAIRequestError as exc:  # SGLang's OpenAI routes answer errors in OpenAI's shape
            return self._send(400, {"object": "error", "message": str(exc), "type": "BadRequest", "param": None,
                                    "code": 400})
        except (BrokenPipeError, ConnectionResetError):
            return None

    def _generate(self) -> None:
        state = self.state
        body = self._body()
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        if not state.ready and not body.get("_lab_warmup"):
            return self._send(503, {"error": {"message": "the server is not ready yet"}})
        prompts, batched, opts = state.parse_generate(body)
        if opts["temperature"] > 0 and not state.warned_temperature:
            state.warned_temperature = True
            log.warning("temperature > 0 requested: the lab serves every request greedily (temperature 0)")
        rid = str(body.get("rid") or uuid.uuid4().hex)
        if body.get("stream"):
            if batched:
                raise RequestError("the lab does not stream batched requests")
            return self._stream(prompts[0], opts, rid)
        results = []
        with state.lock:
            for i, prompt in enumerate(prompts):
                started = time.monotonic()
                try:
                    gen = state.run(prompt, opts)
                except ValueError as exc:
                    raise RequestError(str(exc)) from None
                results.append(state.response(gen, opts, rid if not batched else f"{rid}-{i}", started))
        return self._send(200, results if batched else results[0])

    def _openai(self, kind: str) -> None:
        """``/v1/completions`` and ``/v1/chat/completions`` (sglang_openai.py): one prompt, no streaming."""
        state = self.state
        body = self._body()
        if not isinstance(body, dict):
            raise OpenAIRequestError("the request body must be a JSON object")
        if not state.ready or state.models is None:
            return self._send(503, {"error": {"message": "the server is not ready yet"}})
        if body.get("stream"):
            raise OpenAIRequestError("lab (NOT SGLang): the lab's OpenAI routes do not stream")
        opts = openai_options(body)
        opts.update(speculative_sampling(opts, state.args, OpenAIRequestError))
        models = state.models
        if kind == "chat":
            prompt = chat_prompt(models.tokenizer, state.args.chat_template, body)
        else:
            text = body.get("prompt")
            if not isinstance(text, str) or not text:
                raise OpenAIRequestError("lab (NOT SGLang): the lab serves one non-empty string prompt per request")
            prompt = list(models.tokenizer(text)["input_ids"])
        started = time.monotonic()
        with state.lock:
            try:
                gen = state.run(prompt, opts)
            except ValueError as exc:
                raise OpenAIRequestError(str(exc)) from None
            done = state.response(gen, opts, uuid.uuid4().hex, started)
        return self._send(200, openai_answer(kind, str(body.get("model") or state.args.served_model_name),
                                             done["text"], done["meta_info"], state.args.sglang_version,
                                             bool(body.get("return_spec_tokens_details"))))

    def _stream(self, prompt: list[int], opts: dict[str, Any], rid: str) -> None:
        state = self.state
        models = state.models
        assert models is not None
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        started = time.monotonic()

        def chunk(doc: Any) -> None:
            payload = doc if isinstance(doc, str) else json.dumps(doc)
            self.wfile.write(f"data: {payload}\n\n".encode())
            self.wfile.flush()

        def on_step(ids: list[int]) -> None:
            if ids:
                chunk({"text": models.tokenizer.decode(ids, skip_special_tokens=True), "output_ids": list(ids),
                       "meta_info": {"id": rid, "finish_reason": None, "prompt_tokens": len(prompt),
                                     "completion_tokens": len(ids), "cached_tokens": 0}})

        with state.lock:
            try:
                gen = state.run(prompt, opts, on_step=on_step)
            except ValueError as exc:
                chunk({"error": {"message": str(exc)}})
                chunk("[DONE]")
                return
        chunk(state.response(gen, opts, rid, started))
        chunk("[DONE]")


class LabHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, state: ServerState) -> None:
        super().__init__((state.args.host, state.args.port), LabHandler)
        self.state = state
