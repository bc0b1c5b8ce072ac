"""Probe: talk to an inference server from its own host (standard library only, Python >= 3.9).

HTTP calls, the readiness wait and the benchmark run next to the server, so latency is measured there and
not across the SSH link; the same code measures the lab over the local transport and a GPU host over SSH.
It speaks the probe protocol (_probe.py) like every probe; server log lines go to stderr as they arrive.

Args: ``{"command": "request" | "wait" | "port" | "bench", ...}``. What is engine-specific comes from the
orchestrator's engine adapter as arguments (``health_path``, ``info_paths``, ``flush_path``, ``generate_path``,
``request_stat_keys``); nothing here knows SGLang beyond its ``/generate`` request and ``meta_info`` shape.

Every command takes ``api_key`` (and ``admin_api_key``) for a server started with ``--api-key``: each HTTP call
sends ``Authorization: Bearer <key>`` (SGLang exempts /health*, /metrics and /ready; sending it there is
harmless), and ``flush_path`` uses the admin key when there is one (SGLang's ADMIN_OPTIONAL level). Keys come
on stdin with the other arguments, so they never appear on a command line.

- ``request``: ``{"url", "method"?, "body"?, "timeout"?}`` -> ``{"status", "text", "json"}`` (status 0: no connection)
- ``wait``: ``{"url", "log", "pgid", "timeout", "health_path", "ready_line"?, "line_grace"?, "interval"?}``:
  poll the health path while tailing the log until ready, the process group exits, or the timeout
- ``port``: ``{"host"?, "port"?, "wait"?}`` -> ``{"free", "port"}`` (no port, 0 or "auto": pick a free one)
- ``bench``: ``{"url", "prompts", "n", "max_new_tokens", ...}`` -> throughput, latency, per-request stats and the
  server's info document (``server_info``, from the first of ``info_paths`` that answers) for the adapter to read
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, List, Optional, Tuple

from _probe import ProbeFailure, run_probe

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


def cmd_port(args: Args) -> Dict[str, Any]:
    host, port = args.get("host", "127.0.0.1"), args.get("port")
    if port in (None, 0, "auto"):
        with socket.socket() as sock:
            sock.bind((host, 0))
            return {"free": True, "port": sock.getsockname()[1]}
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


def _one_request(url: str, prompt: str, params: Dict[str, Any], stream: bool, timeout: float,
                 stat_keys: Dict[str, str], api_key: Optional[str] = None) -> Dict[str, Any]:
    body = {"text": prompt, "sampling_params": params, "stream": bool(stream)}
    req = _request(url, json.dumps(body).encode(), "POST", api_key)
    started = time.monotonic()
    ttft, final = None, None
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            exc.close()
            raise Unauthorized(unauthorized_message(exc.code, url, api_key)) from None
        raise
    with resp:
        if not stream:
            final = json.loads(resp.read().decode())
        else:
            for raw in resp:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                chunk = json.loads(payload)
                if isinstance(chunk, dict) and "error" in chunk:
                    raise RuntimeError(str(chunk["error"]))
                if ttft is None and (chunk.get("text") or chunk.get("output_ids")):
                    ttft = time.monotonic() - started
                final = chunk
    latency = time.monotonic() - started
    if isinstance(final, list):
        final = final[0]
    meta = (final or {}).get("meta_info", {}) or {}
    return {"latency": latency, "ttft": ttft, "completion_tokens": int(meta.get("completion_tokens") or 0),
            "prompt_tokens": int(meta.get("prompt_tokens") or 0),
            "accept_length": _number(meta.get(stat_keys["accept_length"])),
            "verify_ct": _number(meta.get(stat_keys["verify_ct"])),
            "finish": _finish(meta.get("finish_reason"))}


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
    url, prompts, n = _need(args, "url"), list(_need(args, "prompts")), int(_need(args, "n"))
    if not prompts:
        raise ProbeFailure("bad_args", "bench needs at least one prompt")
    stat_keys = dict(DEFAULT_STAT_KEYS, **(args.get("request_stat_keys") or {}))
    generate_url = url + str(args.get("generate_path") or "/generate")
    concurrency, stream, timeout = max(1, int(args.get("concurrency", 1))), bool(args.get("stream")), float(args.get("timeout", 600))
    params = {"max_new_tokens": int(_need(args, "max_new_tokens")), "temperature": float(args.get("temperature", 0.0))}
    if args.get("ignore_eos"):
        params["ignore_eos"] = True
    api_key = args.get("api_key") or None
    flushed = None
    if args.get("flush", True) and args.get("flush_path"):
        flush_key = args.get("admin_api_key") or api_key
        flushed, _ = http(url + args["flush_path"], "POST", None, timeout=30, api_key=flush_key)
        if flushed in (401, 403):
            raise ProbeFailure("unauthorized", unauthorized_message(flushed, url + args["flush_path"], flush_key))
    jobs = [prompts[i % len(prompts)] for i in range(n)]
    results: List[Optional[Dict[str, Any]]] = [None] * n
    errors: List[str] = []
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
                results[i] = _one_request(generate_url, jobs[i], params, stream, timeout, stat_keys, api_key)
            except Unauthorized as exc:
                with lock:
                    refused.append(str(exc))
            except Exception as exc:  # noqa: BLE001 - one failed request is a row, not a crash
                with lock:
                    errors.append(f"request {i}: {type(exc).__name__}: {exc}")

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
        "per_request": [dict(r, latency=r4(r["latency"]), ttft=r4(r["ttft"])) for r in done],
    }


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
