"""Figures of the SGLang capture (issues 38, 43): a real SGLang (0.5.15.post1, ``orchestrator lab sglang-host``)
serving the lab's target with the capture model (remote_probes/engine/sglang_states.py), against transformers on
the same tokens.

Prints: the capture server's start; seconds per prompt (one greedy ``/generate`` with its hidden states, one at a
time and four in flight) against the same generation without them; the answer's bytes per prompt per layer and per
token per layer (JSON numbers, against 4 B a float32 value); max |diff| per layer id against transformers (id N
before the final norm, and after it once normed here).

    .venv/bin/python bench/engine_capture_sglang.py [--prompts 8] [--tokens 32] [--layers all|default|0,6,12]
        [--target DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import median
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.lab.sglang_host.host import SGLANG_VERSION, ensure_sglang_host, server_argv  # noqa: E402
from orchestrator.servers.sglang import SglangAdapter  # noqa: E402
from remote_probes.engine import sglang_states  # noqa: E402
from tests import vllm_differential as vd  # noqa: E402 - the server process helper the real-engine tests use

CONTEXT = 1024  # the host's --context-length


def sglang_port() -> int:
    """A free port SGLang takes: it refuses one above 55535, whose gRPC twin (port + 10000) would not exist
    (srt/server_args.py:2997-3005), and the kernel's ephemeral range reaches 60999."""
    ceiling = SglangAdapter.max_auto_port
    while (port := vd.free_port()) > ceiling:
        pass
    return port


def generate(url: str, ids: list[int], tokens: int, states: bool) -> tuple[int, float]:
    """One greedy generation; (answer bytes, seconds)."""
    body = {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": tokens},
            **({"return_hidden_states": True} if states else {})}
    request = urllib.request.Request(url + "/generate", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=600) as response:
        size = len(response.read())
    return size, time.monotonic() - started


def reference(target: Path, runs: list[dict[str, Any]], n: int) -> dict[str, float]:
    """max |diff| per id over every prompt's tokens, against transformers (``N`` before the norm, ``N normed``)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()
    worst: dict[str, float] = {}
    for run in runs:
        kept: dict[str, Any] = {}
        hook = model.model.norm.register_forward_pre_hook(lambda _m, a, kept=kept: kept.update(x=a[0][0].clone()))
        with torch.no_grad():
            hidden = [h[0] for h in model(input_ids=torch.tensor([run["token_ids"]]), output_hidden_states=True
                                          ).hidden_states]
            hook.remove()
            for j, state in run["states"].items():
                diffs = {str(j): (state - (kept["x"] if j == n else hidden[j])).abs().max()}
                if j == n:
                    diffs[f"{n} normed"] = (model.model.norm(state) - hidden[n]).abs().max()
                for key, value in diffs.items():
                    worst[key] = max(worst.get(key, 0.0), float(value))
    return worst


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--layers", default="all", help="all (0..N), default (SGLang's own), or ids: 0,6,12")
    ap.add_argument("--target", type=Path, default=None, help="default: the lab's (ensure_lab)")
    opts = ap.parse_args()
    vd.stop_servers_on_sigterm()
    host = ensure_sglang_host(None)
    if opts.target is None:
        from orchestrator.lab.building.inventory import ensure_lab

        opts.target = ensure_lab("seed-wiring").target
    target = opts.target.expanduser()
    config = json.loads((target / "config.json").read_text())
    n, hidden = config["num_hidden_layers"], config["hidden_size"]
    layers = (None if opts.layers == "default" else list(range(n + 1)) if opts.layers == "all"
              else sorted({int(i) for i in opts.layers.split(",")}))
    served = [2, n // 2, n - 3] if layers is None else layers  # SGLang's Llama default (target_capture.py reads it)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(target))
    texts = json.loads((REPO / "remote_probes" / "evaluation" / "draft_test_prompts.json").read_text())
    prompts = [tok(t)["input_ids"] for t in texts[:opts.prompts]]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, **host.env(work / "run")}
        capture = sglang_states.capture_env(layers, sglang_states.target_architectures(str(target)))
        capture["PYTHONPATH"] = os.pathsep.join(p for p in (capture["PYTHONPATH"], env.get("PYTHONPATH")) if p)
        port = sglang_port()
        srv = vd.ServerProcess("sglang", server_argv(host.python, target, port,
                                                     *sglang_states.capture_argv(CONTEXT)),
                               {**env, **capture}, work / "sglang.log", port)
        started = time.monotonic()
        srv.start()
        try:
            if not srv.wait_ready(600):
                raise SystemExit(f"SGLang exited before it served:\n{srv.log_text()[-3000:]}")
            ready = time.monotonic() - started
            # the first request of each prompt length after a start runs seconds (measured): warm both paths
            first = {states: [generate(srv.url, p, opts.tokens, states)[1] for p in prompts]
                     for states in (False, True)}
            pairs = [(generate(srv.url, p, opts.tokens, False), generate(srv.url, p, opts.tokens, True))
                     for p in prompts]  # interleaved: a load that comes and goes weighs on both alike
            plain, raw = [a for a, _ in pairs], [b for _, b in pairs]
            plain_first = generate(srv.url, prompts[0], opts.tokens, False)[1]
            raw_first = generate(srv.url, prompts[0], opts.tokens, True)[1]
            runs = sglang_states.capture(srv.url, prompts, opts.tokens, served, hidden_size=hidden)
            t0 = time.monotonic()
            with ThreadPoolExecutor(max_workers=4) as pool:
                list(pool.map(lambda p: sglang_states.capture(srv.url, [p], opts.tokens, served,
                                                              hidden_size=hidden), prompts))
            four = time.monotonic() - t0
        finally:
            left = srv.stop()
    tokens = [len(r["token_ids"]) for r in runs]
    size = sum(s for s, _ in raw)
    print(f"SGLang {SGLANG_VERSION}, CPU, float32; target {n} layers, hidden {hidden}; capture ids {served} "
          f"({'SGLang default' if layers is None else 'asked'}); {len(prompts)} prompts x {opts.tokens} new tokens "
          f"(~{sum(tokens) / len(tokens):.0f} tokens with states each)")
    print(f"server ready {ready:.1f} s; processes left after stop: {left}; first requests after the start "
          f"(without states, then with): {' '.join(f'{t:.1f}' for t in first[False])} s, then "
          f"{' '.join(f'{t:.1f}' for t in first[True])} s")
    print(f"per prompt (median; the 2 cores are shared): {median(r['seconds'] for r in runs):.2f} s with states "
          f"(read into tensors), {median(s for _, s in raw):.2f} s the raw answer, {median(s for _, s in plain):.2f} s "
          f"without states; 4 in flight: {four / len(prompts):.2f} s per prompt (prompt 1 again: "
          f"{raw_first:.2f} s with, {plain_first:.2f} s without)")
    print(f"answer: {size / len(raw) / 1024:.0f} KiB per prompt, {size / len(raw) / len(served) / 1024:.1f} KiB per "
          f"prompt per layer, {size / sum(tokens) / len(served):.0f} B per token per layer "
          f"({hidden * 4} B as float32; the plain answer {sum(s for s, _ in plain) / len(plain):.0f} B)")
    worst = reference(target, runs, n)
    print("max |diff| vs transformers: " + ", ".join(f"id {k}: {v:.2e}" for k, v in worst.items()))


if __name__ == "__main__":
    main()
