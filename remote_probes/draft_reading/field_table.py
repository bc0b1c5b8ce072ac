"""Every draft-config field an engine's EAGLE-3 draft class reads, and what it does with the value (stdlib only).

Two halves, kept apart on purpose:

- what the installed engine READS is never assumed: ``source_reads`` parses the draft class's file and the decoder
  layer classes it builds on (``SOURCES``) with ``ast`` and returns every ``config.X`` / ``getattr(config, "X")``
  with its file:line, so a finding cites the line of the version on the host. A field the table knows but this
  version does not read is IGNORED by this version (vLLM 0.11 never reads eagle_config);
- what the engine DOES with a value it reads is the table below (``TABLE``), written from the source of SGLang
  0.5.12.post1 / 0.5.23 and vLLM 0.11.0 / 0.32.0 / 0.33.0. tests/draft/test_field_table.py parses every cached tree
  and fails on a field the engine reads that the table does not know; at run time such a field is said
  (``unknown``), never silently passed.

Kinds: ``shape`` (sets a tensor's shape: the checkpoint must agree), ``layout`` (decides which modules exist: the
checkpoint's tensors must match), ``numeric`` (used in the computation with no tensor to check: must be the value
the draft was trained with, which is the target's unless the training records say otherwise), ``map`` (which
target states or ids the draft sees), ``engine`` (the engine writes it itself).

Public API: ``TABLE``, ``SOURCES``, ``FieldUse``, ``source_reads(root, engine)``, ``engine_reading(root, engine)``,
``flags_read(engine, site)``.
"""

from __future__ import annotations

import ast
import os
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from remote_probes.engine.thread_safe_ast import parse


class FieldUse(NamedTuple):
    kind: str  # shape | layout | numeric | map | engine
    does: str  # what the engine does with the value (one clause)


#: the decoder classes the draft's layer is built from (the draft files subclass or call them)
_LAYER_CLASSES = ("LlamaDecoderLayer", "LlamaAttention", "LlamaMLP")
#: package-relative files the draft class reads its config in: (file, classes to scan or None for the whole file)
SOURCES: Dict[str, List[Tuple[str, Optional[Tuple[str, ...]]]]] = {
    "sglang": [("srt/models/llama_eagle3.py", None), ("srt/models/llama.py", _LAYER_CLASSES)],
    "vllm": [("model_executor/models/llama_eagle3.py", None), ("model_executor/models/llama.py", _LAYER_CLASSES)],
}

_COMMON: Dict[str, FieldUse] = {
    "hidden_size": FieldUse("shape", "sizes the draft layer, its norms and its head's width"),
    "intermediate_size": FieldUse("shape", "sizes the MLP (gate/up/down projections)"),
    "num_attention_heads": FieldUse("shape", "splits q_proj into heads"),
    "num_key_value_heads": FieldUse("shape", "splits k_proj/v_proj into heads"),
    "head_dim": FieldUse("shape", "sets each head's width (and RoPE's rotary width)"),
    "vocab_size": FieldUse("shape", "sizes the draft's embed_tokens (the target's is shared into it)"),
    "draft_vocab_size": FieldUse("shape", "sizes the draft's lm_head and its logits (d2t maps them to target ids)"),
    "target_hidden_size": FieldUse("shape", "sets fc's input width per aux state"),
    "num_hidden_layers": FieldUse("layout", "builds this many draft decoder layers"),
    "rms_norm_eps": FieldUse("numeric", "is the epsilon of every RMSNorm of the draft"),
    "hidden_act": FieldUse("numeric", "is the MLP's activation"),
    "max_position_embeddings": FieldUse("numeric", "sizes the rotary embedding's position table"),
    "rope_parameters": FieldUse("numeric", "gives rope_theta and the scaling of the draft's rotary embedding"),
    "rope_scaling": FieldUse("numeric", "scales the draft's rotary embedding"),
    "rope_theta": FieldUse("numeric", "is the draft's RoPE base when rope_parameters has none"),
    "original_max_position_embeddings": FieldUse("numeric", "is copied into rope_scaling"),
    "partial_rotary_factor": FieldUse("numeric", "sets the share of each head that is rotated"),
    "attention_bias": FieldUse("layout", "adds biases to the attention projections"),
    "eagle_config": FieldUse("map", "holds the aux layer ids (and use_aux_hidden_state, norm_before_fc)"),
    "num_aux_hidden_states": FieldUse("shape", "sets how many aux states fc concatenates"),
    "fc_norm": FieldUse("layout", "builds one RMSNorm per aux state before fc (EAGLE-3.1)"),
    "norm_before_fc": FieldUse("layout", "builds one RMSNorm over the concatenated aux states before fc"),
    "norm_output": FieldUse("numeric", "feeds the post-norm hidden state to the next draft step (EAGLE-3.1)"),
    "bias": FieldUse("layout", "adds a bias to fc (and, in the decoder layer, to the attention projections)"),
}

TABLE: Dict[str, Dict[str, FieldUse]] = {
    "sglang": dict(_COMMON, **{
        "model_type": FieldUse("layout", "llama4_text takes intermediate_size_mlp for the MLP"),
        "intermediate_size_mlp": FieldUse("shape", "sizes the MLP when model_type is llama4_text"),
        "rope_is_neox_style": FieldUse("numeric", "picks the rotary layout (neox or interleaved)"),
        "tie_word_embeddings": FieldUse("layout", "makes the head the draft's embed_tokens module (the target's "
                                                  "embedding once shared), so a shipped lm_head.weight is not served"),
        "use_aux_norm": FieldUse("layout", "legacy name of fc_norm"),
    }),
    "vllm": dict(_COMMON, **{
        "model_type": FieldUse("layout", "0.11: a GGUF llama checkpoint is permuted on load"),
        "logit_scale": FieldUse("numeric", "scales the draft's logits"),
        "norm_before_residual": FieldUse("numeric", "norms the hidden state before the residual add"),
        "mlp_bias": FieldUse("layout", "adds biases to the MLP projections"),
        "qkv_bias": FieldUse("layout", "overrides attention_bias for q/k/v"),
        "is_causal": FieldUse("numeric", "false makes the draft's attention bidirectional"),
        "layer_types": FieldUse("layout", "marks sliding-window layers (indexed past the target's layers)"),
        "sliding_window": FieldUse("numeric", "is the window of a sliding layer"),
        "target_layer_count": FieldUse("engine", "is set by vLLM to the target's layer count before the layer is "
                                                 "built (layer_types indexing)"),
    }),
}


class _Reads(ast.NodeVisitor):
    def __init__(self) -> None:
        self.found: Dict[str, int] = {}

    def _add(self, name: str, line: int) -> None:
        if name not in self.found or line < self.found[name]:
            self.found[name] = line

    def visit_Attribute(self, node: ast.Attribute) -> None:
        base = node.value
        owner = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
        if owner in ("config", "config_"):
            self._add(node.attr, node.lineno)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("getattr", "hasattr") and len(node.args) >= 2:
            base, key = node.args[0], node.args[1]
            owner = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
            if owner in ("config", "config_") and isinstance(key, ast.Constant) and isinstance(key.value, str):
                self._add(key.value, node.lineno)
        self.generic_visit(node)


def _file_reads(path: str, classes: Optional[Tuple[str, ...]]) -> Dict[str, int]:
    with open(path, encoding="utf-8") as handle:
        tree = parse(handle.read(), filename=path)
    visitor = _Reads()
    tops = [tree] if classes is None else [n for n in ast.walk(tree)
                                           if isinstance(n, ast.ClassDef) and n.name in classes]
    for top in tops:
        visitor.visit(top)
    return visitor.found


def source_reads(root: str, engine: str) -> Dict[str, Any]:
    """``{"reads": {field: {"file", "line", "text"}}, "missing": [files not found]}``: every config field the installed
    engine's draft class reads (the first line that reads it, in SOURCES order)."""
    reads: Dict[str, Dict[str, Any]] = {}
    missing: List[str] = []
    for rel, classes in SOURCES[engine]:
        path = os.path.join(root, rel)
        try:
            found = _file_reads(path, classes)
            with open(path, encoding="utf-8") as handle:
                lines = handle.read().splitlines()
        except (OSError, SyntaxError, ValueError):
            missing.append(rel)
            continue
        for name, line in sorted(found.items(), key=lambda kv: kv[1]):
            reads.setdefault(name, {"file": rel, "line": line, "text": lines[line - 1].strip()[:160]})
    return {"reads": reads, "missing": missing}


def engine_reading(root: Optional[str], engine: str, version: Optional[str] = None) -> Dict[str, Any]:
    """What the installed engine reads of a draft config, joined with what it does: ``{"engine", "version", "root",
    "fields": {field: {"kind", "does", "file", "line", "text"}}, "unknown": [read, not in the table],
    "missing": [source files absent]}``; ``root`` None gives no fields and says so in ``missing``."""
    out: Dict[str, Any] = {"engine": engine, "version": version, "root": root, "fields": {}, "unknown": [],
                           "missing": []}
    if engine not in TABLE:
        out["missing"] = ["no field table for engine %r" % engine]
        return out
    if not root:
        out["missing"] = [rel for rel, _ in SOURCES[engine]]
        return out
    found = source_reads(root, engine)
    out["missing"] = found["missing"]
    table = TABLE[engine]
    for name, where in found["reads"].items():
        use = table.get(name)
        if use is None:
            out["unknown"].append(name)
            continue
        out["fields"][name] = dict(where, kind=use.kind, does=use.does)
    out["unknown"].sort()
    return out


def flags_read(engine: str, site: Optional[List[str]] = None) -> Optional[List[str]]:
    """The variant flags (eagle3/config.VARIANT_FLAGS) the installed engine's EAGLE-3 class reads, found like
    sglang_source finds a package (``site`` first), or None when no engine is installed here: a draft is then served
    and scored with every flag it sets."""
    from remote_probes.agent.protocol import ProbeFailure
    from remote_probes.eagle3.config import VARIANT_FLAGS
    from remote_probes.engine.sglang_source import locate_package

    try:
        root = locate_package(engine, site or None)["root"]
    except ProbeFailure:
        return None
    fields = engine_reading(root, engine)["fields"]
    if not fields:
        return None
    read = [f for f in VARIANT_FLAGS if f in fields]
    if "use_aux_norm" in fields and "fc_norm" not in read:
        read.append("fc_norm")  # SGLang's legacy spelling builds the same per-aux norms
    return read
