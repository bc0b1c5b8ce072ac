"""``python -m orchestrator.lab.stand_in.server``: the orchestrator lab's CPU stand-in for ``python -m sglang.launch_server``.

It is NOT SGLang, and says so in its first log line and in /server_info. It parses its command line with the
parser of the SGLang version whose tree is on its path (0.5.12.post1 or 0.5.23; server_args.py), so unknown and
ambiguous flags exit 2 with that version's message, applies SGLang's
rules (server_args.py), loads a tiny HF Llama target and an EAGLE-3 draft in SGLang's checkpoint layout, and really
runs greedy chain speculative decoding (model_runner.py) behind SGLang's HTTP API (server_http.py), so accept
length and tok/s are measured. Log lines follow SGLang's (``[%Y-%m-%d %H:%M:%S] message``).

Lab-only flags start with ``--lab-`` (see server_args.py). SIGTERM or SIGINT stops it at once.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from orchestrator.lab.stand_in.process import http_json
from orchestrator.lab.stand_in.sglang_args import (
    LAB_ARCHITECTURES,
    SGLANG_VERSION,
    StartupError,
    build_parser,
    resolve,
)

log = logging.getLogger("orchestrator.lab.stand_in.server")
WARMUP_PROMPT = "The capital city of France is"
READY_LINE = "The server is fired up and ready to roll!"


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), format="[%(asctime)s] %(message)s",
                        datefmt="%Y-%m-%d %H:%M:%S", stream=sys.stderr, force=True)


def _fail(exc: StartupError) -> int:
    log.error("lab server start-up failed")
    print(f"{exc.kind}: {exc}", file=sys.stderr, flush=True)
    return 1


def _target_architecture(model_path: str) -> str:
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise StartupError(f"cannot read {model_path}/config.json: {exc}", kind="OSError") from None
    archs = config.get("architectures") or ["LlamaForCausalLM"]
    if archs[0] not in LAB_ARCHITECTURES:
        raise StartupError(f"the lab serves {' and '.join(LAB_ARCHITECTURES)} targets only, {model_path} is "
                           f"{archs[0]}")
    return archs[0]


def _warmup(host: str, port: int, api_key: str | None = None) -> None:
    """As SGLang's launcher does: GET /model_info, then a short /generate, over HTTP (with the API key's
    ``Authorization: Bearer`` header when the server has one, as SGLang's ``_execute_server_warmup`` sends it)."""
    base = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"
    for path, body, timeout in (("/model_info", None, 60.0),
                                ("/generate", {"text": WARMUP_PROMPT, "_lab_warmup": True,
                                               "sampling_params": {"temperature": 0, "max_new_tokens": 8}}, 300.0)):
        status, answer = http_json(base + path, body, timeout=timeout, api_key=api_key)
        if status != 200:
            raise RuntimeError(f"warm-up {path} answered HTTP {status}: {str(answer)[:200]}")


def main(argv: list[str] | None = None) -> int:
    # SGLang's own parser, from the sglang tree on the path: unknown or ambiguous flags exit 2 with its message
    ns = build_parser().parse_args(argv)
    _configure_logging(getattr(ns, "log_level", None) or "info")
    version = ns.sglang_tree.version if ns.sglang_tree else SGLANG_VERSION
    log.info("orchestrator lab server: a CPU stand-in for SGLang %s's launch_server, NOT SGLang "
             "(python -m orchestrator.lab.stand_in.server, pid %d)%s", version, os.getpid(),
             "" if ns.sglang_tree else "; no sglang tree on its path, so its own subset of SGLang's flags")

    def stop(signum: int, _frame: object) -> None:
        log.info("Received %s; the lab server exits now.", signal.Signals(signum).name)
        logging.shutdown()
        os._exit(0)  # nothing to flush: models are read-only, requests are batch-1

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        args = resolve(ns, target_architecture=_target_architecture(ns.model_path))
    except StartupError as exc:
        return _fail(exc)
    for line in args.warnings:
        log.warning(line)
    log.info("server_args=%s", args.public())
    nnodes = int(getattr(ns, "nnodes", 1) or 1)
    if nnodes > 1:  # SGLang's --nnodes/--node-rank/--dist-init-addr: ranks > 0 join rank 0 and serve no HTTP
        from orchestrator.lab.stand_in import ranks

        try:
            if int(getattr(ns, "node_rank", 0) or 0) > 0:
                return ranks.serve_as_worker(nnodes, int(ns.node_rank), ns.dist_init_addr, log.info)
            ranks.wait_for_workers(nnodes, ns.dist_init_addr, log.info)
        except StartupError as exc:
            return _fail(exc)

    from orchestrator.lab.stand_in.sglang_http import LabHTTPServer, ServerState

    state = ServerState(args=args)
    try:
        httpd = LabHTTPServer(state)
    except OSError as exc:
        return _fail(StartupError(f"cannot bind {args.host}:{args.port}: {exc.strerror or exc}", kind="OSError"))
    threading.Thread(target=httpd.serve_forever, name="http", daemon=True).start()
    try:
        from orchestrator.lab.stand_in.model_runner import LabModelRunner

        log.info("Load weight begin. target=%s draft=%s", args.model_path, args.speculative_draft_model_path)
        state.models = LabModelRunner(args, log=log.info)
    except StartupError as exc:
        return _fail(exc)
    models = state.models
    for note in models.notes:
        log.warning("draft load: %s", note)
    if models.draft is not None:
        log.info("speculative decoding: %s, steps=%d topk=%d draft_tokens=%d, aux hidden states (HF indices) %s",
                 args.speculative_algorithm, args.speculative_num_steps, args.speculative_eagle_topk,
                 args.speculative_num_draft_tokens, models.capture)
    log.info("Uvicorn running on http://%s:%d (Press CTRL+C to quit)", args.host, args.port)
    try:
        _warmup(args.host, args.port, args.api_key)
    except (OSError, RuntimeError) as exc:  # no connection, or an error answer
        return _fail(StartupError(f"warmup request failed: {exc}", kind="RuntimeError"))
    state.ready = True
    log.info(READY_LINE)
    threading.Event().wait()  # serve until a signal ends the process
    return 0


if __name__ == "__main__":
    from orchestrator.lab.stand_in.warm_start import start_warm_or_cold

    start_warm_or_cold("orchestrator.lab.stand_in.server")  # warm: runs the server forked, never returns; cold: says why
    sys.exit(main())
