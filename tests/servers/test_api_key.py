"""Servers started with ``--api-key`` (issue 13): the lab enforces the key as SGLang does, the server client sends
it as a bearer token from the probe's stdin, a missing or wrong key is a clear error, and the key reaches no
file of the session, no console line and no command line."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest

from orchestrator.inventory import Inventory
from orchestrator.lab.building.build import cached_sglang_tree
from tests.planted_secrets import SERVER_API_KEY as KEY  # unmistakable; scanned for at the end of the run
from tests.servers.conftest import processes_with, run_playbook


# -- the lab's HTTP layer: SGLang's auth rules, no models needed -------------------------------------------------
@pytest.fixture
def lab_http(request: pytest.FixtureRequest) -> Iterator[str]:
    from orchestrator.lab.stand_in.sglang_args import build_parser, resolve
    from orchestrator.lab.stand_in.sglang_http import LabHTTPServer, ServerState

    extra: list[str] = getattr(request, "param", [])
    ns = build_parser().parse_args(["--model-path", "/nonexistent", "--port", "0", "--api-key", KEY, *extra])
    state = ServerState(args=resolve(ns, target_architecture="LlamaForCausalLM"))
    httpd = LabHTTPServer(state)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def _get(url: str, key: str | None = None, method: str = "GET") -> tuple[int, Any]:
    from orchestrator.lab.stand_in.process import http_json

    return http_json(url, {} if method == "POST" else None, timeout=10, api_key=key)


def test_lab_enforces_api_key_like_sglang(lab_http: str) -> None:
    # /health is exempt (k8s probes); the lab is still loading, so 503 — not 401
    assert _get(lab_http + "/health")[0] == 503
    assert _get(lab_http + "/health_generate")[0] == 503
    for path in ("/server_info", "/get_server_info", "/model_info", "/flush_cache", "/generate", "/no_such_path"):
        assert _get(lab_http + path) == (401, {"error": "Unauthorized"}), path
        assert _get(lab_http + path, "wrong-key")[0] == 401, path
    status, info = _get(lab_http + "/server_info", KEY)
    assert status == 200 and info["api_key"] == KEY  # SGLang 0.5.12's /server_info is asdict(server_args)
    assert _get(lab_http + "/flush_cache", KEY, "POST")[0] == 200
    assert _get(lab_http + "/model_info", KEY)[0] == 503  # authorised, still loading


@pytest.mark.parametrize("lab_http", [["--admin-api-key", "admin-key-91f0"]], indirect=True)
def test_lab_admin_key_guards_flush_cache(lab_http: str) -> None:
    assert _get(lab_http + "/flush_cache", KEY, "POST")[0] == 401  # ADMIN_OPTIONAL: the admin key when set
    assert _get(lab_http + "/flush_cache", "admin-key-91f0", "POST")[0] == 200
    assert _get(lab_http + "/server_info", KEY)[0] == 200  # NORMAL: the API key
    assert _get(lab_http + "/server_info", "admin-key-91f0")[0] == 401


def _sglang_auth(version: str) -> Any:
    # the real source tree, installed under $ORCHESTRATOR_CACHE_DIR on first use (pip --no-deps --target)
    path = cached_sglang_tree(version, timeout=600) / "sglang" / "srt" / "utils" / "auth.py"
    spec = importlib.util.spec_from_file_location(f"_sglang_auth_{version.replace('.', '_')}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up
    spec.loader.exec_module(module)
    return module


def test_lab_auth_matches_sglang_decide_request_auth() -> None:
    """The lab's rule against the real function from SGLang 0.5.12.post1's source (stdlib only, no FastAPI)."""
    from orchestrator.lab.stand_in.sglang_http import ADMIN_OPTIONAL_PATHS, auth_allowed

    auth = _sglang_auth("0.5.12.post1")
    paths = ["/health", "/health_generate", "/metrics", "/server_info", "/generate", "/flush_cache", "/model_info",
             "/ready", "/nope"]
    headers = [None, "", "Bearer", f"Bearer {KEY}", f"bearer {KEY}", "Bearer other", f"Basic {KEY}",
               "Bearer adm-1234"]
    for api_key in (None, KEY):
        for admin in (None, "adm-1234"):
            for path in paths:
                level = auth.AuthLevel.ADMIN_OPTIONAL if path in ADMIN_OPTIONAL_PATHS else auth.AuthLevel.NORMAL
                for header in headers:
                    want = auth.decide_request_auth(method="GET", path=path, authorization_header=header,
                                                    api_key=api_key, admin_api_key=admin, auth_level=level).allowed
                    assert auth_allowed(path, header, api_key, admin) == want, (path, header, api_key, admin)


# -- the pieces that carry the key --------------------------------------------------------------------------------
def test_adapter_and_engine_find_the_keys() -> None:
    from orchestrator.actions.server import server_keys
    from orchestrator.servers.sglang import SglangAdapter

    adapter = SglangAdapter()
    assert adapter.client_keys({"api-key": KEY, "speculative-num-steps": 3}) == {"api_key": KEY}
    assert adapter.client_keys({"--admin-api-key": "a-1234", "api_key": None}) == {"admin_api_key": "a-1234"}
    assert adapter.client_keys({"tokenizer-path": "/m"}) == {}
    assert server_keys({"flags": {"api-key": KEY, "tokenizer-path": "/m"}}) == [KEY]
    assert server_keys({"api_key": KEY, "url": "http://x"}) == [KEY]
    assert server_keys({"flags": {"api-key": True}}) == [] and server_keys("text") == []


# -- end to end: the real server action, the lab server, the server client --------------------------------------

@pytest.mark.lab
@pytest.mark.slow
def test_api_key_server_end_to_end(lab_inventory: Inventory, tmp_path: Path, marker: str,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from orchestrator.console import ConsoleSink
    from orchestrator.transport.local import LocalTransport

    # The env name does not look secret, so only the playbook's `secret: true` protects the value.
    monkeypatch.setenv("ORCH_TEST_LAB_SRV_WORD", KEY)
    commands: list[str] = []
    real_run = LocalTransport.run

    async def spy_run(self: LocalTransport, cmd: Any, *args: Any, **kwargs: Any) -> Any:
        commands.append(json.dumps([cmd, kwargs.get("env")], default=str))
        return await real_run(self, cmd, *args, **kwargs)

    monkeypatch.setattr(LocalTransport, "run", spy_run)
    # one-shot probes (no remote agent): each probe is then a command line of its own, where a key could leak into
    # argv or env — what this test watches (the agent's calls travel as JSON on its stdin, never on a command line)
    host = lab_inventory.hosts["localhost"].model_copy(update={"agent": False})
    lab_inventory = lab_inventory.model_copy(update={"hosts": {"localhost": host}})
    screen = StringIO()
    ran = run_playbook(f"""
name: api key server
vars:
  api_key: {{secret: true, from_env: ORCH_TEST_LAB_SRV_WORD}}
steps:
  - server: {{name: locked, model: "{{{{ target }}}}", env: {{MARK: {marker}}}, ready_timeout: 180,
             flags: {{api-key: "{{{{ api_key }}}}", speculative-algorithm: EAGLE3,
                     speculative-draft-model-path: "{{{{ draft }}}}", speculative-num-steps: 2,
                     speculative-eagle-topk: 1}}}}
    register: srv
  - bench: {{server: locked, n: 2, max_new_tokens: 8}}
    register: ok
  - bench: {{url: "http://127.0.0.1:{{{{ srv.port }}}}", n: 1, max_new_tokens: 4}}
    ignore_errors: true
  - bench: {{url: "http://127.0.0.1:{{{{ srv.port }}}}", n: 1, max_new_tokens: 4, flush: false, api_key: wrong-key-0000}}
    ignore_errors: true
  - bench: {{url: "http://127.0.0.1:{{{{ srv.port }}}}", n: 1, max_new_tokens: 4, api_key: "{{{{ api_key }}}}"}}
    register: by_url
  - server: {{action: status, name: locked}}
  - shell: "echo the key is {{{{ api_key }}}}"
""", lab_inventory, tmp_path / "sessions", sinks=[ConsoleSink(Console(file=screen, width=300, highlight=False), verbose=True)])
    errors = {e["step_id"]: e.get("error") for e in ran.of_type("step_finished")}
    assert ran.status == "ok", errors

    # (a) with the key: readiness, /server_info, /flush_cache and /generate all authorised
    srv, ok, by_url = (ran.result(s)["result"] for s in ("s1", "s2", "s5"))
    assert srv["effective"]["speculative_num_steps"] == 2  # /server_info answered (it needs the key)
    assert srv["effective"]["api_key"] == "***" and srv["flags"]["api-key"] == "***"
    assert not [o for o in srv["overrides"] if o["flag"] == "api_key"]
    for bench in (ok, by_url):
        assert bench["completed"] == bench["n"] and bench["errors"] == [] and bench["flush_status"] == 200
        assert bench["accept_length"] is not None
    assert ran.result("s6")["result"]["health"] == 200

    # (b) no key / a wrong key: one clear sentence, no traceback
    assert ran.step("s3")["status"] == "failed" and ran.step("s4")["status"] == "failed"
    assert "401: the server wants an API key (api-key)" in errors["s3"]
    assert "401: the server refused the API key (api-key)" in errors["s4"]
    for step in ("s3", "s4"):
        assert "Traceback" not in errors[step] and "HTTPError" not in errors[step]
        assert errors[step].startswith("localhost: 401: "), errors[step]  # the host, then the sentence

    # (c) the key is nowhere: session files, console, the probes' command lines (it travels on stdin)
    logs = "".join(e["text"] for e in ran.events if e["type"] == "output" and e["stream"] == "server_log")
    assert "server_args=" in logs and "'api_key': '***'" in logs  # the server logged it; the session masked it
    assert "the key is ***" in screen.getvalue()
    files = [p for p in ran.directory.rglob("*") if p.is_file()]
    assert any(p.name == "events.jsonl" for p in files)
    leaks = [str(p) for p in files if KEY.encode() in p.read_bytes()]
    assert leaks == []
    assert KEY not in screen.getvalue()
    probe_calls = [c for c in commands if "remote_probes.engine.server_client" in c]
    assert len(probe_calls) >= 8 and not [c for c in probe_calls if KEY in c]
    # The only command lines that hold it: the server's own launch and its pidfile in the 0700 remote workdir
    # (SGLang takes the key as --api-key and no other way), and the shell step that echoes it on purpose.
    with_key = [c for c in commands if KEY in c]
    assert all("/procs/server-locked" in c for c in with_key[:-1]) and "echo the key is" in with_key[-1], with_key
    assert processes_with(marker) == []


def test_literal_key_and_extra_var_key_are_masked(inventory: Inventory, tmp_path: Path) -> None:
    """A key written into the flags or given as ``-e api_key=...`` is masked from the first event (the session's
    recorded argv and vars) on, though no var declares it secret. The server never starts: the lab has no model."""
    from orchestrator.playbook.loader import load_playbook_text
    from orchestrator.session.recording import build_runner, run_session

    literal, extra = "literal-key-5a5a5a5a", "extra-var-key-6b6b6b6b"
    playbook = load_playbook_text(f"""
name: literal key
steps:
  - server: {{engine: lab, model: /nonexistent, ready_timeout: 30, flags: {{api-key: {literal}}}}}
    ignore_errors: true
  - bench: {{url: "http://127.0.0.1:9", api_key: "{{{{ api_key }}}}", n: 1}}
    ignore_errors: true
""", extra_names={"api_key"})
    engine, directory = build_runner(playbook, inventory, sinks=[], sessions_dir=tmp_path / "sessions",
                                     extra_vars={"api_key": extra}, argv=["run", "pb.yaml", "-e", f"api_key={extra}"])
    run_session(engine, directory)
    started = json.loads((directory / "events.jsonl").read_text().splitlines()[0])
    assert started["type"] == "session_started" and started["argv"][-1] == "api_key=***"
    for path in (p for p in directory.rglob("*") if p.is_file()):
        text = path.read_text(errors="replace")
        assert literal not in text and extra not in text, path
