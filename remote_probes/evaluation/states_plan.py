"""Probe: where the draft test should get the target's hidden states, and which layers a capture server must write
(standard library only: it decides before anything large loads).

Args (JSON): {"target": dir, "draft": dir, "engine": "sglang" | "vllm" (whose wiring rule the draft is served by),
"server_engine": the host's ``engine`` (``vllm``, ``sglang``: a real engine, which captures; the lab's stand-ins are
``lab`` and ``lab-vllm``), "choice": "auto" |
"engine" | "transformers", "dtype"?: "auto" | "float32" | "bfloat16" | "float16"}.

- ``transformers``: the test loads the target in its own process (the path for targets that fit; the cross-check).
- ``engine``: a server started with ``capture:`` computes the states as it serves, sharded as it is
  (engine_states.py): a real vLLM (its ``extract_hidden_states`` method) or a real SGLang (``return_hidden_states``
  with the target's class capturing the layers, sglang_states.py); the lab's stand-ins do not capture.
- ``auto``: transformers where the target and the draft fit the memory free where the test would load them
  (checks/runnable.py ``check_fits``: a GPU's free memory from nvidia-smi where there is one, else this host's,
  cgroup limits included), else the engine where one captures.

``layers``: what a capture server must write: every candidate wiring the draft test scores (eagle3/wiring.py
``auto_wirings``), the wiring the engine serves, and the last layer (id N: a fix may feed the final state).
Where the installed vLLM cannot capture the embedding output for the target's class, id 0 is not asked for (the
draft test looks it up), and ``embedding_note`` says why, with the engine's line.
Result: {source, why, layers, num_layers, fits, needed_bytes, available_bytes, where, engine_can_capture,
embedding_note}.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any, Dict, List, Optional, Tuple

from remote_probes.agent.protocol import ProbeFailure, run_probe
from remote_probes.checks.runnable import check_fits, mem_available
from remote_probes.eagle3.wiring import auto_wirings
from remote_probes.engine.engine_states import ENGINES as CAPTURE_ENGINES
from remote_probes.engine.served_wiring import server_wiring
from remote_probes.engine.target_capture import target_loop
from remote_probes.engine.vllm_capture import capture_rules, find_vllm_root

CHOICES = ("auto", "engine", "transformers")
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def _config(path: str, what: str) -> Dict[str, Any]:
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as exc:
        raise ProbeFailure("bad_args", "cannot read the %s's config.json in %s: %s" % (what, path, exc),
                           field=what) from None
    if not isinstance(config, dict):
        raise ProbeFailure("bad_args", "the %s's config.json is not a JSON object" % what, field=what)
    return config


def num_layers(config: Dict[str, Any]) -> int:
    """The target's decoder layers: its own, or its language model's (a wrapper's ``text_config``)."""
    for node in (config, config.get("text_config"), config.get("language_config")):
        if isinstance(node, dict) and isinstance(node.get("num_hidden_layers"), int):
            return int(node["num_hidden_layers"])
    raise ProbeFailure("bad_args", "the target's config.json has no num_hidden_layers (nor in text_config)",
                       field="target")


def gpu_free() -> Optional[Tuple[int, str]]:
    """The first GPU's free memory from nvidia-smi, or None without one (the draft test loads where torch sees a
    GPU: this is the same device)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=memory.free", "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=20, check=False).stdout.split()
        return int(out[0]) * 2 ** 20, "GPU 0"
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def _size(n: Optional[float]) -> str:
    if n is None:
        return "an unknown amount"
    return "%.1f GiB" % (n / 2 ** 30) if n >= 2 ** 30 else "%.0f MiB" % (n / 2 ** 20)


def main(args: Dict[str, Any]) -> Dict[str, Any]:
    for key in ("target", "draft"):
        if not isinstance(args.get(key), str) or not os.path.isdir(args[key]):
            raise ProbeFailure("bad_args", "%s must be a model directory on this host, got %r" % (key, args.get(key)),
                               field=key)
    choice, engine = args.get("choice", "auto"), args.get("engine", "sglang")
    if choice not in CHOICES:
        raise ProbeFailure("bad_args", "choice must be one of %s, got %r" % (", ".join(CHOICES), choice),
                           field="choice")
    dtype = args.get("dtype", "auto")
    target_cfg, draft_cfg = _config(args["target"], "target"), _config(args["draft"], "draft")
    n = num_layers(target_cfg)
    wirings = [c["wiring"] for c in auto_wirings(draft_cfg, n)]
    served = server_wiring(draft_cfg, n, engine) if engine in ("sglang", "vllm") else None
    layers = sorted({i for w in wirings + ([served] if served else []) for i in w} | {n})
    layers, embedding_note = engine_capturable(layers, args["target"], args.get("server_engine"))
    gpu = gpu_free()
    available: Optional[int]
    if gpu is not None:
        available, where = gpu
        per_param = BYTES.get(dtype)  # "auto" on a GPU: the stored dtype
    else:
        available, where = mem_available(), "this host's memory"
        per_param = BYTES.get(dtype, 4)  # "auto" on a CPU loads float32 (draft_test._load_target)
    try:
        memory = check_fits(args["target"], args["draft"], bytes_per_param=per_param, available=available,
                            where=where)
        fits = True
    except ProbeFailure as exc:
        if exc.kind != "too_large":
            raise
        memory, fits = exc.details, False
    can_capture = args.get("server_engine") in CAPTURE_ENGINES
    need, room = _size(memory["needed_bytes"]), _size(available)
    if choice == "engine" and not can_capture:
        raise ProbeFailure("engine_capture", "hidden_states_from: engine needs a real vLLM or SGLang server (host "
                           "engine vllm or sglang); this host serves with %r, whose capture path is not built here"
                           % args.get("server_engine"), field="choice")
    if choice == "transformers" or (choice == "auto" and (fits or not can_capture)):
        source = "transformers"
        why = ("asked" if choice == "transformers" else
               "the target and the draft fit (%s needed, %s free on %s)" % (need, room, where) if fits else
               "the target does not fit (%s needed, %s free on %s) and this host's engine (%s) has no capture path "
               "here: the draft test will refuse it" % (need, room, where, args.get("server_engine")))
    else:
        source = "engine"
        why = ("asked" if choice == "engine" else "the target does not fit the test's process (%s needed, %s free "
               "on %s): the serving engine computes its hidden states" % (need, room, where))
    return {"source": source, "why": why, "layers": layers, "num_layers": n, "fits": fits,
            "needed_bytes": memory.get("needed_bytes"), "available_bytes": available, "where": where,
            "engine_can_capture": can_capture, "embedding_note": embedding_note}


def engine_capturable(layers: List[int], target: str, server_engine: Any,
                      root: Optional[str] = None) -> Tuple[List[int], Optional[str]]:
    """``layers`` less id 0 where the installed vLLM cannot capture the embedding output for this target's class
    (its layer loop appends ``hidden_states + residual`` at a layer's entry, and residual is None before layer 0:
    DeepSeek-V3's in 0.32, a TypeError in the engine's first forward that kills it); the draft test then looks index 0
    up in the target's embedding (draft_test.engine_layers). Read from the installed source (``root``: the vllm
    package directory, default the one this interpreter finds), with its line."""
    if server_engine != "vllm" or 0 not in layers:
        return layers, None
    root = root or find_vllm_root()
    if root is None:
        return layers, None
    rules = capture_rules(root, None, target_loop(target, "vllm", root))
    if rules.get("embedding") is not False:
        return layers, None
    line = next(("%s:%s" % (e["file"], e["line"]) for e in rules.get("evidence", [])
                 if "residual" in str(e.get("text"))), rules.get("loop") or "its layer loop")
    return [i for i in layers if i != 0], (
        "vLLM %s captures at a layer's entry (%s), where the residual is None before layer 0: the capture server "
        "is not asked for id 0; the draft test looks the embedding output up in the target's embedding"
        % (rules.get("version"), line))


if __name__ == "__main__":
    run_probe(main)
