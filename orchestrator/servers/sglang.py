"""SGLang (0.5.12 - 0.5.23): ``python -m sglang.launch_server`` (or ``launcher: "sglang serve"``).

Everything SGLang-specific already is the adapter default (research/sglang-interface.md); this module
names it so a vLLM adapter has a sibling to copy: vLLM would override ``default_launcher`` (``vllm serve``),
``ready_line``, ``info_paths`` (no /server_info: read ``/metrics`` spec counters) and ``effective_args``.
"""

from __future__ import annotations

from typing import ClassVar

from orchestrator.servers.base import EngineAdapter


class SglangAdapter(EngineAdapter):
    name: ClassVar[str] = "sglang"
    default_ready_timeout: ClassVar[float] = 600.0
    stop_grace: ClassVar[float] = 20.0
