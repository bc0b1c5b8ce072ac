"""SGLang (0.5.12 - 0.5.23): ``python -m sglang.launch_server`` (or ``launcher: "sglang serve"``).

Everything SGLang-specific already is the adapter default (research/sglang-interface.md); this module
names it beside its sibling, servers/vllm.py, which overrides the launcher (``vllm serve``), readiness, the
resolved-config source (the startup log) and where acceptance lives (``/metrics`` counters).
"""

from __future__ import annotations

from typing import ClassVar

from orchestrator.servers.base import EngineAdapter


class SglangAdapter(EngineAdapter):
    name: ClassVar[str] = "sglang"
    default_ready_timeout: ClassVar[float] = 600.0
    stop_grace: ClassVar[float] = 20.0
