"""Probe: talk to an inference server from its own host (standard library only, Python >= 3.9).

HTTP calls, the readiness wait and the benchmark run next to the server, so latency is measured there and
not across the SSH link; the same code measures the lab over the local transport and a GPU host over SSH.
It speaks the probe protocol (_probe.py) like every probe; server log lines go to stderr as they arrive.

Args: ``{"command": "request" | "wait" | "port" | "bench", ...}``. What is engine-specific comes from the
orchestrator's engine adapter as arguments (``health_path``, ``info_paths``, ``flush_path``, ``generate_path``,
``request_stat_keys``, ``api``, ``models_path``, ``metrics_path``, ``metric_names``). Two request shapes: ``api:
"sglang"`` (default: ``/generate`` with ``sampling_params``, stats in ``meta_info``) and ``api: "openai"`` (vLLM:
``/v1/completions`` with ``max_tokens``, counts in ``usage``; no per-request speculative stats, so acceptance comes
from the server's Prometheus counters at ``metrics_path``, scraped before and after the run).

Every command takes ``api_key`` (and ``admin_api_key``) for a server started with ``--api-key``: each HTTP call
sends ``Authorization: Bearer <key>`` (SGLang exempts /health*, /metrics and /ready; sending it there is
harmless), and ``flush_path`` uses the admin key when there is one (SGLang's ADMIN_OPTIONAL level). Keys come
on stdin with the other arguments, so they never appear on a command line.

- ``request``: ``{"url", "method"?, "body"?, "timeout"?}`` -> ``{"status", "text", "json"}`` (status 0: no connection)
- ``wait``: ``{"url", "log", "pgid", "timeout", "health_path", "ready_line"?, "line_grace"?, "interval"?,
  "models_path"?}``: poll the health path while tailing the log until ready, the process group exits, or the timeout;
  with ``models_path`` (vLLM: ``/v1/models``) ready also needs that path to list at least one model
- ``port``: ``{"host"?, "port"?, "wait"?, "max"?}`` -> ``{"free", "port"}`` (no port, 0 or "auto": pick a free one,
  at most ``max``: an engine that derives another port from its own needs room above it)
- ``bench``: ``{"url", "prompts", "n", "max_new_tokens", ...}`` -> throughput, latency, per-request stats and the
  server's info document (``server_info``, from the first of ``info_paths`` that answers) for the adapter to read;
  with ``metrics_path``: ``metrics_before`` / ``metrics_after``, the samples whose names start with ``metric_prefix``
  (``[{"name", "labels", "value"}]``). With ``metric_names`` (``{"drafts": counter, "accepted": counter}``) and
  concurrency 1, each request's accept length is ``1 + accepted/drafts`` over the counters' change across that
  request (vLLM's "Mean acceptance length" convention, bonus token included); with ``metric_names["per_position"]``
  too, each request's ``spec_counts``: ``{"drafts", "accepted": [per draft position]}`` over the same change.
  With ``traffic`` (``[{"path": "/v1/chat/completions" | "/v1/completions", "body": {...}}]``, a user's own
  requests) each is sent once, in order, as written with the served model's name (to an SGLang server, with
  ``return_spec_tokens_details: true``: the one field the replay adds, which versions without it ignore);
  ``prompts`` and ``n`` are then not read. Each row carries ``index``, its place in the run.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from remote_probes.agent.protocol import ProbeFailure, run_probe

Args = Dict[str, Any]
DEFAULT_STAT_KEYS = {"accept_length": "spec_accept_length", "verify_ct": "spec_verify_ct"}


def _request(url: str, data: Optional[bytes], method: str, api_key: Optional[str]) -> urllib.request.Request:
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if api_key:
        req.add_header("Authorization", "Bearer " + str(api_key))
    return req


def unauthorized_message(status: int, url: str, api_key: Optional[str]) -> str:
    """What a 401/403 means to the user: no key given, or a key the server refused."""
    if status == 403:
        return ("403: the server forbids %s (SGLang: an admin-only endpoint; it needs the server's admin-api-key)"
                % url)
    if api_key:
        return "401: the server refused the API key (api-key) for %s; is it the key the server was started with?" % url
    return ("401: the server wants an API key (api-key) for %s; it was started with --api-key: give the step "
            "`api_key:` (a secret var), or start the server with `api-key` among its flags" % url)


def http(url: str, method: str = "GET", body: Any = None, timeout: float = 10.0,
         api_key: Optional[str] = None) -> Tuple[int, str]:
    """(status, text); status 0 with the error text when the connection itself failed."""
    data = None if body is None else json.dumps(body).encode()
    req = _request(url, data, method, api_key)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (OSError, ValueError) as exc:  # refused, reset, timed out
        return 0, str(exc)


def cmd_request(args: Args) -> Dict[str, Any]:
    status, text = http(_need(args, "url"), args.get("method", "GET"), args.get("body"), float(args.get("timeout", 10)),
                        args.get("api_key"))
    try:
        parsed = json.loads(text) if text.strip()[:1] in ("{", "[") else None
    except ValueError:
        parsed = None
    return {"status": status, "text": text[:200000], "json": parsed}


def _group_alive(pgid: Any) -> bool:
    try:
        os.killpg(int(pgid), 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _need(args: Args, name: str) -> Any:
    """A required argument; its absence is the caller's mistake (bad_args), not a crash."""
    if args.get(name) is None:
        raise ProbeFailure("bad_args", "server_client %s needs %r" % (args.get("command"), name))
    return args[name]


def cmd_wait(args: Args) -> Dict[str, Any]:
    """Ready = health 200 and (the ready line seen, or no ready line expected, or health kept OK for grace s)."""
    url, log_path, pgid = _need(args, "url"), _need(args, "log"), _need(args, "pgid")
    health_path = _need(args, "health_path")
    timeout, ready_line = float(_need(args, "timeout")), args.get("ready_line")
    line_grace = float(args.get("line_grace", 10))
    models_path = args.get("models_path")
    started = time.monotonic()
    offset, pending, seen_line, health_ok_since = 0, b"", False, None
    last_status = None
    while True:
        try:
            with open(log_path, "rb") as fh:
                fh.seek(offset)
                chunk = fh.read()
            offset += len(chunk)
        except OSError:
            chunk = b""
        if chunk:
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8", "replace")
                sys.stderr.write(line + "\n")
                if ready_line and ready_line in line:
                    seen_line = True
            sys.stderr.flush()
        status, _ = http(url + health_path, timeout=5, api_key=args.get("api_key"))
        last_status = status
        now = time.monotonic()
        if status == 200 and models_path and not _lists_models(url + models_path, args.get("api_key")):
            status = last_status = -1  # healthy but not serving a model yet (vLLM answers /health first)
        if status == 200:
            health_ok_since = health_ok_since or now
            if not ready_line or seen_line or now - health_ok_since >= line_grace:
                return {"ready": True, "reason": "ready", "waited": round(now - started, 3), "ready_line_seen": seen_line}
        else:
            health_ok_since = None
        if not _group_alive(pgid):
            time.sleep(0.2)  # let the wrapper write the exit file
            return {"ready": False, "reason": "exited", "waited": round(now - started, 3), "health": last_status}
        if now - started >= timeout:
            return {"ready": False, "reason": "timeout", "waited": round(now - started, 3), "health": last_status}
        time.sleep(float(args.get("interval", 0.25)))


def _lists_models(url: str, api_key: Optional[str]) -> bool:
    status, text = http(url, timeout=5, api_key=api_key)
    try:
        data = json.loads(text).get("data") if status == 200 else None
    except (ValueError, AttributeError):
        return False
    return isinstance(data, list) and len(data) > 0


def _served_model(url: str, models_path: str, api_key: Optional[str]) -> str:
    """The first model id the server lists (an OpenAI completion names the model it asks for)."""
    status, text = http(url + models_path, timeout=10, api_key=api_key)
    if status in (401, 403):
        raise ProbeFailure("unauthorized", unauthorized_message(status, url + models_path, api_key))
    try:
        return str(json.loads(text)["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise ProbeFailure("bad_answer", "%s answered %s without a model list: %s"
                           % (url + models_path, status, text[:200])) from None


def parse_metrics(text: str, prefix: str) -> List[Dict[str, Any]]:
    """Prometheus text exposition -> samples whose name starts with ``prefix`` (comments and others skipped)."""
    samples: List[Dict[str, Any]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or not line.startswith(prefix):
            continue
        labels: Dict[str, str] = {}
        if "{" in line:
            name, rest = line.split("{", 1)
            body, _, tail = rest.rpartition("}")
            for part in _split_labels(body):
                key, _, value = part.partition("=")
                labels[key.strip()] = value.strip().strip('"').replace('\\"', '"')
        else:
            name, _, tail = line.partition(" ")
        try:
            number = float(tail.split()[0])
        except (IndexError, ValueError):
            continue
        samples.append({"name": name.strip(), "labels": labels, "value": number})
    return samples


def _split_labels(body: str) -> List[str]:
    parts, cur, quoted = [], "", False
    for ch in body:
        if ch == '"' and not cur.endswith("\\"):
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


def _scrape(url: str, prefix: str, api_key: Optional[str]) -> Optional[List[Dict[str, Any]]]:
    status, text = http(url, timeout=10, api_key=api_key)
    return parse_metrics(text, prefix) if status == 200 else None


def _total(samples: Optional[List[Dict[str, Any]]], name: str) -> Optional[float]:
    """A counter summed over its label sets (vLLM keeps one per engine)."""
    if samples is None:
        return None
    return sum(s["value"] for s in samples if s["name"] == name)


def cmd_port(args: Args) -> Dict[str, Any]:
    host, port = args.get("host", "127.0.0.1"), args.get("port")
    if port in (None, 0, "auto"):
        top = int(args.get("max") or 65535)
        for _ in range(64):  # the kernel's pick, while it lies below the engine's limit
            with socket.socket() as sock:
                sock.bind((host, 0))
                picked = sock.getsockname()[1]
            if picked <= top:
                return {"free": True, "port": picked}
        for candidate in range(min(top, 49151), 1023, -1):  # an ephemeral range above the limit: look below it
            if _port_free(host, candidate):
                return {"free": True, "port": candidate}
        return {"free": False, "port": 0}
    deadline = time.monotonic() + float(args.get("wait", 0))
    while True:
        free = _port_free(host, int(port))
        if free or time.monotonic() >= deadline:
            return {"free": free, "port": int(port)}
        time.sleep(0.1)


def _port_free(host: str, port: int) -> bool:
    # Something listening answers a connect; a bind test alone misses SO_REUSEPORT listeners.
    with socket.socket() as probe:
        probe.settimeout(0.5)
        if probe.connect_ex((host, port)) == 0:
            return False
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _percentile(values: List[float], q: float) -> Optional[float]:
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


class Unauthorized(Exception):
    """A 401/403 answer: every other request would get the same, so the bench stops with this message."""


def output_digest(text: Any) -> Optional[str]:
    """A short digest of a request's output text: greedy outputs with and without speculation must be equal (a
    lossless engine), and the digests tell so without keeping the texts in the session."""
    if not isinstance(text, str):
        return None
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _one_request(url: str, prompt: str, params: Dict[str, Any], stream: bool, timeout: float,
                 stat_keys: Dict[str, str], api_key: Optional[str] = None, model: Optional[str] = None) -> Dict[str, Any]:
    if model is not None:
        return _one_completion(url, prompt, params, stream, timeout, model, api_key)
    body = {"text": prompt, "sampling_params": params, "stream": bool(stream)}
    req = _request(url, json.dumps(body).encode(), "POST", api_key)
    started = time.monotonic()
    ttft, final = None, None
    with _open(req, url, timeout, api_key) as resp:
        if not stream:
            final = json.loads(resp.read().decode())
        else:
            for chunk in _sse_chunks(resp):
                if ttft is None and (chunk.get("text") or chunk.get("output_ids")):
                    ttft = time.monotonic() - started
                final = chunk
    latency = time.monotonic() - started
    if isinstance(final, list):
        final = final[0]
    meta = (final or {}).get("meta_info", {}) or {}
    text = (final or {}).get("text") if isinstance(final, dict) else None  # cumulative in SGLang's stream too
    row: Dict[str, Any] = {"latency": latency, "ttft": ttft, "output_sha": output_digest(text),
                           "completion_tokens": int(meta.get("completion_tokens") or 0),
           "prompt_tokens": int(meta.get("prompt_tokens") or 0),
           "accept_length": _number(meta.get(stat_keys["accept_length"])),
           "verify_ct": _number(meta.get(stat_keys["verify_ct"])),
           "finish": _finish(meta.get("finish_reason"))}
    counts = _histogram_counts(meta.get("spec_accept_histogram"))
    if counts is not None:
        row["spec_counts"] = counts
    return row


def _histogram_counts(hist: Any) -> Optional[Dict[str, Any]]:
    """SGLang's per-request ``spec_accept_histogram`` (verify cycles by how many drafts they accepted) as the
    per-position counts vLLM's counters give: drafts = cycles, accepted[k] = cycles that accepted more than k."""
    if not isinstance(hist, list) or len(hist) < 2 or not all(isinstance(h, int) and h >= 0 for h in hist):
        return None
    return {"drafts": sum(hist), "accepted": [sum(hist[k + 1:]) for k in range(len(hist) - 1)]}


def _open(req: urllib.request.Request, url: str, timeout: float, api_key: Optional[str]) -> Any:
    try:
        return urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            exc.close()
            raise Unauthorized(unauthorized_message(exc.code, url, api_key)) from None
        raise


def _sse_chunks(resp: Any) -> Iterator[Dict[str, Any]]:
    """The JSON chunks of a server-sent-events answer (``data: {...}`` lines) up to ``[DONE]``; an error chunk raises."""
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        chunk = json.loads(payload)
        if isinstance(chunk, dict) and "error" in chunk:
            raise RuntimeError(str(chunk["error"]))
        yield chunk


def _one_completion(url: str, prompt: str, params: Dict[str, Any], stream: bool, timeout: float, model: str,
                    api_key: Optional[str]) -> Dict[str, Any]:
    """One OpenAI ``/v1/completions`` request (vLLM): counts from ``usage`` (streamed: the include_usage chunk)."""
    body: Dict[str, Any] = {"model": model, "prompt": prompt, "max_tokens": params["max_new_tokens"],
                            "temperature": params["temperature"], "stream": bool(stream)}
    if params.get("ignore_eos"):
        body["ignore_eos"] = True  # a vLLM extension of the OpenAI request
    if stream:
        body["stream_options"] = {"include_usage": True}
    req = _request(url, json.dumps(body).encode(), "POST", api_key)
    started = time.monotonic()
    ttft, finish = None, None
    usage: Dict[str, Any] = {}
    pieces: List[str] = []
    with _open(req, url, timeout, api_key) as resp:
        if not stream:
            doc = json.loads(resp.read().decode())
            usage = doc.get("usage") or {}
            finish = ((doc.get("choices") or [{}])[0]).get("finish_reason")
            pieces.append(str(((doc.get("choices") or [{}])[0]).get("text") or ""))
        else:
            for chunk in _sse_chunks(resp):
                choice = (chunk.get("choices") or [None])[0]
                if choice is not None:
                    if ttft is None and choice.get("text"):
                        ttft = time.monotonic() - started
                    pieces.append(str(choice.get("text") or ""))
                    finish = choice.get("finish_reason") or finish
                if chunk.get("usage"):
                    usage = chunk["usage"]
    return {"latency": time.monotonic() - started, "ttft": ttft, "output_sha": output_digest("".join(pieces)),
            "completion_tokens": int(usage.get("completion_tokens") or 0),
            "prompt_tokens": int(usage.get("prompt_tokens") or 0), "accept_length": None, "verify_ct": None,
            "finish": _finish(finish)}


def _one_openai(url: str, body: Dict[str, Any], timeout: float, model: Optional[str],
                api_key: Optional[str], extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """One request of a traffic file, sent as written to an OpenAI path (chat or completion) with the served
    model's name (and ``extra``: SGLang's ``return_spec_tokens_details``): counts from ``usage``; SGLang's
    per-request speculative stats where its answer carries them (``sglext.spec_tokens_details``: the 0.5.23 tree
    has them, 0.5.15.post1's does not and ignores the field)."""
    sent = dict(body, **(extra or {}))
    if model is not None:
        sent["model"] = model
    req = _request(url, json.dumps(sent).encode(), "POST", api_key)
    started = time.monotonic()
    try:
        with _open(req, url, timeout, api_key) as resp:
            doc = json.loads(resp.read().decode())
    except urllib.error.HTTPError as exc:  # the server's own reason, not urllib's "Bad Request"
        said = exc.read().decode("utf-8", "replace")[:500]
        exc.close()
        try:
            message = (json.loads(said).get("error") or {}).get("message") or said
        except (ValueError, AttributeError):
            message = said
        raise RuntimeError("HTTP %d: %s" % (exc.code, message)) from None
    usage = doc.get("usage") or {}
    choice = (doc.get("choices") or [{}])[0]
    ext = doc.get("sglext") or choice.get("sglext") or {}
    spec = ext.get("spec_tokens_details") if isinstance(ext, dict) else None
    spec = spec[0] if isinstance(spec, list) and spec else spec
    spec = spec if isinstance(spec, dict) else {}
    return {"latency": time.monotonic() - started, "ttft": None,
            "completion_tokens": int(usage.get("completion_tokens") or 0),
            "prompt_tokens": int(usage.get("prompt_tokens") or 0),
            "accept_length": _number(spec.get("spec_accept_length")) or None,
            "verify_ct": _number(spec.get("spec_verify_ct")) or None, "finish": _finish(choice.get("finish_reason"))}


def _number(value: Any) -> Optional[float]:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _finish(reason: Any) -> Optional[str]:
    return reason.get("type") if isinstance(reason, dict) else (reason if isinstance(reason, str) else None)


def _server_info(url: str, paths: List[str],
                 api_key: Optional[str] = None) -> Tuple[Optional[str], Optional[Dict[str, Any]]]:
    """(path, document) from the first info path answering 200 with a JSON object; (None, None) when none does."""
    for path in paths:
        status, text = http(url + path, timeout=10, api_key=api_key)
        if status != 200:
            continue
        try:
            document = json.loads(text)
        except ValueError:
            continue
        if isinstance(document, dict):
            return path, document
    return None, None


def cmd_bench(args: Args) -> Dict[str, Any]:
    url = _need(args, "url")
    # ``traffic``: the user's requests ([{"path", "body"}]), each sent once as written, in order, instead of prompts
    traffic = list(args.get("traffic") or [])
    prompts = [] if traffic else list(_need(args, "prompts"))
    n = len(traffic) if traffic else int(_need(args, "n"))
    if not prompts and not traffic:
        raise ProbeFailure("bad_args", "bench needs at least one prompt")
    stat_keys = dict(DEFAULT_STAT_KEYS, **(args.get("request_stat_keys") or {}))
    generate_url = url + str(args.get("generate_path") or "/generate")
    concurrency, stream, timeout = max(1, int(args.get("concurrency", 1))), bool(args.get("stream")), float(args.get("timeout", 600))
    params = {"max_new_tokens": int(_need(args, "max_new_tokens")), "temperature": float(args.get("temperature", 0.0))}
    if args.get("ignore_eos"):
        params["ignore_eos"] = True
    api_key = args.get("api_key") or None
    api = args.get("api") or "sglang"
    if api not in ("sglang", "openai"):
        raise ProbeFailure("bad_args", "bench api must be 'sglang' or 'openai', got %r" % (api,))
    model = None
    if api == "openai" or traffic:
        model = args.get("model") or _served_model(url, str(args.get("models_path") or "/v1/models"), api_key)
    metrics_url = url + str(args["metrics_path"]) if args.get("metrics_path") else None
    prefix = str(args.get("metric_prefix") or "")
    names = args.get("metric_names") or {}
    # per-request counter deltas are only that request's when requests do not overlap
    per_request_metrics = bool(metrics_url and names and concurrency == 1)
    flushed = None
    if args.get("flush", True) and args.get("flush_path"):
        flush_key = args.get("admin_api_key") or api_key
        flushed, _ = http(url + args["flush_path"], "POST", None, timeout=30, api_key=flush_key)
        if flushed in (401, 403):
            raise ProbeFailure("unauthorized", unauthorized_message(flushed, url + args["flush_path"], flush_key))
    jobs = [prompts[i % len(prompts)] for i in range(n)] if prompts else []
    results: List[Optional[Dict[str, Any]]] = [None] * n
    errors: List[str] = []
    failed: List[Dict[str, Any]] = []
    lock = threading.Lock()
    cursor = [0]
    refused: List[str] = []

    def worker() -> None:
        while True:
            with lock:
                i = cursor[0]
                cursor[0] += 1
            if i >= n or refused:
                return
            try:
                before = _scrape(metrics_url, prefix, api_key) if per_request_metrics and metrics_url else None
                if traffic:
                    row = _one_openai(url + str(traffic[i]["path"]), traffic[i]["body"], timeout, model, api_key,
                                      {"return_spec_tokens_details": True} if api == "sglang" else None)
                else:
                    row = _one_request(generate_url, jobs[i], params, stream, timeout, stat_keys, api_key, model)
                row["index"] = i
                if before is not None and metrics_url:
                    after = _scrape(metrics_url, prefix, api_key)
                    row["accept_length"] = _delta_accept(before, after, names)
                    if names.get("per_position"):
                        row["spec_counts"] = _delta_counts(before, after, names)
                results[i] = row
            except Unauthorized as exc:
                with lock:
                    refused.append(str(exc))
            except Exception as exc:  # noqa: BLE001 - one failed request is a row, not a crash
                with lock:
                    errors.append(f"request {i}: {type(exc).__name__}: {exc}")
                    failed.append({"index": i, "error": "%s: %s" % (type(exc).__name__, exc)})

    metrics_before = _scrape(metrics_url, prefix, api_key) if metrics_url else None
    wall_start = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(concurrency, n))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - wall_start
    if refused:
        raise ProbeFailure("unauthorized", refused[0])
    done = [r for r in results if r]
    tokens = sum(r["completion_tokens"] for r in done)
    lat = [r["latency"] for r in done]
    ttfts = [r["ttft"] for r in done if r["ttft"] is not None]
    accepts = [float(r["accept_length"]) for r in done if r["accept_length"] is not None]
    verify = [int(r["verify_ct"]) for r in done if r["verify_ct"] is not None]
    info_path, info = _server_info(url, list(args.get("info_paths") or []), api_key)
    metrics_after = _scrape(metrics_url, prefix, api_key) if metrics_url else None
    r4 = lambda v: None if v is None else round(v, 4)  # noqa: E731
    return {
        "n": n, "completed": len(done), "errors": errors, "concurrency": concurrency, "stream": stream,
        "flush_status": flushed, "wall_s": r4(wall), "completion_tokens": tokens,
        "tok_s": r4(tokens / wall) if wall > 0 and done else None,
        "latency_mean": r4(statistics.mean(lat)) if lat else None,
        "latency_p50": r4(_percentile(lat, 0.5)), "latency_p99": r4(_percentile(lat, 0.99)),
        "ttft_p50": r4(_percentile(ttfts, 0.5)), "ttft_p99": r4(_percentile(ttfts, 0.99)),
        "accept_length": r4(statistics.mean(accepts)) if accepts else None,
        "verify_ct": sum(verify) if verify else None, "server_info": info, "server_info_path": info_path,
        "api": api, "model": model, "metrics_before": metrics_before, "metrics_after": metrics_after,
        "per_request": [dict(r, latency=r4(r["latency"]), ttft=r4(r["ttft"])) for r in done],
        "failed": sorted(failed, key=lambda f: f["index"]),
    }


def _delta_accept(before: List[Dict[str, Any]], after: Optional[List[Dict[str, Any]]],
                  names: Dict[str, str]) -> Optional[float]:
    """1 + accepted/drafts over one request's change of the counters; None when it drafted nothing."""
    if after is None:
        return None
    drafts = (_total(after, names["drafts"]) or 0.0) - (_total(before, names["drafts"]) or 0.0)
    accepted = (_total(after, names["accepted"]) or 0.0) - (_total(before, names["accepted"]) or 0.0)
    return round(1.0 + accepted / drafts, 4) if drafts > 0 else None


def _delta_counts(before: List[Dict[str, Any]], after: Optional[List[Dict[str, Any]]],
                  names: Dict[str, str]) -> Optional[Dict[str, Any]]:
    """One request's drafts and accepted tokens per draft position (``metric_names["per_position"]``, labelled
    ``position``): the per-position acceptance of that request is accepted[k] / drafts."""
    if after is None:
        return None
    drafts = (_total(after, names["drafts"]) or 0.0) - (_total(before, names["drafts"]) or 0.0)
    positions: Dict[int, float] = {}
    for sign, samples in ((-1.0, before), (1.0, after)):
        for sample in samples:
            k = str(sample["labels"].get("position", ""))
            if sample["name"] == names["per_position"] and k.isdigit():
                positions[int(k)] = positions.get(int(k), 0.0) + sign * sample["value"]
    return {"drafts": int(drafts), "accepted": [int(positions[k]) for k in sorted(positions)]}


COMMANDS: Dict[str, Callable[[Dict[str, Any]], Dict[str, Any]]] = {
    "request": cmd_request, "wait": cmd_wait, "port": cmd_port, "bench": cmd_bench}


def main(args: Dict[str, Any]) -> Dict[str, Any]:
    command = args.get("command")
    if command not in COMMANDS:
        raise ProbeFailure("bad_args", "server_client needs a command: one of %s (got %r)"
                           % (", ".join(COMMANDS), command))
    return COMMANDS[command](args)


if __name__ == "__main__":
    run_probe(main)
