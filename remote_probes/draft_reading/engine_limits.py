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
- ``model_type`` of DeepSeek's family (deepseek_v3, deepseek_v32, glm_moe_dsa; deepseek_v4 in 0.33): vLLM rewrites
  every draft config it loads through ``SpeculativeConfig.hf_config_override`` (config/speculative.py), which turns
  these model types into DeepSeek MTP (``model_type = "deepseek_mtp"``, architectures ``DeepSeekMTPModel``) before
  the EAGLE-3 config prefixes ``Eagle3``: the start fails with "Model architectures ['Eagle3DeepSeekMTPModel'] are
  not supported for now". An MLA EAGLE-3 draft trained by SpecForge on a DeepSeek-V3/Kimi target carries its
  target's model_type unless the export changes it; the published Kimi-K2.5 EAGLE-3 draft says ``kimi_k2``, which
  vLLM leaves alone. The model types are read from the installed source (the ``if hf_config.model_type in (...)``
  condition above each rewrite), never listed here.

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
    #: the condition whose string literals are the values the statement applies to, looked for in the few lines
    #: above every match of ``pattern`` (read from the source, so a version that adds a value is followed)
    values_from: str = ""


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
        "model_type": Limit("config/speculative.py", r'hf_config\.model_type = "deepseek_mtp"',
                            "rewrites a draft of model_type {value} as DeepSeek MTP (model_type deepseek_mtp, an MTP "
                            "architecture) before its EAGLE-3 config reads it, and the start fails: Model "
                            "architectures ['Eagle3DeepSeekMTPModel'] are not supported for now",
                            values_from=r"if hf_config\.model_type in \("),
    },
}
#: how far above a statement its condition may start (a tuple of model types spans a few lines)
CONDITION_LINES = 8


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
        hits = [i for i, text in enumerate(lines) if re.search(limit.pattern, text)]
        if not hits:
            out["missing"].append("%s: %s" % (limit.file, field))
            continue
        hit = hits[0]
        out["limits"][field] = {"file": limit.file, "line": hit + 1, "text": lines[hit].strip()[:160],
                                "does": limit.does}
        if limit.values_from:
            values = _condition_values(lines, hits, limit.values_from)
            if not values:  # the statement without the condition we read it by: decides nothing
                del out["limits"][field]
                out["missing"].append("%s: %s (its condition)" % (limit.file, field))
                continue
            out["limits"][field]["values"] = values
    return out


def _condition_values(lines: List[str], hits: List[int], condition: str) -> List[str]:
    """The string literals of the ``condition`` line nearest above each hit, through the line before the hit."""
    values: List[str] = []
    for hit in hits:
        start = next((i for i in range(hit - 1, max(-1, hit - 1 - CONDITION_LINES), -1)
                      if re.search(condition, lines[i])), None)
        if start is None:
            continue
        for text in lines[start:hit]:
            code = text.split("#", 1)[0]  # a comment's quoted words are not the condition's
            values += [v for v in re.findall(r'"([A-Za-z0-9_.-]+)"', code) if v not in values]
    return values


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
    kind = config.get("model_type")
    if "model_type" in found and isinstance(kind, str) and kind in (found["model_type"].get("values") or []):
        archs = config.get("architectures") or []
        mla = any("Deepseek" in str(a) or "DeepSeek" in str(a) for a in archs)
        fixed = "kimi_k2" if mla else "llama"
        add("model_type", kind, {"model_type": fixed}, "The fix writes %s, a model_type it leaves alone (%s); the "
            "draft's layer is chosen by its architectures (%s), and its fields are read by name." % (
                fixed, "the published Kimi-K2.5 EAGLE-3 draft's" if mla else "the Llama EAGLE-3 drafts'",
                ", ".join(str(a) for a in archs) or "none declared"))
    return out
