# orchestrator-agent: in-process
"""Which class of the installed engine runs the TARGET, and which hidden states that class captures for an EAGLE-3
draft by default: followed from the target's config through the engine's registry, the class's bases and any
delegation to a wrapped language model, to the capture method that really runs. Standard library only, Python >= 3.9;
the engine is never imported (its import needs the whole GPU stack): its files are parsed with ``ast``.

- SGLang: ``architectures[0]`` -> the module whose ``EntryClass`` names it (engine_registry.scan_sglang, as
  ``sglang.srt.models.registry`` does) -> ``set_eagle3_layers_to_capture`` on the class or its bases. A wrapper
  that forwards it (``self.language_model.set_eagle3_layers_to_capture(layer_ids)``: kimi_k25.py, mllama4.py,
  gemma3_mm.py) is followed to the class its ``__init__`` assigns to ``self.language_model``. The default ids are the
  list the method assigns when ``layer_ids is None`` (``[2, num_layers // 2, num_layers - 3]`` in every class read),
  evaluated with the layer count the method reads; ids given by the draft become ``val + 1`` there.
- vLLM: ``architectures[0]`` -> ``(module, class)`` in model_executor/models/registry.py's tables -> the default-ids
  method the model runner calls (read from the runner: ``get_eagle3_default_aux_hidden_state_layers`` in 0.33,
  ``get_eagle3_aux_hidden_state_layers`` in 0.11) on the class or its bases (interfaces.py's ``SupportsEagle3``
  supplies it in 0.33, reaching into ``language_model`` for a wrapper). A wrapper's language model is built by
  ``init_vllm_registered_model(..., hf_config=config.text_config)``: followed through the registry again with the
  text config's architecture.

Both engines' default ids, read as HF ``hidden_states`` indices, are the same numbers (SGLang captures at the entry
of layer i, i.e. the output of layer i - 1 = HF index i; vLLM at layer boundaries, see vllm_capture.py), so
``default_wiring`` is the ids themselves.

Where the states are taken is the class's layer loop: ``capture_loop`` is the ``forward`` of the model the class
builds as ``self.model``, on it or its bases (SGLang 0.5.12.post1's Qwen3 -> ``Qwen2Model.forward`` in qwen2.py,
0.5.23's own ``Qwen3Model.forward``; vLLM's Qwen3 -> ``Qwen2Model.forward``); sglang_capture.py and vllm_capture.py
read their capture placement there.

Public API: ``resolve(config, engine, root) -> dict`` (the chain, the capture method's file:line, the default ids,
the layer loop), ``capture_loop(config, engine, root)``, ``target_loop(target_path, engine, root)``,
``main(args)`` the probe (args: ``target_path`` or ``config``, ``engine``, ``sys_path``).
"""

from __future__ import annotations

import ast
import json
import os
import re
from typing import Any, Dict, List, Optional, Tuple

from remote_probes.agent.protocol import ProbeFailure, run_probe
from remote_probes.engine.registry import _locate, _module_entries, installed_version, scan_vllm
from remote_probes.engine.thread_safe_ast import parse as parse_python
from remote_probes.engine.vllm_capture import find_vllm_root
from remote_probes.engine.vllm_capture import installed_version as vllm_version

SGLANG_METHOD = "set_eagle3_layers_to_capture"
#: the default-ids methods vLLM's runners have called, newest first (the runner's own call decides)
VLLM_METHODS = ("get_eagle3_default_aux_hidden_state_layers", "get_eagle3_aux_hidden_state_layers")
VLLM_RUNNERS = (os.path.join("v1", "worker", "gpu", "spec_decode", "eagle", "eagle3_utils.py"),
                os.path.join("v1", "worker", "gpu_model_runner.py"))
WRAPPED = ("language_model",)
_MAX_DEPTH = 8
_MAX_FILE = 8 * 1024 * 1024


class _Tree:
    """Parsed modules of one package root, each parsed once."""

    def __init__(self, root: str, package: str) -> None:
        self.root, self.package = root, package
        self._cache: Dict[str, Optional[ast.Module]] = {}

    def module(self, rel: str) -> Optional[ast.Module]:
        if rel not in self._cache:
            path = os.path.join(self.root, rel)
            tree = None
            if os.path.isfile(path) and os.path.getsize(path) <= _MAX_FILE:
                try:
                    with open(path, encoding="utf-8", errors="replace") as f:
                        tree = parse_python(f.read(), filename=rel)
                except SyntaxError:
                    tree = None
            self._cache[rel] = tree
        return self._cache[rel]

    def module_file(self, dotted: str, importer: str, level: int = 0) -> Optional[str]:
        """The file (relative to the root) of an imported module: absolute ``sglang.srt.models.x`` or relative."""
        if level:
            base = os.path.dirname(importer)
            for _ in range(level - 1):
                base = os.path.dirname(base)
            parts = [p for p in base.split(os.sep) if p] + (dotted.split(".") if dotted else [])
        else:
            parts = dotted.split(".")
            if not parts or parts[0] != self.package:
                return None
            parts = parts[1:]
        for rel in (os.path.join(*parts) + ".py", os.path.join(*(parts + ["__init__.py"]))):
            if os.path.isfile(os.path.join(self.root, rel)):
                return rel
        return None

    def find_class(self, name: str, rel: str, depth: int = 0) -> Optional[Tuple[str, ast.ClassDef]]:
        """The class a name means in module ``rel``: defined there, or imported (followed to its module)."""
        tree = self.module(rel)
        if tree is None or depth > _MAX_DEPTH:
            return None
        for stmt in tree.body:
            if isinstance(stmt, ast.ClassDef) and stmt.name == name:
                return rel, stmt
        for node in ast.walk(tree):  # imports inside try/if blocks too
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        target = self.module_file(node.module or "", rel, node.level)
                        if target and target != rel:
                            return self.find_class(alias.name, target, depth + 1)
        return None


def _base_names(node: ast.ClassDef) -> List[str]:
    out = []
    for base in node.bases:
        if isinstance(base, ast.Name):
            out.append(base.id)
        elif isinstance(base, ast.Attribute):
            out.append(base.attr)
    return out


def _method(tree: _Tree, rel: str, cls: ast.ClassDef, name: str,
            depth: int = 0) -> Optional[Tuple[str, ast.ClassDef, ast.FunctionDef]]:
    """``name`` on the class or the first base (left to right, depth first, as Python's MRO is for these
    single-chain hierarchies) that defines it: (file, defining class, function)."""
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return rel, cls, node
    if depth > _MAX_DEPTH:
        return None
    for base in _base_names(cls):
        found = tree.find_class(base, rel)
        if found:
            hit = _method(tree, found[0], found[1], name, depth + 1)
            if hit:
                return hit
    return None


def _delegate_attr(fn: ast.FunctionDef, method_names: Tuple[str, ...]) -> Optional[str]:
    """``language_model`` when the method forwards to ``self.language_model.<same method>(...)``."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in method_names:
            owner = node.func.value
            if isinstance(owner, ast.Attribute) and owner.attr in WRAPPED and \
                    isinstance(owner.value, ast.Name) and owner.value.id == "self":
                return owner.attr
    return None


def _reaches_language_model(fn: ast.FunctionDef) -> bool:
    """vLLM's generic default (interfaces.py) looks for ``get_language_model``/``language_model`` at run time."""
    text = ast.dump(fn)
    return "get_language_model" in text or "'language_model'" in text


def _assigned_class(cls: ast.ClassDef, attr: str) -> Tuple[Optional[str], Optional[ast.Call]]:
    """What ``__init__`` assigns to ``self.<attr>``: (class name of a direct constructor call, the call)."""
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            for sub in ast.walk(node):
                if isinstance(sub, ast.Assign) and isinstance(sub.value, ast.Call) and any(
                        isinstance(t, ast.Attribute) and t.attr == attr for t in sub.targets):
                    func = sub.value.func
                    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) \
                        else None
                    return name, sub.value
    return None, None


def _uses_text_config(node: ast.AST) -> bool:
    return "text_config" in ast.dump(node)


def _default_ids(fn: ast.FunctionDef) -> Tuple[Optional[List[Any]], Optional[str], bool]:
    """The default list (as ast) and how the layer count is read: (elements, num_layers source text, text_config?)."""
    count_expr: Optional[str] = None
    text = False
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "num_layers" for t in node.targets):
            count_expr = ast.unparse(node.value) if hasattr(ast, "unparse") else "num_layers"
            text = _uses_text_config(node.value)
    for node in ast.walk(fn):
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts and all(
                isinstance(e, (ast.Constant, ast.BinOp, ast.Name)) for e in node.elts) and \
                "num_layers" in ast.dump(node):
            return list(node.elts), count_expr, text
    return None, count_expr, text


def _evaluate(elts: List[Any], n: int) -> Optional[List[int]]:
    def ev(node: Any) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id == "num_layers":
            return n
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            ops = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}
            if isinstance(node.op, ast.FloorDiv):
                return a // b
            if type(node.op) in ops:
                return ops[type(node.op)]
        raise ValueError(ast.dump(node))

    try:
        return [ev(e) for e in elts]
    except (ValueError, ZeroDivisionError):
        return None


def _id_offset(fn: ast.FunctionDef) -> Optional[int]:
    """SGLang's ``[val + 1 for val in layer_ids]``: how a draft's id becomes a captured layer."""
    for node in ast.walk(fn):
        if isinstance(node, ast.ListComp) and isinstance(node.elt, ast.BinOp) and \
                isinstance(node.elt.right, ast.Constant) and isinstance(node.elt.right.value, int):
            sign = 1 if isinstance(node.elt.op, ast.Add) else -1 if isinstance(node.elt.op, ast.Sub) else 0
            if sign:
                return sign * node.elt.right.value
    return None


def text_config(config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    for key in ("text_config", "language_config", "llm_config"):
        if isinstance(config.get(key), dict):
            return config[key]
    return None


def _architecture(config: Dict[str, Any]) -> Optional[str]:
    archs = config.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    return None


def _layers(config: Dict[str, Any], text: bool) -> Tuple[Optional[int], str]:
    inner = text_config(config)
    if text and inner is not None and isinstance(inner.get("num_hidden_layers"), int):
        return inner["num_hidden_layers"], "text_config.num_hidden_layers"
    if isinstance(config.get("num_hidden_layers"), int):
        return config["num_hidden_layers"], "num_hidden_layers"
    if inner is not None and isinstance(inner.get("num_hidden_layers"), int):
        return inner["num_hidden_layers"], "text_config.num_hidden_layers"
    return None, "none"


def _link(rel: str, package: str, cls: ast.ClassDef, owner: ast.ClassDef, fn: ast.FunctionDef,
          class_file: str) -> Dict[str, Any]:
    line = fn.lineno
    return {"class": cls.name, "class_file": class_file.replace(os.sep, "/"), "method": fn.name,
            "defined_in": owner.name, "file": rel.replace(os.sep, "/"), "line": line,
            "end_line": getattr(fn, "end_lineno", line), "symbol": "%s.%s" % (owner.name, fn.name),
            "where": "%s/%s:%d" % (package, rel.replace(os.sep, "/"), line)}


# ---------------------------------------------------------------- SGLang


def sglang_entry_modules(root: str, names: List[str]) -> Dict[str, str]:
    """architecture -> module file (``srt/models/x.py``) for the given names, as engine_registry.scan_sglang maps
    every EntryClass, but parsing only the modules whose text mentions a name (a whole scan parses ~200 files)."""
    models = os.path.join(root, "srt", "models")
    out: Dict[str, str] = {}
    for name in sorted(os.listdir(models)) if os.path.isdir(models) else []:
        path = os.path.join(models, name)
        if not name.endswith(".py") or name.startswith("__") or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        if "EntryClass" not in text or not any(n in text for n in names if n not in out):
            continue
        try:
            entries = _module_entries(path, root)
        except (OSError, SyntaxError, ValueError):
            continue
        for cls in entries or []:
            out.setdefault(cls, os.path.join("srt", "models", name))
    return {n: out[n] for n in names if n in out}


def _sglang_chain(tree: _Tree, registry: Dict[str, str], arch: str, config: Dict[str, Any],
                  out: Dict[str, Any]) -> None:
    module = registry.get(arch)
    if module is None:
        out["why"] = "no module of the installed SGLang has %s in its EntryClass" % arch
        return
    rel = module
    found = tree.find_class(arch, rel)
    text = False
    for _ in range(_MAX_DEPTH):
        if found is None:
            out["why"] = "class %s not found in %s" % (arch, rel)
            return
        cls_file, cls = found
        hit = _method(tree, cls_file, cls, SGLANG_METHOD)
        if hit is None:
            out["why"] = "%s (sglang/%s) has no %s: SGLang cannot capture aux hidden states for it" % (
                cls.name, cls_file, SGLANG_METHOD)
            return
        mfile, owner, fn = hit
        link = _link(mfile, "sglang", cls, owner, fn, cls_file)
        attr = _delegate_attr(fn, (SGLANG_METHOD,))
        out["chain"].append(link)
        if attr is None:
            out["capture_loop"] = _capture_loop(tree, "sglang", cls_file, cls)
            _finish(out, fn, config, text)
            return
        inner, _call = _assigned_class(cls, attr)
        link["delegates_to"] = attr
        if inner is None:
            out["why"] = "%s forwards to self.%s, whose class is not a direct constructor call" % (cls.name, attr)
            return
        text = True  # a wrapped language model is built from the wrapper's text config
        found = tree.find_class(inner, cls_file)
    out["why"] = "delegation deeper than %d" % _MAX_DEPTH


def _captures(fn: ast.FunctionDef) -> bool:
    """The forward runs the capture itself: ``aux_hidden_states.append(...)`` (SGLang 0.5.12, vLLM 0.11), a
    ``capture_output=`` / ``captured_last_layer_outputs=`` to the layer (SGLang 0.5.23, MoE models) or ``self._maybe_add_hidden_state(...)`` (vLLM 0.33); a
    causal-LM forward that only unpacks the model's aux states does not."""
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and (func.attr == "_maybe_add_hidden_state" or (
                func.attr == "append" and isinstance(func.value, ast.Name) and func.value.id == "aux_hidden_states")):
            return True
        if any(k.arg in ("capture_output", "captured_last_layer_outputs") for k in node.keywords):
            return True
    return False


def _model_class(cls: ast.ClassDef) -> Optional[str]:
    """The class ``__init__`` builds as ``self.model``: a constructor call, or a ``self._init_model(...)`` helper whose
    ``return X(...)`` names it (Llama in both engines)."""
    inner, call = _assigned_class(cls, "model")
    if call is not None and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) and \
            call.func.value.id == "self":
        helper = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == call.func.attr), None)
        returned = [r.value.func for r in ast.walk(helper) if isinstance(r, ast.Return) and
                    isinstance(r.value, ast.Call)] if helper else []
        names = [f.id if isinstance(f, ast.Name) else f.attr for f in returned if isinstance(f, (ast.Name,
                                                                                                ast.Attribute))]
        return names[0] if names else None
    return inner


def _capture_loop(tree: _Tree, package: str, cls_file: str, cls: ast.ClassDef) -> Optional[Dict[str, Any]]:
    """Where the class's layer loop captures: the ``forward`` of the model it builds as ``self.model``, found on that
    class or its bases as Python's MRO finds it (SGLang 0.5.12's ``Qwen3Model`` inherits ``Qwen2Model.forward`` from
    qwen2.py; 0.5.23's defines its own in qwen3.py); else the first class of the class's file whose forward captures.
    None when no forward captures."""
    inner = _model_class(cls)
    found = tree.find_class(inner, cls_file) if inner else None
    module = tree.module(cls_file)
    others = [(cls_file, c) for c in (module.body if module else []) if isinstance(c, ast.ClassDef)]
    for file, owner in ([found] if found else []) + others:
        hit = _method(tree, file, owner, "forward")
        if hit is None or not _captures(hit[2]):
            continue
        mfile, defined, fn = hit
        line = fn.lineno
        rel = mfile.replace(os.sep, "/")
        return {"class": owner.name, "defined_in": defined.name, "method": "forward", "file": rel, "line": line,
                "end_line": getattr(fn, "end_lineno", line), "symbol": "%s.forward" % defined.name,
                "where": "%s/%s:%d" % (package, rel, line)}
    return None


def capture_loop(config: Dict[str, Any], engine: str, root: str) -> Optional[Dict[str, Any]]:
    """The target's capture loop (``{file, defined_in, symbol, line}``) in the engine at ``root``, or None."""
    try:
        loop = resolve(config, engine, root).get("capture_loop")
    except (OSError, ValueError):
        return None
    return loop if isinstance(loop, dict) else None


def target_loop(target_path: Any, engine: str, root: Optional[str]) -> Optional[Dict[str, Any]]:
    """``capture_loop`` for the target directory's config.json; None when there is no target, engine or config (the
    capture rules then read Llama's loop, as they say)."""
    if not target_path or not root:
        return None
    try:
        with open(os.path.join(os.path.expanduser(str(target_path)), "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None
    return capture_loop(config, engine, root) if isinstance(config, dict) else None


def _finish(out: Dict[str, Any], fn: ast.FunctionDef, config: Dict[str, Any], text: bool) -> None:
    elts, count_expr, reads_text = _default_ids(fn)
    n, source = _layers(config, text or reads_text)
    out["num_layers"], out["num_layers_source"] = n, source
    out["count_expression"] = count_expr
    out["capture"] = dict(out["chain"][-1])
    offset = _id_offset(fn)
    if offset is not None:
        out["id_offset"] = offset
    if elts is None:
        out["why"] = "%s sets no default list of layers" % out["capture"]["symbol"]
        return
    out["default_rule"] = "[%s]" % ", ".join(ast.unparse(e) if hasattr(ast, "unparse") else "?" for e in elts)
    if n is None:
        out["why"] = "the target config has no num_hidden_layers"
        return
    ids = _evaluate(elts, n)
    out["default_ids"] = ids
    out["default_wiring"] = ids
    out["found"] = ids is not None


# ---------------------------------------------------------------- vLLM


def vllm_registry(root: str) -> Dict[str, Tuple[str, str]]:
    """architecture -> (module, class) from models/registry.py's tables (engine_registry.scan_vllm)."""
    scan = scan_vllm(root) or {}
    out: Dict[str, Tuple[str, str]] = {}
    for name, cls in (scan.get("classes") or {}).items():
        module = scan["architectures"].get(name, "")
        out[name] = (os.path.splitext(os.path.basename(module))[0], cls)
    return out


_VLLM_BUILDERS = ("init_vllm_registered_model", "initialize_model")


def _call_architecture(call: ast.Call) -> Optional[str]:
    """The class a vLLM wrapper names where it builds its language model: ``model_class=Cls``, else
    ``architectures=["Arch"]``, else a ``with_hf_config(config.text_config, ["Arch"])`` inside the call."""
    for kw in call.keywords:
        if kw.arg == "model_class" and isinstance(kw.value, ast.Name):
            return kw.value.id
    for node in ast.walk(call):
        values = [kw.value for kw in node.keywords if kw.arg == "architectures"] if isinstance(node, ast.Call) else []
        values += list(node.args) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr == "with_hf_config" else []
        for value in values:
            if isinstance(value, ast.List) and value.elts and isinstance(value.elts[0], ast.Constant) and \
                    isinstance(value.elts[0].value, str):
                return value.elts[0].value
    return None


def vllm_runner_method(root: str) -> Tuple[str, Optional[str]]:
    """The default-ids method the installed runner calls, and where (file:line)."""
    for rel in VLLM_RUNNERS:
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                match = re.search(r"\.(get_eagle3\w*_aux_hidden_state_layers)\(\)", line)
                if match and "def " not in line:
                    return match.group(1), "vllm/%s:%d" % (rel.replace(os.sep, "/"), number)
    return VLLM_METHODS[0], None


def _vllm_chain(tree: _Tree, registry: Dict[str, Tuple[str, str]], arch: str, config: Dict[str, Any],
                method: str, out: Dict[str, Any]) -> None:
    text = False
    cfg = config
    for _ in range(_MAX_DEPTH):
        entry = registry.get(arch)
        if entry is None:
            out["why"] = "the installed vLLM's model registry has no %s" % arch
            return
        rel = os.path.join("model_executor", "models", entry[0] + ".py")
        found = tree.find_class(entry[1], rel)
        if found is None:
            out["why"] = "class %s not found in vllm/%s" % (entry[1], rel)
            return
        cls_file, cls = found
        hit = _method(tree, cls_file, cls, method)
        if hit is None:
            out["why"] = "%s has no %s (not SupportsEagle3): vLLM serves no EAGLE-3 draft on it" % (cls.name, method)
            return
        mfile, owner, fn = hit
        link = _link(mfile, "vllm", cls, owner, fn, cls_file)
        link["registry"] = "%s -> (%r, %r)" % (arch, entry[0], entry[1])
        out["chain"].append(link)
        attr = _delegate_attr(fn, VLLM_METHODS)
        if attr is None and _reaches_language_model(fn):
            assigned, _call = _assigned_class(cls, "language_model")
            attr = "language_model" if assigned else None
        if attr is None:
            out["capture_loop"] = _capture_loop(tree, "vllm", cls_file, cls)
            _finish(out, fn, config, text)
            return
        link["delegates_to"] = attr
        inner, call = _assigned_class(cls, attr)
        named = _call_architecture(call) if call is not None else None
        inner_cfg = text_config(cfg) if call is not None and _uses_text_config(call) else None
        if named is not None:  # architectures=[...] / model_class=... given where the language model is built
            arch = named if named in registry else next((a for a, (_m, c) in registry.items() if c == named), named)
        elif inner in _VLLM_BUILDERS:
            inner_arch = _architecture(inner_cfg) if inner_cfg else None
            if inner_arch is None:
                out["why"] = ("%s builds its language model from the registry with the text config, which names "
                              "no architectures" % cls.name)
                return
            arch = inner_arch
        elif inner is not None:
            arch = next((a for a, (_m, c) in registry.items() if c == inner), inner)
        else:
            out["why"] = "%s forwards to self.%s, whose class is not found" % (cls.name, attr)
            return
        text = True
        link["language_model"] = arch
    out["why"] = "delegation deeper than %d" % _MAX_DEPTH


# ---------------------------------------------------------------- entry points


def resolve(config: Dict[str, Any], engine: str, root: str) -> Dict[str, Any]:
    """Follow ``config``'s architecture through the engine installed at ``root`` (the package directory)."""
    arch = _architecture(config)
    inner = text_config(config)
    out: Dict[str, Any] = {"engine": engine, "root": root, "architecture": arch,
                           "text_architecture": _architecture(inner) if inner else None, "chain": [],
                           "found": False, "capture": None, "capture_loop": None, "default_ids": None,
                           "default_wiring": None}
    if arch is None:
        out["why"] = "the target config names no architectures"
        return out
    if engine == "sglang":
        tree = _Tree(root, "sglang")
        out["version"] = installed_version(root)
        _sglang_chain(tree, sglang_entry_modules(root, [arch]), arch, config, out)
    else:
        tree = _Tree(root, "vllm")
        out["version"] = vllm_version(root)
        method, where = vllm_runner_method(root)
        out["runner_call"] = {"method": method, "at": where}
        _vllm_chain(tree, vllm_registry(root), arch, config, method, out)
    out["followed"] = " -> ".join("%s.%s%s" % (c["class"], c["method"],
                                                " -> self.%s" % c["delegates_to"] if c.get("delegates_to") else "")
                                  for c in out["chain"])
    return out


def main(args: Dict[str, Any]) -> Dict[str, Any]:
    engine = args.get("engine", "sglang")
    if engine not in ("sglang", "vllm"):
        raise ProbeFailure("bad_args", "'engine' must be sglang or vllm, got %r" % (engine,))
    config = args.get("config")
    if config is None:
        target = args.get("target_path")
        if not isinstance(target, str) or not target:
            raise ProbeFailure("bad_args", "'target_path' (the target model directory) or 'config' is required")
        path = os.path.join(os.path.expanduser(target), "config.json")
        if not os.path.isfile(path):
            raise ProbeFailure("not_found", "target %s has no config.json" % target, path=path)
        try:
            with open(path, encoding="utf-8") as f:
                config = json.load(f)
        except ValueError as exc:
            raise ProbeFailure("bad_config", "target config %s is not JSON: %s" % (path, exc), path=path) from None
    if not isinstance(config, dict):
        raise ProbeFailure("bad_args", "'config' must be a JSON object")
    sys_path = args.get("sys_path") or None
    root = _locate(sys_path) if engine == "sglang" else find_vllm_root(sys_path)
    if root is None:
        return {"engine": engine, "found": False, "installed": False, "chain": [], "architecture": _architecture(config),
                "why": "no installed %s was found by this python" % engine}
    result = resolve(config, engine, root)
    result["installed"] = True
    return result


if __name__ == "__main__":
    run_probe(main)
