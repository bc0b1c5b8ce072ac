"""Draft-config values the installed engine refuses, or serves wrong past a limit, located in its own source
(standard library only).

What the field table (field_table.py) says a field DOES is the computation; some values never get that far:

- ``hidden_act``: both engines' Llama MLP (the draft's decoder layer) raises ``ValueError: Unsupported activation:
  X. Only silu is supported for now.`` for anything but silu, at start. The draft test's own layer runs gelu and
  friends, so without this the offline model would predict a draft the server never serves.
- ``max_position_embeddings`` below the target's (the served context): the draft's rotary table has that many
  positions. vLLM serves it anyway (the draft's max_model_len is min(its own, the target's), logged as "Overriding
  draft model max model len"); its rotary kernel reads the table at every position without a bound check, so past
  the table the draft's attention is garbage and acceptance collapses on long contexts (measured: real vLLM 0.32 on
  the lab, 3.90 -> 1.57 with a 64-position table; the SpecForge export of NeMo RL PR 3960, 2048, "collapses
  acceptance past position 2048"). SGLang gives the draft the server's --context-length and refuses a longer one
  than the draft's at start (configs/model_config.py, "is greater than the derived context_length") unless
  SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, which then overrides the draft's value. Either way the fix is the
  target's value: RoPE's table is a function of position, so a longer one computes the same rotations for every
  position the draft trained on.

Public API: ``LIMITS``, ``limits_reading(root, engine)``, ``limit_findings(config, target, reading)``.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, NamedTuple, Optional


class Limit(NamedTuple):
    file: str      # under the package
    pattern: str   # the decisive statement
    does: str      # what the engine does (a clause)


LIMITS: Dict[str, Dict[str, Limit]] = {
    "sglang": {
        "hidden_act": Limit("srt/models/llama.py", r"if hidden_act != \"silu\"",
                            "refuses the draft at start: ValueError: Unsupported activation: {value}. Only silu is "
                            "supported for now"),
        "max_position_embeddings": Limit("srt/configs/model_config.py", r"is greater than the derived context_length",
                                         "gives the draft the server's context length and refuses one longer than the "
                                         "draft's ({value}) at start unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
                                         "=1; without --context-length the draft's rotary table ends at {value}"),
    },
    "vllm": {
        "hidden_act": Limit("model_executor/models/llama.py", r"if hidden_act != \"silu\"",
                            "refuses the draft at start: ValueError: Unsupported activation: {value}. Only silu is "
                            "supported for now"),
        "max_position_embeddings": Limit("model_executor/models/llama.py",
                                         r"max_position_embeddings = getattr\(config, \"max_position_embeddings\"",
                                         "sizes the draft's rotary table with it and serves every position of the "
                                         "target's context through it: its rotary kernel reads past the table "
                                         "without a check, so acceptance collapses past position {value} (NeMo RL "
                                         "PR 3960)"),
    },
}


def limits_reading(root: Optional[str], engine: str) -> Dict[str, Any]:
    """``{"engine", "limits": {field: {"file", "line", "text", "does"}}, "missing": [...]}``: each LIMITS entry found
    in the installed engine (the first matching line); one not found is said and decides nothing."""
    out: Dict[str, Any] = {"engine": engine, "limits": {}, "missing": []}
    if not root or engine not in LIMITS:
        out["missing"] = sorted(LIMITS.get(engine, {}))
        return out
    for field, limit in LIMITS[engine].items():
        try:
            with open(os.path.join(root, limit.file), encoding="utf-8") as handle:
                lines = handle.read().splitlines()
        except OSError:
            lines = []
        hit = next((i for i, text in enumerate(lines) if re.search(limit.pattern, text)), None)
        if hit is None:
            out["missing"].append("%s: %s" % (limit.file, field))
            continue
        out["limits"][field] = {"file": limit.file, "line": hit + 1, "text": lines[hit].strip()[:160],
                                "does": limit.does}
    return out


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def limit_findings(config: Dict[str, Any], target: Optional[Dict[str, Any]], reading: Dict[str, Any],
                   label: str) -> List[Dict[str, Any]]:
    """Error findings (``field.<name>``, with ``details.fix``) for the values the installed engine refuses or serves
    wrong; ``reading`` is limits_reading's; ``label`` names the engine and version."""
    found = reading.get("limits") or {}
    out: List[Dict[str, Any]] = []

    def add(field: str, value: Any, fix: Dict[str, Any], why: str) -> None:
        where = found[field]
        does = where["does"].format(value=value)
        out.append({"id": "field." + field, "severity": "error", "message": "%s is %r: %s %s (%s:%s). %s" % (
            field, value, label, does, where["file"], where["line"], why),
            "details": {"field": field, "value": value, "engine": reading.get("engine"), "file": where["file"],
                        "line": where["line"], "code": where["text"], "fix": fix, "limit": True}})

    act = config.get("hidden_act")
    if "hidden_act" in found and isinstance(act, str) and act != "silu":
        add("hidden_act", act, {"hidden_act": "silu"}, "The fix writes silu, the one activation it runs (the "
            "target's %s); a draft really trained with %s cannot be served by it." % (
                (target or {}).get("hidden_act", "silu"), act))
    mine, theirs = _int(config.get("max_position_embeddings")), _int((target or {}).get("max_position_embeddings"))
    if "max_position_embeddings" in found and mine is not None and theirs is not None and mine < theirs:
        add("max_position_embeddings", mine, {"max_position_embeddings": theirs},
            "The fix writes the target's %d: RoPE's table is a function of position, so a longer one computes the "
            "same rotations for every position the draft trained on." % theirs)
    return out
