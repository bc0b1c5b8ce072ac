"""Runs ON the server's host with its python (stdlib only, >= 3.9): HTTP calls, readiness wait, benchmark.

The orchestrator pushes this file once per session and runs it through the host's transport, so the same
code measures the lab over the local transport and a GPU host over SSH (latency is measured next to the
server, not across the SSH link). Input: one JSON document on stdin. Output: one JSON line on stdout
between ``@@SERVER-CLIENT-BEGIN@@`` / ``@@SERVER-CLIENT-END@@``; server log lines go to stderr as they arrive.

Commands: ``request`` (one HTTP call), ``wait`` (poll /health while tailing the log until ready, the
process group exits, or the timeout), ``port`` (is a port free / pick a free one), ``bench``.
"""

import json
import os
import socket
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

BEGIN, END = "@@SERVER-CLIENT-BEGIN@@", "@@SERVER-CLIENT-END@@"


def http(url, method="GET", body=None, timeout=10.0):
    """(status, text); status 0 with the error text when the connection itself failed."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (OSError, ValueError) as exc:  # refused, reset, timed out
        return 0, str(exc)


def cmd_request(args):
    status, text = http(args["url"], args.get("method", "GET"), args.get("body"), float(args.get("timeout", 10)))
    try:
        parsed = json.loads(text) if text.strip()[:1] in ("{", "[") else None
    except ValueError:
        parsed = None
    return {"status": status, "text": text[:200000], "json": parsed}


def _group_alive(pgid):
    try:
        os.killpg(int(pgid), 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def cmd_wait(args):
    """Ready = /health 200 and (the ready line seen, or no ready line expected, or health kept OK for grace s)."""
    url, log_path, pgid = args["url"], args["log"], args["pgid"]
    timeout, ready_line = float(args["timeout"]), args.get("ready_line")
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
        status, _ = http(url + "/health", timeout=5)
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


def cmd_port(args):
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


def _port_free(host, port):
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


def _percentile(values, q):
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _one_request(url, prompt, params, stream, timeout):
    body = {"text": prompt, "sampling_params": params, "stream": bool(stream)}
    req = urllib.request.Request(url + "/generate", data=json.dumps(body).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    started = time.monotonic()
    ttft, final = None, None
    with urllib.request.urlopen(req, timeout=timeout) as resp:
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
            "prompt_tokens": int(meta.get("prompt_tokens") or 0), "accept_length": meta.get("spec_accept_length"),
            "verify_ct": meta.get("spec_verify_ct"), "finish": (meta.get("finish_reason") or {}).get("type")}


def cmd_bench(args):
    url, prompts, n = args["url"], list(args["prompts"]), int(args["n"])
    concurrency, stream, timeout = max(1, int(args.get("concurrency", 1))), bool(args.get("stream")), float(args.get("timeout", 600))
    params = {"max_new_tokens": int(args["max_new_tokens"]), "temperature": float(args.get("temperature", 0.0))}
    if args.get("ignore_eos"):
        params["ignore_eos"] = True
    flushed = None
    if args.get("flush", True):
        flushed, _ = http(url + "/flush_cache", "POST", None, timeout=30)
    jobs = [prompts[i % len(prompts)] for i in range(n)]
    results: list[dict[str, Any] | None] = [None] * n  # local annotations are never evaluated: fine on 3.9
    errors: list[str] = []
    lock = threading.Lock()
    cursor = [0]

    def worker():
        while True:
            with lock:
                i = cursor[0]
                cursor[0] += 1
            if i >= n:
                return
            try:
                results[i] = _one_request(url, jobs[i], params, stream, timeout)
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
    done = [r for r in results if r]
    tokens = sum(r["completion_tokens"] for r in done)
    lat = [r["latency"] for r in done]
    ttfts = [r["ttft"] for r in done if r["ttft"] is not None]
    accepts = [float(r["accept_length"]) for r in done if r["accept_length"] is not None]
    verify = [int(r["verify_ct"]) for r in done if r["verify_ct"] is not None]
    status, text = http(url + "/server_info", timeout=10)
    if status == 404:
        status, text = http(url + "/get_server_info", timeout=10)
    server_accept = None
    try:
        states = json.loads(text).get("internal_states") or [] if status == 200 else []
        reported = [s.get("avg_spec_accept_length") for s in states if isinstance(s, dict)]
        vals = [float(v) for v in reported if v is not None]
        server_accept = round(sum(vals) / len(vals), 4) if vals else None
    except (ValueError, AttributeError):
        pass
    r4 = lambda v: None if v is None else round(v, 4)  # noqa: E731
    return {
        "n": n, "completed": len(done), "errors": errors, "concurrency": concurrency, "stream": stream,
        "flush_status": flushed, "wall_s": r4(wall), "completion_tokens": tokens,
        "tok_s": r4(tokens / wall) if wall > 0 and done else None,
        "latency_mean": r4(statistics.mean(lat)) if lat else None,
        "latency_p50": r4(_percentile(lat, 0.5)), "latency_p99": r4(_percentile(lat, 0.99)),
        "ttft_p50": r4(_percentile(ttfts, 0.5)), "ttft_p99": r4(_percentile(ttfts, 0.99)),
        "accept_length": r4(statistics.mean(accepts)) if accepts else None,
        "server_accept_length": server_accept, "verify_ct": sum(verify) if verify else None,
        "per_request": [dict(r, latency=r4(r["latency"]), ttft=r4(r["ttft"])) for r in done],
    }


COMMANDS = {"request": cmd_request, "wait": cmd_wait, "port": cmd_port, "bench": cmd_bench}


def main():
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command not in COMMANDS:
        sys.stderr.write("usage: server_client.py {" + "|".join(COMMANDS) + "} < args.json\n")
        return 2
    try:
        result = {"ok": True, "result": COMMANDS[command](json.loads(sys.stdin.read() or "{}"))}
    except Exception as exc:  # noqa: BLE001 - reported to the orchestrator as data
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write("\n" + BEGIN + "\n" + json.dumps(result) + "\n" + END + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
