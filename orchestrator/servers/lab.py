"""The lab servers: ``lab`` (``python -m orchestrator.lab.stand_in.server``, SGLang's HTTP API and flags on tiny CPU models)
and ``lab-vllm`` (``python -m orchestrator.lab.stand_in.vllm_server serve``, vLLM's).

It runs with the host's python (the lab inventory points that at the orchestrator's own venv), loads in
seconds, and stops at once on SIGTERM — so its defaults are short.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from orchestrator.servers.base import Launcher, LaunchSpec
from orchestrator.servers.flags import flag_key
from orchestrator.servers.sglang import SglangAdapter
from orchestrator.servers.vllm import VllmAdapter
from orchestrator.servers.warm import WarmStart

#: what a lab server imports before it reads a weight (~3.5 s cold): the warm interpreter imports it once a
#: session (orchestrator/lab/stand_in/warm_start.py); optional ones (``?``) are the engine trees' and Qwen3's
WARM_MODULES = (
    "torch", "transformers", "transformers.models.llama.modeling_llama",
    "transformers.models.qwen3.modeling_qwen3?", "transformers.models.auto.tokenization_auto", "transformers.cache_utils",
    "orchestrator.lab.stand_in.sglang_args", "orchestrator.lab.stand_in.vllm_http", "remote_probes.eagle3.checkpoint?",
    "remote_probes.eagle3.validate?", "remote_probes.eagle3.served?", "remote_probes.engine.target_capture?",
    "remote_probes.engine.sglang_capture?", "remote_probes.engine.vllm_capture?", "remote_probes.engine.sglang_argparse?",
)


def lab_warm_start(spec: LaunchSpec) -> WarmStart | None:
    """The lab's servers fork from a warm interpreter on the host's python; a step's own launcher runs as given."""
    if spec.launcher is not None:
        return None
    return WarmStart(program=(spec.python, "-m", "orchestrator.lab.stand_in.warm_start"), modules=WARM_MODULES)


class LabAdapter(SglangAdapter):
    """The lab in SGLang mode: SGLang's command line, HTTP API and rules, the lab's tiny CPU models."""

    name: ClassVar[str] = "lab"
    default_ready_timeout: ClassVar[float] = 120.0
    stop_grace: ClassVar[float] = 5.0

    def default_launcher(self, python: str) -> list[str]:
        return [python, "-m", "orchestrator.lab.stand_in.server"]

    def warm_start(self, spec: LaunchSpec) -> WarmStart | None:
        return lab_warm_start(spec)

    def is_spec_flag(self, name: str) -> bool:
        # The lab's wiring override only means something with a draft: the baseline drops it too.
        return super().is_spec_flag(name) or name.replace("-", "_").lstrip("_") == "lab_capture_layers"

    def preflight_argv(self, spec: LaunchSpec) -> list[str]:
        # The lab takes SGLang's flags plus its own --lab-*; SGLang's parser judges the rest, as the lab server does.
        sglang_only = replace(spec, flags={k: v for k, v in spec.flags.items()
                                           if not flag_key(str(k)).startswith("lab_")})
        return self.server_argv(sglang_only)


class LabVllmAdapter(VllmAdapter):
    """The lab in vLLM mode (``python -m orchestrator.lab.stand_in.vllm_server serve``): vLLM's command line and HTTP API,
    vLLM's loading rules, the lab's tiny CPU models."""

    name: ClassVar[str] = "lab-vllm"
    default_ready_timeout: ClassVar[float] = 120.0
    stop_grace: ClassVar[float] = 5.0

    def default_launcher(self, python: str) -> list[str]:
        return [python, "-m", "orchestrator.lab.stand_in.vllm_server", "serve"]

    def warm_start(self, spec: LaunchSpec) -> WarmStart | None:
        return lab_warm_start(spec)

    async def detect_launcher(self, transport: Any, spec: LaunchSpec) -> Launcher | None:
        return None  # the lab's own program, on the orchestrator's python: nothing to detect

    def is_spec_flag(self, name: str) -> bool:
        return super().is_spec_flag(name) or flag_key(name) in ("lab_capture_layers", "lab_vllm_runner")
