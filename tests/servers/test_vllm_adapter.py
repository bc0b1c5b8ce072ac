"""The vLLM adapter against the real vLLM source, read from the installed 0.33.0 and 0.11.0 trees.

Every name the adapter relies on is pinned here in both versions: the serve entry point and its positional model,
the ``--speculative-config`` flag, the startup config line (rendered by evaluating the trees' own ``__str__`` /
``__repr__`` f-strings, so the adapter parses exactly what that vLLM prints), and the spec_decode counter names.
A test HTTP endpoint then answers in vLLM's shapes (/health, /v1/models, /v1/completions, /metrics) to drive the
pushed server client through the adapter.
"""

from __future__ import annotations

import ast
import json
import os
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from orchestrator.errors import UserInputError
from orchestrator.servers.base import LaunchSpec
from orchestrator.servers.client import ServerClient
from orchestrator.servers.flags import requested_vs_effective
from orchestrator.servers.registry import get_adapter
from orchestrator.servers.vllm import (
    ACCEPTED,
    DRAFT_TOKENS,
    DRAFTS,
    PER_POSITION,
    VllmAdapter,
    parse_config_line,
    spec_decode_delta,
)
from orchestrator.transport.local import LocalTransport

VERSIONS = ("0.33.0", "0.11.0")


@pytest.fixture(scope="module", params=VERSIONS)
def vllm_tree(request: pytest.FixtureRequest) -> Path:
    from tests.conftest import install_vllm_tree

    return install_vllm_tree(request.param) / "vllm"  # a skip here fails under CI


def read(tree: Path, rel: str) -> str:
    return (tree / rel).read_text(encoding="utf-8")


def find(tree: Path, pattern: str, under: str = "") -> list[Path]:
    rx = re.compile(pattern)
    return [p for p in sorted((tree / under).rglob("*.py")) if rx.search(p.read_text(encoding="utf-8"))]


# ---------------------------------------------------------------- the command line


def test_argv_is_vllm_serve_with_a_positional_model_and_json_config(vllm_tree: Path) -> None:
    adapter = get_adapter("vllm")
    spec = LaunchSpec(model="/models/llama", port=8001, python="/venv/bin/python",
                      flags={"speculative-config": {"method": "eagle3", "model": "/models/eagle3",
                                                    "num_speculative_tokens": 3},
                             "max-model-len": 2048, "enforce-eager": True})
    argv = adapter.build_argv(spec)
    assert argv[:5] == ["/venv/bin/python", "-m", "vllm.entrypoints.cli.main", "serve", "/models/llama"]
    assert argv[5:9] == ["--host", "127.0.0.1", "--port", "8001"]
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {"method": "eagle3", "model": "/models/eagle3", "num_speculative_tokens": 3}
    assert argv[-3:] == ["--max-model-len", "2048", "--enforce-eager"]
    # ... and each part exists in this vLLM: the module runs as a program, serve takes [model_tag], the flag
    main = read(vllm_tree, "entrypoints/cli/main.py")
    assert 'if __name__ == "__main__":' in main
    serve = read(vllm_tree, "entrypoints/cli/serve.py")
    assert "vllm serve [model_tag] [options]" in serve and "args.model = args.model_tag" in serve
    arg_utils = read(vllm_tree, "engine/arg_utils.py")
    assert re.search(r'"--speculative-config"', arg_utils)
    for key in ("method", "model", "num_speculative_tokens"):  # the JSON's keys are SpeculativeConfig's fields
        assert re.search(rf"^    {key}: ", read(vllm_tree, "config/speculative.py"), re.M), key
    # --host / --port are the frontend dataclass's fields (0.11: openai/cli_args.py, 0.33: common/cli_args.py)
    frontends = find(vllm_tree, r"(?m)^    port: int = 8000$", "entrypoints")
    assert frontends and re.search(r"(?m)^    host: ", frontends[0].read_text())


def test_a_json_string_config_is_accepted_and_a_bad_one_refused() -> None:
    adapter = VllmAdapter()
    text = '{"method": "eagle3", "model": "/d", "num_speculative_tokens": 2}'
    argv = adapter.server_argv(LaunchSpec(model="/m", port=1, flags={"speculative_config": text}))
    assert json.loads(argv[-1]) == json.loads(text)
    with pytest.raises(UserInputError, match="JSON object"):
        adapter.check_flags({"speculative-config": "{method: eagle3"})
    with pytest.raises(UserInputError, match="mapping"):
        adapter.check_flags({"speculative-config": [1, 2]})
    with pytest.raises(UserInputError, match="set by the step"):
        adapter.check_flags({"model": "/x"})
    assert adapter.invalid_reason({"speculative-config": {"num_speculative_tokens": 0}}) == \
        "num_speculative_tokens = 0 < 1"
    # the baseline drops the speculative flag
    assert adapter.baseline_flags({"speculative-config": {"method": "eagle3"}, "max-model-len": 8}) == \
        {"max-model-len": 8}


# ---------------------------------------------------------------- the startup log


class _Anything:
    """Stands for any config object the rendered __str__ touches: attributes chain, and it prints as ``x``."""

    def __init__(self, **known: Any) -> None:
        self.__dict__.update(known)

    def __getattr__(self, name: str) -> Any:
        return _Anything()

    def __repr__(self) -> str:
        return "x"

    __str__ = __repr__


def _method_return(source: str, cls: str, method: str) -> ast.expr:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method:
                    returns = [n for n in ast.walk(item) if isinstance(n, ast.Return) and n.value is not None]
                    return returns[-1].value  # type: ignore[return-value]
    raise AssertionError(f"{cls}.{method} not found")


def rendered_config_line(tree: Path, *, method: str, draft: str, k: int, model: str) -> str:
    """The startup line exactly as this vLLM formats it: its own f-strings, evaluated."""
    spec_src = read(tree, "config/speculative.py")
    spec_repr = _method_return(spec_src, "SpeculativeConfig", "__repr__")
    spec_text = eval(compile(ast.Expression(spec_repr), "speculative.py", "eval"),  # noqa: S307 - the tree's f-string
                     {}, {"method": method, "model": draft, "num_spec_tokens": k})
    spec_obj = type("Spec", (), {"__repr__": lambda self: spec_text})()
    vllm_file = "config/vllm.py" if (tree / "config/vllm.py").is_file() else "config/__init__.py"
    str_expr = _method_return(read(tree, vllm_file), "VllmConfig", "__str__")
    this = _Anything(model_config=_Anything(model=model, tokenizer=model, dtype="torch.bfloat16",
                                            max_model_len=4096, seed=0),
                     parallel_config=_Anything(tensor_parallel_size=1), speculative_config=spec_obj)
    body = eval(compile(ast.Expression(str_expr), vllm_file, "eval"), {}, {"self": this})  # noqa: S307
    core = read(tree, "v1/engine/core.py")
    fmt = re.search(r'"(Initializing a V1 LLM engine \(v%s\) with config: %s)"', core)
    assert fmt, "the startup config line moved"
    return "(EngineCore_DP0 pid=1) INFO 11-30 18:00:00 [core.py:77] " + fmt.group(1) % ("X.Y", body)


def test_effective_settings_come_from_the_startup_config_line(vllm_tree: Path) -> None:
    version = vllm_tree.parent.name
    line = rendered_config_line(vllm_tree, method="eagle3", draft="/models/eagle3", k=3, model="/models/llama")
    log = f"INFO non-default args: {{'model': '/models/llama'}}\n{line}\nINFO Application startup complete.\n"
    adapter = VllmAdapter()
    effective = adapter.resolved_args(None, log)
    assert effective["model"] == "/models/llama"
    assert effective["speculative_config.method"] == "eagle3"
    assert effective["speculative_config.model"] == "/models/eagle3"
    assert effective["speculative_config.num_speculative_tokens"] == 3
    assert effective["tensor_parallel_size"] == 1 and effective["vllm_version"] == "X.Y", version
    # requested vs effective: the JSON config is compared key by key
    spec = LaunchSpec(model="/models/llama", port=1, flags={
        "speculative-config": {"method": "eagle3", "model": "/models/eagle3", "num_speculative_tokens": 5}})
    diff = requested_vs_effective(adapter.requested_args(spec), effective, log_text=log, aliases=adapter.aliases)
    assert [(o["flag"], o["requested"], o["effective"]) for o in diff["overrides"]] == [
        ("speculative_config.num_speculative_tokens", 5, 3)]
    assert diff["unverified"] == []


def test_a_server_without_speculation_reports_none() -> None:
    parsed = parse_config_line("model='/m', speculative_config=None, tokenizer='/m', dtype=torch.float16, "
                               "compilation_config={'level': 3, 'custom_ops': ['none', 'x']}, seed=0")
    assert parsed["speculative_config"] is None and parsed["dtype"] == "torch.float16"
    assert parsed["compilation_config"] == {"level": 3, "custom_ops": ["none", "x"]} and parsed["seed"] == 0
    assert VllmAdapter().resolved_args(None, "no config line here\n") == {}


# ---------------------------------------------------------------- /metrics


def test_counter_names_are_the_trees_own(vllm_tree: Path) -> None:
    source = read(vllm_tree, "v1/spec_decode/metrics.py")
    for exposed in (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POSITION):
        # a prometheus_client Counter named X is exposed as X_total
        assert f'"{exposed.removesuffix("_total")}"' in source, exposed
    assert 'labelnames + ["position"]' in source
    assert re.search(r'labelnames = \["model_name", "engine"\]', read(vllm_tree, "v1/metrics/loggers.py"))
    # vLLM's own mean acceptance length counts the bonus token: 1 + accepted / drafts
    assert re.search(r"mean_acceptance_length = 1 \+ \(?\s*num_accepted_tokens / num_drafts", source)


def exposition(drafts: float, draft_tokens: float, accepted: float, per_pos: list[float], engines: int = 1) -> str:
    lines = []
    for e in range(engines):
        labels = f'engine="{e}",model_name="/models/llama"'
        lines += [f"# TYPE {DRAFTS} counter", f"{DRAFTS}{{{labels}}} {drafts}",
                  f"{DRAFT_TOKENS}{{{labels}}} {draft_tokens}", f"{ACCEPTED}{{{labels}}} {accepted}"]
        lines += [f'{PER_POSITION}{{{labels},position="{k}"}} {v}' for k, v in enumerate(per_pos)]
    lines.append('vllm:num_requests_running{engine="0",model_name="/models/llama"} 0.0')
    return "\n".join(lines) + "\n"


def test_acceptance_is_the_counters_change() -> None:

    from remote_probes.engine.server_client import parse_metrics

    before = parse_metrics(exposition(10, 30, 12, [6, 4, 2], engines=2), "vllm:spec_decode")
    after = parse_metrics(exposition(30, 90, 52, [18, 20, 14], engines=2), "vllm:spec_decode")
    stats = spec_decode_delta(before, after)
    assert stats == {"drafts": 40, "draft_tokens": 120, "accepted_tokens": 80, "accept_length": 3.0,
                     "acceptance_rate": 0.6667, "per_position": [0.6, 0.8, 0.6]}
    assert spec_decode_delta(before, None) is None
    assert spec_decode_delta([], parse_metrics("vllm:num_requests_running 0\n", "vllm:spec_decode")) is None


class VllmLike(BaseHTTPRequestHandler):
    """vLLM's routes and shapes: each completion drafts 4 times and accepts 2 tokens per draft."""

    seen: ClassVar[list[str]] = []
    counters: ClassVar[dict[str, float]] = {}

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: Any, ctype: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        self.seen.append("GET " + self.path)
        c = self.counters
        if self.path == "/health":
            self._answer(200, "", "text/plain")
        elif self.path == "/v1/models":
            self._answer(200, {"object": "list", "data": [{"id": "/models/llama", "object": "model"}]})
        elif self.path == "/metrics":
            self._answer(200, exposition(c["d"], c["t"], c["a"], [c["a"] / 2, c["a"] / 2]), "text/plain")
        else:
            self._answer(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        self.seen.append("POST " + self.path)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path != "/v1/completions" or body.get("model") != "/models/llama" or "max_tokens" not in body:
            self._answer(400, {"error": "bad request"})
            return
        self.counters["d"] += 4
        self.counters["t"] += 12
        self.counters["a"] += 8
        self._answer(200, {"object": "text_completion", "choices": [{"index": 0, "text": "abc",
                                                                      "finish_reason": "length"}],
                           "usage": {"prompt_tokens": 3, "completion_tokens": body["max_tokens"],
                                     "total_tokens": 3 + body["max_tokens"]}})


@pytest.fixture
def vllm_endpoint() -> Iterator[str]:
    VllmLike.seen, VllmLike.counters = [], {"d": 100.0, "t": 300.0, "a": 50.0}
    server = ThreadingHTTPServer(("127.0.0.1", 0), VllmLike)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_bench_and_wait_through_the_adapter(tmp_path: Path, vllm_endpoint: str) -> None:
    transport = LocalTransport("localhost", session_id="vllm-test", state_dir=str(tmp_path / "state"))
    client = ServerClient(transport, "python3", VllmAdapter())
    log = tmp_path / "server.log"
    log.write_text("INFO:     Application startup complete.\n")
    wait = await client.call("wait", {"url": vllm_endpoint, "log": str(log), "pgid": os.getpgid(0), "timeout": 20})
    assert wait["ready"] and wait["ready_line_seen"]
    assert "GET /v1/models" in VllmLike.seen  # ready also needs the served model listed
    result = await client.call("bench", {"url": vllm_endpoint, "prompts": ["a", "b"], "n": 3, "max_new_tokens": 6})
    assert result["completed"] == 3 and result["completion_tokens"] == 18
    assert not any(s.startswith("POST /flush") or "server_info" in s for s in VllmLike.seen)
    # 3 requests x (4 drafts, 12 draft tokens, 8 accepted): 1 + 8/4 = 3.0 per request and overall
    assert result["spec_decode"] == {"drafts": 12, "draft_tokens": 36, "accepted_tokens": 24, "accept_length": 3.0,
                                     "acceptance_rate": 0.6667, "per_position": [1.0, 1.0],
                                     # each request's own counts: 4 accepted at each position per 4 drafts
                                     "per_position_request": [1.0, 1.0], "per_position_ci": [[1.0, 1.0], [1.0, 1.0]],
                                     "per_position_n": 3}
    assert result["server_accept_length"] == 3.0
    assert [r["accept_length"] for r in result["per_request"]] == [3.0, 3.0, 3.0]
    assert result["accept_length"] == 3.0 and result["model"] == "/models/llama"
