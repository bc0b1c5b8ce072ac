"""Engines are siblings: the abstract EngineAdapter declares what every engine says and has a body only for what
is engine-neutral; each registered adapter (SGLang, vLLM, the lab's two) says all of it itself, so no engine runs
on another's defaults without saying so."""

from __future__ import annotations

import typing

import pytest

from orchestrator.servers.base import EngineAdapter, LaunchSpec
from orchestrator.servers.registry import ADAPTERS, all_key_flags, get_adapter
from orchestrator.servers.sglang import SglangAdapter
from orchestrator.servers.vllm import VllmAdapter

DECLARED = [name for name, hint in typing.get_type_hints(EngineAdapter).items()
            if "ClassVar" in str(hint) and not hasattr(EngineAdapter, name)]


def test_the_base_adapter_is_abstract_and_declares_the_engine_facts() -> None:
    with pytest.raises(TypeError):
        EngineAdapter()  # type: ignore[abstract]
    assert {"ready_line", "info_paths", "reserved", "key_flags", "preflight"} <= set(DECLARED)


@pytest.mark.parametrize("engine", sorted(ADAPTERS))
def test_every_adapter_says_every_engine_fact(engine: str) -> None:
    adapter = get_adapter(engine)
    missing = [name for name in DECLARED if not hasattr(adapter, name)]
    assert missing == []


def test_sglang_and_vllm_differ_where_their_servers_do() -> None:
    spec = LaunchSpec(model="/m", flags={"speculative-num-steps": 3}, port=30000)
    assert SglangAdapter().server_argv(spec)[:2] == ["--model-path", "/m"]
    assert "--model-path" not in VllmAdapter().server_argv(spec)
    assert SglangAdapter().invalid_reason({"speculative-num-steps": 1, "speculative-eagle-topk": 1,
                                           "speculative-num-draft-tokens": 5}) is not None
    assert {"api_key", "admin_api_key"} <= all_key_flags()


@pytest.mark.parametrize("engine", sorted(ADAPTERS))
def test_cleanup_gives_a_server_its_engines_stop_grace(engine: str) -> None:
    """`orchestrator cleanup` stops an orphaned server with the grace its adapter's stop gives it (a real SGLang's
    launcher takes ~6 s to exit on SIGTERM: tests/servers/test_real_sglang_adapter.py); anything else keeps the
    cleanup's own."""
    from orchestrator.servers.cleanup import engine_grace

    assert engine_grace({"kind": "server", "engine": engine}) == get_adapter(engine).stop_grace
    assert engine_grace({"kind": "warm_interpreter", "engine": engine}) == 0.0
    assert engine_grace({"kind": "server", "engine": "no-such-engine"}) == engine_grace({}) == 0.0


def test_an_automatic_port_leaves_sglang_room_for_its_grpc_port() -> None:
    """SGLang derives its gRPC port as --port + 10000 and refuses a start where that passes 65535 (measured on the real
    0.5.15.post1 host: a kernel-picked port 58841 failed the pre-flight); ``port: auto`` picks below the adapter's
    limit, through the same probe command the manager calls on the host."""
    from remote_probes.engine.server_client import cmd_port

    assert get_adapter("sglang").max_auto_port == 55535
    assert get_adapter("vllm").max_auto_port == 65535
    picked = [cmd_port({"host": "127.0.0.1", "port": "auto", "max": 20000}) for _ in range(20)]
    assert all(p["free"] and 1024 <= p["port"] <= 20000 for p in picked), picked
