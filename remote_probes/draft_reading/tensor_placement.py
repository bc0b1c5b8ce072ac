"""Where the installed engine's draft loader puts each tensor of a checkpoint, and what it does with one it cannot
place (standard library only).

Both engines load an EAGLE-3 draft by name, and they part ways on a name they cannot place:

- SGLang's ``LlamaForCausalLMEagle3.load_weights`` renames the legacy names (``legacy_name_map``: ``midlayer`` ->
  ``layers.0``, ``aux_norm_*`` -> ``fc_norm.*``), takes any name holding ``d2t`` as the hot-token map and skips
  ``t2d``, then loads a tensor under its name or under ``model.`` + its name **only if that parameter exists**
  (``if param_name in params_dict:``): a name it cannot place is dropped without a word, and the parameter it was
  meant for keeps its initial value. The server starts and serves a draft that was never loaded.
- vLLM's ``Eagle3LlamaForCausalLM.load_weights`` skips ``t2d``, renames ``d2t`` to ``draft_id_to_target_id``, and
  puts ``model.`` before every other name without ``lm_head``; the draft's ``LlamaModel`` then maps ``midlayer.`` to
  ``layers.0.``. A name that reaches no module or parameter is refused: AutoWeightsLoader raises ``ValueError: There
  is no module or parameter named ...`` (0.32/0.33, model_executor/models/utils.py), or the 0.11 draft layer's
  ``params_dict[name]`` raises KeyError. The server does not start. A checkpoint saved under ``model.`` (a layout
  SGLang accepts) is refused by vLLM so: ``model.`` + ``model.layers.0...``.

What is read from the installed source (``loader_reading``): the lines that decide each rule above (cited in the
finding) and the renames themselves (dict literals and ``.replace`` calls of the loader, parsed with ``ast``); the
rules' shape is the code below. A tree where a deciding line is not found is said (``missing``), and no placement is
judged on it.

Public API: ``loader_reading(root, engine)``, ``place(names, reading)``, ``checkpoint_names(draft_dir)``,
``placement_for(engine, site, draft_dir)``, ``as_trained(tensors, placement)``, ``PLACED_BY_FIELDS``.
"""

from __future__ import annotations

import ast
import json
import os
import re
import struct
from typing import Any, Dict, List, Optional, Tuple

from remote_probes.eagle3.names import canonical_name
from remote_probes.engine.thread_safe_ast import parse

#: the draft model's own parameters, named as both engines' draft LlamaModel names them (stacked projections unsplit)
MODEL_PARAMS = frozenset(
    ["layers.0.self_attn.%s_proj.weight" % p for p in "qkvo"]
    + ["layers.0.mlp.%s_proj.weight" % p for p in ("gate", "up", "down")]
    + ["layers.0.%s.weight" % n for n in ("input_layernorm", "post_attention_layernorm", "hidden_norm")]
    + ["fc.weight", "norm.weight", "embed_tokens.weight"])
#: names whose presence the config decides (draft_reading/field_findings.py judges them against their fields:
#: num_hidden_layers, fc_norm / norm_before_fc, the bias flags, a Qwen3-style layer's q/k norms)
PLACED_BY_FIELDS = re.compile(r"^(layers\.\d+\.|fc_norm\.\d+\.weight$|input_norm\.weight$|.*\.bias$|"
                              r"layers\.0\.self_attn\.[qk]_norm\.weight$)")
#: the parameters a checkpoint must fill (embed_tokens is shared from the target when absent)
REQUIRED = sorted(MODEL_PARAMS - {"embed_tokens.weight"})

#: (file under the package, regex, rule, required): the lines that decide the loader's rules
MARKS: Dict[str, List[Tuple[str, str, str, bool]]] = {
    "sglang": [
        ("srt/models/llama_eagle3.py", r"def load_weights\(", "entry", True),
        ("srt/models/llama_eagle3.py", r"if \"d2t\" in name", "d2t", True),
        ("srt/models/llama_eagle3.py", r"f\"model\.\{name\}\"", "prefix", True),
        ("srt/models/llama_eagle3.py", r"if param_name in params_dict:", "unplaced", True),
    ],
    "vllm": [
        ("model_executor/models/llama_eagle3.py", r"def load_weights\(", "entry", True),
        ("model_executor/models/llama_eagle3.py", r"name\.replace\(\"d2t\", \"draft_id_to_target_id\"\)", "d2t", True),
        ("model_executor/models/llama_eagle3.py", r"name = \"model\.\" \+ name", "prefix", True),
        ("model_executor/models/utils.py", r"There is no module or parameter named", "unplaced", True),
        ("model_executor/models/llama_eagle3.py", r"param = params_dict\[name\]", "unplaced_inner", False),
    ],
}
_OUTER = {"sglang": "LlamaForCausalLMEagle3", "vllm": "Eagle3LlamaForCausalLM"}


def _renames(path: str) -> Dict[str, str]:
    """The loader's renames: str -> str dict literals and ``.replace(str, str)`` calls inside ``load_weights``, and
    ``orig_to_new_substr`` keywords anywhere in the file (vLLM's class-level WeightsMapper)."""
    with open(path, encoding="utf-8") as handle:
        tree = parse(handle.read(), filename=path)
    out: Dict[str, str] = {}

    def text(node: Optional[ast.AST]) -> Optional[str]:
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None

    def literal(node: ast.AST) -> None:
        if not isinstance(node, ast.Dict) or not node.keys:
            return
        pairs = [(text(node.keys[i]), text(node.values[i])) for i in range(len(node.keys))]
        if all(k is not None and v is not None for k, v in pairs):
            out.update({str(k): str(v) for k, v in pairs})

    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "orig_to_new_substr":
            literal(node.value)
        if isinstance(node, ast.FunctionDef) and node.name == "load_weights":
            for inner in ast.walk(node):
                literal(inner)
                if (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute)
                        and inner.func.attr == "replace" and len(inner.args) == 2
                        and all(text(a) is not None for a in inner.args)):
                    out[str(text(inner.args[0]))] = str(text(inner.args[1]))
    out.pop("d2t", None)  # the map's own rename (vLLM: draft_id_to_target_id), a rule of its own
    return out


def loader_reading(root: Optional[str], engine: str) -> Dict[str, Any]:
    """``{"engine", "rules": {rule: {"file", "line", "text"}}, "renames": {old: new}, "inner": "auto"|"keyerror",
    "missing": [what was not found]}``; ``root`` None reads nothing and says so."""
    out: Dict[str, Any] = {"engine": engine, "rules": {}, "renames": {}, "inner": "auto", "missing": []}
    if engine not in MARKS:
        out["missing"] = ["no loader rules for engine %r" % engine]
        return out
    if not root:
        out["missing"] = ["the %s package (not found)" % engine]
        return out
    lines: Dict[str, List[str]] = {}
    for rel, pattern, rule, required in MARKS[engine]:
        if rel not in lines:
            try:
                with open(os.path.join(root, rel), encoding="utf-8") as handle:
                    lines[rel] = handle.read().splitlines()
            except OSError:
                lines[rel] = []
        hit = next((i for i, text in enumerate(lines[rel]) if re.search(pattern, text)), None)
        if hit is None:
            if required:
                out["missing"].append("%s: %s" % (rel, rule))
            continue
        out["rules"][rule] = {"file": rel, "line": hit + 1, "text": lines[rel][hit].strip()[:160]}
    if "unplaced_inner" in out["rules"]:
        out["inner"] = "keyerror"
    first = MARKS[engine][0][0]
    try:
        out["renames"] = _renames(os.path.join(root, first))
    except (OSError, SyntaxError, ValueError):
        out["missing"].append("%s: renames" % first)
    return out


def _known(body: str) -> bool:
    return body in MODEL_PARAMS or bool(PLACED_BY_FIELDS.match(body))


def _module_path(body: str) -> str:
    """The first dotted prefix of ``body`` that names no module of the draft's LlamaModel (what AutoWeightsLoader
    reports)."""
    parts = body.split(".")
    known = {".".join(p.split(".")[:i]) for p in MODEL_PARAMS for i in range(1, p.count(".") + 2)}
    for i in range(1, len(parts) + 1):
        if ".".join(parts[:i]) not in known:
            return ".".join(parts[:i])
    return body


def _sglang(name: str, renames: Dict[str, str]) -> Tuple[str, Optional[str]]:
    n = name
    for old, new in renames.items():
        if old in n:
            n = n.replace(old, new)
    if "d2t" in n:
        return "placed", "d2t"
    if "t2d" in n:
        return "skipped", None
    if n == "lm_head.weight":
        return "placed", n
    # param_name = name if name in params_dict else f"model.{name}": bare, or under exactly one "model."
    body = n[len("model."):] if n.startswith("model.") else n
    return ("placed", body) if _known(body) else ("dropped", None)


def _vllm(name: str, renames: Dict[str, str], inner: str) -> Tuple[str, Optional[str]]:
    n = name
    if "t2d" in n:
        return "skipped", None
    if "d2t" in n:
        n = n.replace("d2t", "draft_id_to_target_id")
    elif "mask_hidden" in n:
        return "skipped", None
    elif "lm_head" not in n:
        n = "model." + n
    first, _, rest = n.partition(".")
    if first == "lm_head":
        return ("placed", n) if rest == "weight" else ("refused", "'%s' in %s" % (n.rsplit(".", 1)[0], _OUTER["vllm"]))
    if first == "draft_id_to_target_id" and not rest:
        return "placed", "d2t"
    if first != "model":
        return "refused", "'%s' in %s" % (first, _OUTER["vllm"])
    body = rest
    for old, new in renames.items():
        if old in body:
            body = body.replace(old, new)
    if _known(body):
        return "placed", body
    if inner == "keyerror":
        return "refused", "KeyError: %r (the draft layer's params_dict)" % body
    return "refused", "'%s' in LlamaModel" % _module_path(body)


def _canon(body: str) -> str:
    return "d2t" if body == "d2t" else canonical_name(body)


def place(names: List[str], reading: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """What the engine's loader does with each checkpoint tensor name (None when the loader was not read):
    ``{"engine", "placed": {name: canonical}, "dropped": [names], "refused": {name: what the engine says},
    "left_at_init": [canonical names of required parameters no tensor fills], "renames": {name: the name the loader
    places, for an unplaced tensor whose name under a shorter prefix lands on a parameter nothing else fills},
    "rules": reading["rules"]}``."""
    if reading.get("missing") or not reading.get("rules"):
        return None
    engine, renames = reading["engine"], reading.get("renames") or {}

    def one(name: str) -> Tuple[str, Optional[str]]:
        return _sglang(name, renames) if engine == "sglang" else _vllm(name, renames, reading.get("inner", "auto"))

    placed: Dict[str, str] = {}
    dropped: List[str] = []
    refused: Dict[str, str] = {}
    skipped: List[str] = []
    for name in sorted(names):
        status, where = one(name)
        if status == "placed" and where is not None:
            placed[name] = _canon(where)
        elif status == "dropped":
            dropped.append(name)
        elif status == "refused" and where is not None:
            refused[name] = where
        else:
            skipped.append(name)
    filled = set(placed.values())
    missing = [canonical_name(p) for p in REQUIRED if canonical_name(p) not in filled]
    fixes: Dict[str, str] = {}
    for name in dropped + sorted(refused):
        parts = name.split(".")
        for i in range(1, len(parts)):
            shorter = ".".join(parts[i:])
            status, where = one(shorter)
            if status == "placed" and where is not None and _canon(where) not in filled:
                fixes[name] = shorter
                filled.add(_canon(where))
                break
    cut = {old[:len(old) - len(new)] for old, new in fixes.items()}
    if len(cut) == 1:  # one prefix to strip: the names placed or skipped anyway lose it too (SGLang takes any name
        # holding "d2t" as the map, both skip t2d), so the copy has one layout every loader reads
        prefix = cut.pop()
        for name in skipped + sorted(placed):
            short = name[len(prefix):] if name.startswith(prefix) else None
            if short and one(short) == one(name) and short not in names:
                fixes[name] = short
    return {"engine": engine, "placed": placed, "dropped": dropped, "refused": refused,
            "left_at_init": missing, "renames": fixes, "rules": reading["rules"]}


def checkpoint_names(draft: str) -> Optional[List[str]]:
    """Every tensor name of the directory's safetensors files, as saved (None: no safetensors files, e.g. a .bin
    checkpoint, whose names are not read here)."""
    try:
        files = sorted(f for f in os.listdir(draft) if f.endswith(".safetensors"))
    except OSError:
        return None
    if not files:
        return None
    out: List[str] = []
    for fname in files:
        with open(os.path.join(draft, fname), "rb") as fh:
            size = struct.unpack("<Q", fh.read(8))[0]
            out += [n for n in json.loads(fh.read(size)) if n != "__metadata__"]
    return out


def placement_for(engine: str, site: Optional[List[str]], draft: str) -> Optional[Dict[str, Any]]:
    """place() of a draft directory on the engine installed here (found as sglang_source finds a package, ``site``
    first); None when no engine is installed, its loader was not read, or the checkpoint is not safetensors."""
    from remote_probes.agent.protocol import ProbeFailure
    from remote_probes.engine.sglang_source import locate_package

    names = checkpoint_names(draft)
    if names is None:
        return None
    try:
        root = locate_package(engine, site or None)["root"]
    except ProbeFailure:
        return None
    return place(names, loader_reading(root, engine))


def as_trained(tensors: Dict[str, Any], placement: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """``tensors`` (saved name -> anything) under the names the loader places, with the unplaced ones under the names
    it would place (``renames``): what the other checks judge, so that one naming fault is said once (by the
    ``tensor.names`` finding) and not again as a missing head or map. Unchanged when every name is placed."""
    if not placement or not (placement["dropped"] or placement["refused"]):
        return tensors
    names = dict(placement["placed"], **placement["renames"])
    return {names.get(k, k): v for k, v in tensors.items()}
