"""The lab's SGLang stand-in held to a real SGLang (0.5.15.post1 on this CPU, ``orchestrator lab sglang-host``) for
everything but speculation, which that host cannot run (research/sglang-cpu.md).

Used by bench/lab_vs_sglang.py (the table in BENCHMARKS.md) and tests/lab/test_lab_vs_sglang.py. Three things:
- greedy outputs: both serve the lab's target with the host's CPU flags (float32) and answer ``/generate`` for the
  bundled bench prompts (the flagship's), greedy; the output token ids are compared request by request;
- refusals: a handful of flag sets, each decided by SGLang's own ``prepare_server_args`` run by the host's python (one
  process for all of them) and by the lab's own parser and rules (``sglang_args``: SGLang's parser rebuilt from the
  same tree, then ``resolve``), in process; the first error line is compared;
- resolved arguments: ``/server_info`` of both for the same flags, on the keys the product reads
  (servers/sglang.py ``effective_args``: the requested flags, plus the speculative fields and the sizes below).

The lab runs with the real server's own tree on its path (a directory holding only ``sglang`` -> it and its
dist-info), so its parser is 0.5.15.post1's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from contextlib import redirect_stderr
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from orchestrator.lab.sglang_host.host import CPU_FLAGS, SglangHost, server_argv  # noqa: E402
from tests import vllm_differential as vd  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

#: what the product reads from /server_info beyond the requested flags (servers/sglang.py, the flag diff, the bench)
PRODUCT_KEYS = ("model_path", "tokenizer_path", "served_model_name", "dtype", "device", "tp_size",
                "max_running_requests", "context_length", "max_total_tokens", "chunked_prefill_size",
                "disable_overlap_schedule", "enable_mixed_chunk", "speculative_algorithm",
                "speculative_draft_model_path", "speculative_num_steps", "speculative_eagle_topk",
                "speculative_num_draft_tokens", "speculative_token_map", "max_total_num_tokens", "max_req_input_len",
                "version")
#: keys the lab cannot hold to a real server: SGLang resolves them from the device and the memory it finds (the
#: lab has no KV pool nor backends), or draws them at random; BENCHMARKS.md says each
HARDWARE_KEYS = ("mem_fraction_static", "chunked_prefill_size", "attention_backend", "sampling_backend",
                 "random_seed")
#: flag sets beyond the host's CPU flags (None: the port is replaced): name -> (extra argv, port)
FLAG_CASES: dict[str, tuple[tuple[str, ...], int | None]] = {
    "valid": ((), None),
    "unknown flag": (("--no-such-flag", "1"), None),
    "bad value type": (("--max-running-requests", "many"), None),
    "bad choice": (("--dtype", "float64"), None),
    "port out of range (ServerArgs)": ((), 60000),
}

#: run by the host's python: SGLang's own prepare_server_args for every argv (one import), first error of each
_REAL_REFUSALS = r"""
import contextlib, io, json, sys
from sglang.srt.server_args import prepare_server_args
out = {}
for name, argv in json.loads(sys.argv[1]).items():
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = prepare_server_args(argv)
            if hasattr(args, "resolve_once"):
                args.resolve_once()
        out[name] = None
    except SystemExit as exc:
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        out[name] = next((ln for ln in reversed(lines) if ": error: " in ln), "exit %s" % exc.code)
    except Exception as exc:
        out[name] = "%s: %s" % (type(exc).__name__, exc)
print("REFUSALS" + json.dumps(out))
"""


def real_root(host: SglangHost) -> Path:
    """The host's ``sglang`` package directory."""
    [root] = (host.root / "venv" / "lib").glob("python*/site-packages/sglang")
    return root


def tree_site(root: Path, work: Path) -> Path:
    """A directory holding only ``sglang`` -> the real tree and its dist-info: the lab's path (its parser's tree)."""
    site = work / "sglang-tree"
    site.mkdir(parents=True, exist_ok=True)
    for src in [root, *root.parent.glob("sglang-*.dist-info")]:
        if not (site / src.name).exists():
            (site / src.name).symlink_to(src)
    return site


def argv_for(target: Path, port: int, extra: tuple[str, ...] = ()) -> list[str]:
    """The server's flags after its launcher: the host's CPU flags, as server_argv gives them."""
    return server_argv("python", target, port, *extra)[3:]


def real_server(host: SglangHost, target: Path, work: Path) -> vd.ServerProcess:
    port = vd.sglang_port()
    return vd.ServerProcess("sglang", server_argv(host.python, target, port), {**os.environ, **host.env(work / "run")},
                            work / "sglang.log", port)


def lab_server(target: Path, work: Path, site: Path) -> vd.ServerProcess:
    port = vd.sglang_port()
    argv = [sys.executable, "-m", "orchestrator.lab.stand_in.server", *argv_for(target, port)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(site)]), "TORCHDYNAMO_DISABLE": "1"}
    return vd.ServerProcess("lab", argv, env, work / "lab.log", port)


def wait_health(srv: vd.ServerProcess, timeout: float) -> bool:
    """/health answers 200 (True) or the process exited (False); the lab serves no /v1/models (vd's wait)."""
    assert srv.proc is not None
    proc = srv.proc
    if not wait_until(lambda: proc.poll() is not None or vd.http(srv.url + "/health")[0] == 200, timeout=timeout,
                      interval=0.5):
        raise TimeoutError(f"{srv.engine} not ready after {timeout:.0f}s (log: {srv.log})")
    return proc.poll() is None


@dataclass
class Side:
    """What one server answered: greedy generations, /server_info, and whether its stop left a process."""

    outputs: list[dict[str, Any]]
    info: dict[str, Any]
    seconds: float
    left_after_stop: list[int]
    extra: Any = None  # what ``serve``'s ``also`` measured while the server was up


def serve(srv: vd.ServerProcess, prompts: list[str], tokens: int, ready_timeout: float,
          also: Callable[[vd.ServerProcess], Any] | None = None) -> Side:
    """Start, wait, send every prompt greedy (one at a time), read /server_info, run ``also`` (a further
    measurement, kept as ``extra``), stop (the whole group)."""
    import time

    started = time.monotonic()
    srv.start()
    try:
        if not wait_health(srv, ready_timeout):
            raise RuntimeError(f"{srv.engine} exited before it served:\n{srv.log_text()[-3000:]}")
        outputs = []
        for prompt in prompts:
            body = {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": tokens}}
            status, text = vd.http(srv.url + "/generate", body, timeout=600)
            assert status == 200, (srv.engine, status, text[:500])
            answer = json.loads(text)
            meta = answer["meta_info"]
            outputs.append({"ids": answer["output_ids"], "finish": meta["finish_reason"],
                            "prompt_tokens": meta["prompt_tokens"], "completion_tokens": meta["completion_tokens"]})
        status, text = vd.http(srv.url + "/server_info", timeout=60)
        assert status == 200, (srv.engine, status, text[:500])
        info = json.loads(text)
        extra = also(srv) if also is not None else None
        seconds = time.monotonic() - started
    finally:
        left = srv.stop()
    return Side(outputs, info, round(seconds, 1), left, extra)


def compare_outputs(lab: Side, real: Side) -> dict[str, Any]:
    """Request by request: identical ids, the first position that differs, finish reasons and prompt lengths."""
    rows = []
    for i, (a, b) in enumerate(zip(lab.outputs, real.outputs, strict=True)):
        same = first_same(a["ids"], b["ids"])
        first = None if same == len(a["ids"]) == len(b["ids"]) else same
        rows.append({"request": i, "same": first is None and a["finish"] == b["finish"], "first_diff": first,
                     "lab_tokens": len(a["ids"]), "real_tokens": len(b["ids"]),
                     "same_prompt_tokens": a["prompt_tokens"] == b["prompt_tokens"],
                     "lab_finish": a["finish"], "real_finish": b["finish"]})
    same_tokens = sum(first_same(a["ids"], b["ids"]) for a, b in zip(lab.outputs, real.outputs, strict=True))
    return {"requests": len(rows), "identical": sum(r["same"] for r in rows), "rows": rows,
            "tokens_compared": sum(len(b["ids"]) for b in real.outputs), "tokens_same_prefix": same_tokens}


def first_same(a: list[int], b: list[int]) -> int:
    """How many leading ids agree."""
    n = 0
    for x, y in zip(a, b, strict=False):  # up to the shorter
        if x != y:
            break
        n += 1
    return n


def compare_info(lab: dict[str, Any], real: dict[str, Any], keys: tuple[str, ...] = PRODUCT_KEYS
                 ) -> list[dict[str, Any]]:
    """Key by key (``<absent>`` where a document lacks it); ``hardware``: a key the lab cannot hold (HARDWARE_KEYS)."""
    rows = []
    for key in dict.fromkeys((*keys, *HARDWARE_KEYS)):
        a, b = lab.get(key, "<absent>"), real.get(key, "<absent>")
        rows.append({"key": key, "lab": a, "real": b, "same": a == b, "hardware": key in HARDWARE_KEYS})
    return rows


def case_argvs(target: Path, port: int) -> dict[str, list[str]]:
    return {name: argv_for(target, fixed or port, extra) for name, (extra, fixed) in FLAG_CASES.items()}


def real_refusals(host: SglangHost, argvs: dict[str, list[str]], work: Path, timeout: float = 600
                  ) -> dict[str, str | None]:
    """SGLang's own verdict on each argv (None: accepted), from one process of the host's python."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(host.env(work / "refusals"))
    proc = subprocess.run([str(host.python), "-c", _REAL_REFUSALS, json.dumps(argvs)], capture_output=True,
                          text=True, timeout=timeout, env=env)
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("REFUSALS")), None)
    assert line is not None, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    answer: dict[str, str | None] = json.loads(line[len("REFUSALS"):])
    return answer


def lab_refusals(root: Path, version: str, argvs: dict[str, list[str]]) -> dict[str, str | None]:
    """The lab server's own verdict on each argv (None: accepted): its parser from ``root``, then its rules, as
    ``python -m orchestrator.lab.stand_in.server`` runs them before it loads a weight."""
    from orchestrator.lab.stand_in.server import _target_architecture
    from orchestrator.lab.stand_in.sglang_args import SglangTree, StartupError, build_parser, resolve
    from remote_probes.engine.sglang_argparse import detect_layout

    tree = SglangTree(root=str(root), version=version, layout=detect_layout(str(root)))
    out: dict[str, str | None] = {}
    for name, argv in argvs.items():
        err = StringIO()
        try:
            with redirect_stderr(err):
                ns = build_parser(tree).parse_args(argv)
            resolve(ns, target_architecture=_target_architecture(ns.model_path))
            out[name] = None
        except SystemExit as exc:
            lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
            out[name] = next((ln for ln in reversed(lines) if ": error: " in ln), f"exit {exc.code}")
        except StartupError as exc:
            out[name] = f"{exc.kind}: {exc}"
    return out


__all__ = ["CPU_FLAGS", "FLAG_CASES", "PRODUCT_KEYS", "Side", "case_argvs", "compare_info", "compare_outputs",
           "lab_refusals", "lab_server", "real_refusals", "real_root", "real_server", "serve", "tree_site"]
