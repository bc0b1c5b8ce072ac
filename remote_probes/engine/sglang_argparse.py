"""SGLang's argument parser, rebuilt statically from an installed source tree, and its start-up rules that crash.

Standard library only, Python >= 3.9, and no sibling imports: the ``sglang_flags`` probe runs it on a host, and the
lab server imports it as ``remote_probes.sglang_argparse``. Nothing of sglang is imported (on a CPU box with a
``pip --no-deps`` tree it cannot be): the options are read from the source by ``ast``.

Three layouts:
- ``add_argument`` (0.5.12.post1): every ``parser.add_argument(...)`` call in ``ServerArgs.add_cli_args``
  (srt/server_args.py).
- ``annotated`` (0.5.15.post1): ``ServerArgs``' own ``A[T, Arg(...)]`` fields (srt/server_args.py), turned into
  options by ``add_cli_args_from_dataclass(parser, ServerArgs)`` (srt/arg_groups/arg_utils.py) in declaration
  order, then the other ``add_argument`` calls in ``ServerArgs.add_cli_args``.
- ``fields`` (0.5.23): the field declarations in srt/arg_groups/fields/*.py, turned into options the way
  srt/arg_groups/arg_utils.py ``add_cli_args_from_dataclass`` does it, in ``collect_input_fields``' order, then
  the other ``add_argument`` calls in ``ServerArgs.add_cli_args``.

Both become a plain ``argparse.ArgumentParser(prog="sglang serve")`` (SGLang's ``prepare_server_args``), so
abbreviations, ambiguities and error messages are argparse's own. What static reading cannot know is left open
rather than guessed: a value whose type is one of SGLang's own parsers (``json_list_type``...) is accepted as text,
choices computed at run time are not checked, and a custom action consumes what its ``nargs`` says.
"""

from __future__ import annotations

import argparse
import ast
import functools
import os
import re
from typing import Any, Dict, List, Optional, Tuple

from remote_probes.engine.thread_safe_ast import parse as parse_python

PROG = "sglang serve"
_MISSING = object()
_TYPES: Dict[str, Any] = {"int": int, "float": float, "str": str}


class _Refused(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class StaticParser(argparse.ArgumentParser):
    """argparse exactly as SGLang builds it, except that an error is raised to the caller instead of exiting."""

    def error(self, message: str) -> Any:
        # argparse's own format (ArgumentParser.error): '%(prog)s: error: %(message)s'
        raise _Refused("%s: error: %s" % (self.prog, message), 2)

    def exit(self, status: int = 0, message: Optional[str] = None) -> Any:
        raise _Refused((message or "").strip(), status)


class _OpaqueAction(argparse.Action):
    """A custom SGLang action (LoRAPathAction, DeprecatedAction...): consumes its nargs, stores what it got."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Optional[str] = None) -> None:
        setattr(namespace, self.dest, True if self.nargs == 0 else values)


# ---------------------------------------------------------------- reading the tree


@functools.lru_cache(maxsize=64)
def _parse(path: str) -> ast.Module:
    # cached: server_args.py (8,000 lines in 0.5.12.post1) is read for its options, names and custom actions
    with open(path, encoding="utf-8") as handle:
        return parse_python(handle.read(), filename=path)


def _literal(node: Optional[ast.AST], names: Dict[str, ast.AST], depth: int = 0) -> Any:
    """The value of a literal expression, following module-level names; ``_MISSING`` when not literal."""
    if node is None or depth > 4:
        return _MISSING
    if isinstance(node, ast.Name) and node.id in names:
        return _literal(names[node.id], names, depth + 1)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("list", "tuple",
                                                                                          "frozenset", "set"):
        inner = _literal(node.args[0], names, depth + 1) if len(node.args) == 1 else _MISSING
        return list(inner) if isinstance(inner, (list, tuple, set, frozenset)) else _MISSING
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal(node.left, names, depth + 1), _literal(node.right, names, depth + 1)
        if isinstance(left, list) and isinstance(right, list):
            return left + right
        return _MISSING
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _MISSING


def _module_names(tree: ast.Module) -> Dict[str, ast.AST]:
    names: Dict[str, ast.AST] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            names[stmt.targets[0].id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            names[stmt.target.id] = stmt.value
    return names


class _Tree:
    """The installed sglang package (``root`` is its directory) and what its modules define at the top level."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._names: Dict[str, Dict[str, ast.AST]] = {}

    def path(self, relative: str) -> str:
        return os.path.join(self.root, *relative.split("/"))

    def module_file(self, module: str) -> Optional[str]:
        parts = module.split(".")
        if parts[0] != "sglang":
            return None
        base = os.path.join(self.root, *parts[1:])
        for candidate in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(candidate):
                return candidate
        return None

    def names(self, path: str) -> Dict[str, ast.AST]:
        """Module-level names of ``path``, with names it imports from other sglang modules (one level)."""
        if path not in self._names:
            tree = _parse(path)
            names = _module_names(tree)
            for stmt in tree.body:
                if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.level == 0:
                    source = self.module_file(stmt.module)
                    if source is None or source == path:
                        continue
                    imported = _module_names(_parse(source))
                    for alias in stmt.names:
                        if alias.name in imported and (alias.asname or alias.name) not in names:
                            names[alias.asname or alias.name] = imported[alias.name]
            self._names[path] = names
        return self._names[path]


def detect_layout(root: str) -> str:
    """``fields`` when the tree declares its options as fields of namespaces (0.5.23 and later), ``annotated`` when
    as ``ServerArgs``' own annotated fields (0.5.15.post1), else ``add_argument``."""
    fields = os.path.join(root, "srt", "arg_groups", "fields")
    if not os.path.isfile(os.path.join(root, "srt", "arg_groups", "arg_utils.py")):
        return "add_argument"
    if os.path.isdir(fields):
        return "fields"
    found = _find(os.path.join(root, "srt", "server_args.py"), r"add_cli_args_from_dataclass\(\s*parser,\s*ServerArgs")
    return "annotated" if found is not None else "add_argument"


# ---------------------------------------------------------------- add_argument calls


def _class(tree: ast.Module, name: str) -> Optional[ast.ClassDef]:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _method(cls: ast.ClassDef, name: str) -> Optional[ast.FunctionDef]:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _class_defaults(cls: Optional[ast.ClassDef], names: Dict[str, ast.AST]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for stmt in cls.body if cls else []:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            out[stmt.target.id] = _literal(stmt.value, names)
    return out


def _action_nargs(tree: _Tree, path: str, name: str) -> Any:
    """The ``nargs`` default of a custom action's ``__init__``, found in ``path`` or the module it imports it from."""
    candidates = [path]
    for stmt in _parse(path).body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module and any(a.name == name for a in stmt.names):
            source = tree.module_file(stmt.module)
            if source:
                candidates.insert(0, source)
    for candidate in candidates:
        cls = _class(_parse(candidate), name)
        init = _method(cls, "__init__") if cls else None
        if init is None:
            continue
        args = init.args.args + init.args.kwonlyargs
        defaults = [None] * (len(init.args.args) - len(init.args.defaults)) + list(init.args.defaults) + \
            list(init.args.kw_defaults)
        for arg, default in zip(args, defaults):  # noqa: B905 - same lengths; Python 3.9 has no strict=
            if arg.arg == "nargs" and default is not None:
                return _literal(default, {})
        return None
    return None


class _Option:
    """One ``add_argument`` call, as keyword arguments our parser can take."""

    def __init__(self, names: List[str], kwargs: Dict[str, Any], origin: str) -> None:
        self.names = names
        self.kwargs = kwargs
        self.origin = origin


def _add_argument_options(tree: _Tree, path: str, func: ast.FunctionDef, class_defaults: Dict[str, Any],
                          notes: List[str]) -> List[_Option]:
    names = tree.names(path)
    rel = os.path.relpath(path, tree.root)
    options: List[_Option] = []
    for node in ast.walk(func):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        flags = [_literal(a, names) for a in node.args]
        if not flags or not all(isinstance(f, str) for f in flags):
            notes.append("%s:%d: an add_argument call with computed names was skipped" % (rel, node.lineno))
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        options.append(_Option(flags, _kwargs_from_call(tree, path, kw, names, class_defaults),
                               "%s:%d" % (rel, node.lineno)))
    options.sort(key=lambda o: int(o.origin.rsplit(":", 1)[1]))  # ast.walk is breadth-first; argparse order counts
    return options


def _kwargs_from_call(tree: _Tree, path: str, kw: Dict[str, ast.expr], names: Dict[str, ast.AST],
                      class_defaults: Dict[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    custom_type = False
    if "type" in kw:
        type_name = ast.unparse(kw["type"]) if hasattr(ast, "unparse") else ""
        if type_name in _TYPES:
            out["type"] = _TYPES[type_name]
        else:
            custom_type = True  # SGLang's own parser (json.loads, human_readable_int...): accepted as text here
    action = kw.get("action")
    if action is not None:
        value = _literal(action, {})
        if isinstance(value, str):
            out["action"] = value
        elif isinstance(action, ast.Attribute) and action.attr == "BooleanOptionalAction":
            out["action"] = argparse.BooleanOptionalAction
        else:
            out["action"] = _OpaqueAction
            nargs = _literal(kw["nargs"], {}) if "nargs" in kw else (
                _action_nargs(tree, path, action.id) if isinstance(action, ast.Name) else None)
            if nargs is not None:
                out["nargs"] = nargs
            out.pop("type", None)
            if "dest" in kw:
                out["dest"] = _literal(kw["dest"], {})
            return out
    for key in ("nargs", "dest", "const", "required"):
        if key in kw:
            value = _literal(kw[key], names)
            if value is not _MISSING:
                out[key] = value
    if "choices" in kw and not custom_type:
        choices = _literal(kw["choices"], names)
        if isinstance(choices, (list, tuple, set, frozenset)):
            out["choices"] = list(choices)
    if "default" in kw:
        default = kw["default"]
        if isinstance(default, ast.Attribute) and isinstance(default.value, ast.Name) and \
                default.value.id == "ServerArgs":
            value = class_defaults.get(default.attr, _MISSING)
        else:
            value = _literal(default, names)
        out["default"] = None if value is _MISSING else value
    return out


# ---------------------------------------------------------------- field declarations (0.5.23)


def _strip_optional(node: ast.AST) -> ast.AST:
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        inner = node.slice
        if node.value.id == "Optional":
            return inner
        if node.value.id == "Union" and isinstance(inner, ast.Tuple):
            rest = [e for e in inner.elts if not (isinstance(e, ast.Constant) and e.value is None)]
            return rest[0] if len(rest) == 1 else node
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        for a, b in ((node.left, node.right), (node.right, node.left)):
            if isinstance(b, ast.Constant) and b.value is None:
                return a
    return node


def _field_kwargs(field: str, hint: ast.AST, default: Any, tree: _Tree, path: str) -> Optional[Tuple[List[str],
                                                                                                     Dict[str, Any]]]:
    """``add_cli_args_from_dataclass`` for one field (sglang 0.5.23 srt/arg_groups/arg_utils.py:300-400)."""
    if not (isinstance(hint, ast.Subscript) and isinstance(hint.value, ast.Name)
            and hint.value.id in ("A", "Annotated") and isinstance(hint.slice, ast.Tuple)):
        return None
    raw_type, *metas = hint.slice.elts
    names = tree.names(path)
    meta: Optional[Dict[str, ast.expr]] = None
    for item in metas:  # _unwrap_annotated: the first Arg(...) or bare string wins
        if isinstance(item, ast.Call) and isinstance(item.func, ast.Name) and item.func.id == "Arg":
            meta = {k.arg: k.value for k in item.keywords if k.arg}
            break
        if isinstance(item, (ast.Constant, ast.JoinedStr, ast.BinOp)) and not (
                isinstance(item, ast.Constant) and not isinstance(item.value, str)):
            meta = {}
            break
    if meta is None or _literal(meta.get("no_cli"), {}) is True:
        return None
    cli_name = _literal(meta.get("cli_name"), names) if "cli_name" in meta else None
    cli_name = cli_name if isinstance(cli_name, str) else "--" + field.replace("_", "-")
    aliases = _literal(meta.get("aliases"), names) if "aliases" in meta else None
    flags = [cli_name] + (list(aliases) if isinstance(aliases, (list, tuple)) else [])
    kwargs: Dict[str, Any] = {}
    if cli_name.lstrip("-").replace("-", "_") != field:
        kwargs["dest"] = field
    if default is not _MISSING:
        kwargs["default"] = default
    const = _literal(meta.get("const"), names) if "const" in meta else None
    custom_type = "type_parser" in meta
    if "action" in meta:
        action = meta["action"]
        if isinstance(action, ast.Attribute) and action.attr == "BooleanOptionalAction":
            kwargs["action"] = argparse.BooleanOptionalAction
        elif isinstance(_literal(action, {}), str):
            kwargs["action"] = _literal(action, {})
        else:
            kwargs["action"] = _OpaqueAction
            extra = _literal(meta.get("action_kwargs"), names) if "action_kwargs" in meta else None
            nargs = extra.get("nargs") if isinstance(extra, dict) and "nargs" in extra else (
                _action_nargs(tree, path, action.id) if isinstance(action, ast.Name) else None)
            if nargs is not None:
                kwargs["nargs"] = nargs
        return flags, kwargs
    inner = _strip_optional(raw_type)
    choices = _literal(meta.get("choices"), names) if "choices" in meta else None
    if isinstance(inner, ast.Subscript) and isinstance(inner.value, ast.Name) and inner.value.id == "Literal":
        values = _literal(inner.slice, names)
        values = list(values) if isinstance(values, tuple) else [values]
        kwargs["type"] = str if custom_type else _TYPES.get(type(values[0]).__name__, str) if values else str
        if not custom_type:  # a type_parser may rewrite the value before the choices check: leave it to SGLang
            kwargs["choices"] = list(choices) if isinstance(choices, (list, tuple)) and choices else values
        if const is not None:
            kwargs["const"] = const
        return flags, kwargs
    if isinstance(inner, ast.Subscript) and isinstance(inner.value, ast.Name) and inner.value.id in ("List", "list") \
            and not custom_type:
        elem = inner.slice.id if isinstance(inner.slice, ast.Name) else "str"
        kwargs["type"] = _TYPES.get(elem, str)
        nargs = _literal(meta.get("nargs"), {}) if "nargs" in meta else None
        kwargs["nargs"] = nargs or "+"
        if isinstance(choices, (list, tuple)) and choices:
            kwargs["choices"] = list(choices)
        if const is not None:
            kwargs["const"] = const
        return flags, kwargs
    if isinstance(inner, ast.Name) and inner.id == "bool":
        kwargs["action"] = "store_true"
        return flags, kwargs
    kwargs["type"] = str if custom_type else _TYPES.get(inner.id if isinstance(inner, ast.Name) else "", str)
    if isinstance(choices, (list, tuple)) and choices and not custom_type:
        kwargs["choices"] = list(choices)
    if "nargs" in meta:
        kwargs["nargs"] = _literal(meta["nargs"], {})
    if const is not None:
        kwargs["const"] = const
    required = _literal(meta.get("required"), {}) if "required" in meta else None
    if required is True or (required is None and default is _MISSING):
        kwargs["required"] = True
    return flags, kwargs


def _field_options(tree: _Tree, notes: List[str]) -> List[_Option]:
    """The options ``add_cli_args_from_dataclass(parser, ServerArgs)`` adds, in ``collect_input_fields``' order."""
    fields_dir = tree.path("srt/arg_groups/fields")
    declared: Dict[str, Tuple[str, ast.AnnAssign]] = {}  # class name -> ...
    by_class: Dict[str, List[Tuple[str, ast.AnnAssign]]] = {}
    for name in sorted(os.listdir(fields_dir)):
        if not name.endswith(".py"):
            continue
        path = os.path.join(fields_dir, name)
        for cls in _parse(path).body:
            if not isinstance(cls, ast.ClassDef):
                continue
            if not any(isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_NS_PATH"
                                                         for t in s.targets) for s in cls.body):
                continue
            items = [(path, s) for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
            by_class[cls.name] = items
    # ServerArgs' namespaces, in order (server_args.py `_INPUT_NAMESPACES = [...]`)
    server_args = _parse(tree.path("srt/server_args.py"))
    order_node = _module_names(server_args).get("_INPUT_NAMESPACES")
    order = [e.id for e in order_node.elts if isinstance(e, ast.Name)] if isinstance(order_node, ast.List) else []
    if not order:
        notes.append("srt/server_args.py: no _INPUT_NAMESPACES list; namespaces taken in file order")
        order = list(by_class)
    for cls_name in order:
        for path, stmt in by_class.get(cls_name, []):
            declared.setdefault(stmt.target.id, (path, stmt))  # type: ignore[union-attr]
    positional = _literal(_module_names(_parse(tree.path("srt/arg_groups/field_order.py"))).get(
        "POSITIONAL_FIELD_ORDER"), {}) if os.path.isfile(tree.path("srt/arg_groups/field_order.py")) else ()
    positional = list(positional) if isinstance(positional, (list, tuple)) else []
    ordered = [n for n in positional if n in declared] + [n for n in declared if n not in set(positional)]
    options: List[_Option] = []
    for field in ordered:
        path, stmt = declared[field]
        made = _field_kwargs(field, stmt.annotation, _field_default(stmt, tree, path), tree, path)
        if made is not None:
            options.append(_Option(made[0], made[1], "%s:%d" % (os.path.relpath(path, tree.root), stmt.lineno)))
    return options


def _field_default(stmt: ast.AnnAssign, tree: _Tree, path: str) -> Any:
    """A dataclass field's default as ``arg_utils._field_default`` gives it (``_MISSING``: none)."""
    if stmt.value is None:
        return _MISSING
    value = stmt.value
    if isinstance(value, ast.Call) and ast.unparse(value.func).endswith("field"):
        factory = next((k.value for k in value.keywords if k.arg == "default_factory"), None)
        plain = next((k.value for k in value.keywords if k.arg == "default"), None)
        return {"list": [], "dict": {}}.get(ast.unparse(factory), None) if factory is not None else \
            _literal(plain, tree.names(path))
    default = _literal(value, tree.names(path))
    return None if default is _MISSING else default  # computed: present, value unknown here


def _annotated_options(tree: _Tree, cls: ast.ClassDef, path: str) -> List[_Option]:
    """The options ``add_cli_args_from_dataclass(parser, ServerArgs)`` adds from ``ServerArgs``' own annotated
    fields, in declaration order (sglang 0.5.15.post1 srt/server_args.py, srt/arg_groups/arg_utils.py:181-330)."""
    options: List[_Option] = []
    rel = os.path.relpath(path, tree.root)
    for stmt in cls.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        made = _field_kwargs(stmt.target.id, stmt.annotation, _field_default(stmt, tree, path), tree, path)
        if made is not None:
            options.append(_Option(made[0], made[1], "%s:%d" % (rel, stmt.lineno)))
    return options


# ---------------------------------------------------------------- the parser


def build_parser(root: str, *, prog: str = PROG) -> Tuple[StaticParser, Dict[str, Any]]:
    """SGLang's parser for the tree at ``root`` (the ``sglang`` package directory) and what was read to build it:
    ``{"layout", "options", "notes", "source"}``. :raises OSError: the tree lacks srt/server_args.py."""
    tree = _Tree(root)
    layout = detect_layout(root)
    notes: List[str] = []
    server_args_path = tree.path("srt/server_args.py")
    module = _parse(server_args_path)
    cls = _class(module, "ServerArgs")
    func = _method(cls, "add_cli_args") if cls else None
    if cls is None or func is None:
        raise OSError("%s has no ServerArgs.add_cli_args" % server_args_path)
    options = _field_options(tree, notes) if layout == "fields" else \
        _annotated_options(tree, cls, server_args_path) if layout == "annotated" else []
    options += _add_argument_options(tree, server_args_path, func, _class_defaults(cls, tree.names(server_args_path)),
                                     notes)
    parser = StaticParser(prog=prog)
    for option in options:
        try:
            parser.add_argument(*option.names, **option.kwargs)
        except (argparse.ArgumentError, TypeError, ValueError) as exc:
            notes.append("%s: %s" % (option.origin, exc))
    source = {"add_argument": "srt/server_args.py ServerArgs.add_cli_args",
              "annotated": "srt/server_args.py ServerArgs fields (arg_utils.add_cli_args_from_dataclass) + "
                           "ServerArgs.add_cli_args",
              "fields": "srt/arg_groups/fields/*.py (arg_utils.add_cli_args_from_dataclass) + srt/server_args.py "
                        "add_cli_args"}[layout]
    return parser, {"layout": layout, "options": len(options), "notes": notes, "source": source}


def parse(parser: StaticParser, argv: List[str]) -> Tuple[Optional[argparse.Namespace], Optional[Dict[str, Any]]]:
    """``(namespace, None)``, or ``(None, {"message", "exit_code"})`` with argparse's own error line."""
    try:
        return parser.parse_args(argv), None
    except _Refused as exc:
        return None, {"message": exc.message, "exit_code": exc.code}


# ---------------------------------------------------------------- the start-up rules


def _find(path: str, pattern: str) -> Optional[int]:
    """The line (1-based) where ``pattern`` (a regex that may span lines) matches first in ``path``."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return None
    match = re.search(pattern, text)
    return text.count("\n", 0, match.start()) + 1 if match else None


# Each rule's anchor: the file (per layout) and a regex for the code it copies; the probe reports where the
# anchor matched, so a citation is read from the installed tree, never assumed.
ANCHORS: Dict[str, Dict[str, Tuple[str, str]]] = {
    "unknown_algorithm": {
        "add_argument": ("srt/speculative/spec_info.py", r'raise ValueError\(f"Unknown speculative algorithm name'),
        "annotated": ("srt/speculative/spec_info.py", r'raise ValueError\(f"Unknown speculative algorithm name'),
        "fields": ("srt/speculative/spec_info.py", r'raise ValueError\(f"Unknown speculative algorithm name'),
    },
    "topk_without_steps": {
        "add_argument": ("srt/server_args.py",
                         r"assert \(\s*\n\s*self\.speculative_eagle_topk is None\s*\n\s*and self\.speculative_num_dr"),
        "annotated": ("srt/arg_groups/speculative_hook.py", r"assert \(\s*\n\s*server_args\.speculative_eagle_topk "
                      r"is None\s*\n\s*and server_args\.speculative_num_draft"),
        "fields": ("srt/arg_groups/speculative_hook.py",
                   r"assert \(\s*\n\s*cfg\.speculative_eagle_topk is None\s*\n\s*and cfg\.speculative_num_draft"),
    },
    "draft_tokens_adjusted": {
        "add_argument": ("srt/server_args.py",
                         r"self\.speculative_eagle_topk == 1\s*\n\s*and self\.speculative_num_draft_tokens != "),
        "annotated": ("srt/arg_groups/speculative_hook.py", r"server_args\.speculative_eagle_topk == 1\s*\n\s*"
                      r"and server_args\.speculative_num_draft_tokens\s*\n?\s*!= "),
        "fields": ("srt/arg_groups/speculative_hook.py",
                   r"cfg\.speculative_eagle_topk == 1\s*\n\s*and cfg\.speculative_num_draft_tokens != "),
    },
    "steps_without_topk": {
        "add_argument": ("srt/server_args.py",
                         r"self\.speculative_eagle_topk > 1\s*\n\s*and self\.page_size > 1"),
        "annotated": ("srt/arg_groups/speculative_hook.py",
                      r"server_args\.speculative_eagle_topk > 1\s*\n\s*and view\.page_size > 1"),
        "fields": ("srt/arg_groups/speculative_hook.py", r"cfg\.speculative_eagle_topk > 1\s*\n\s*and view\.page_size > 1"),
    },
}

W_DRAFT_TOKENS = ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                  "speculative_eagle_topk == 1")
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "STANDALONE")


def where(root: str, layout: str, rule: str) -> str:
    """``file:line`` of a rule's code in this tree, or ``file:?`` when the code is no longer there."""
    relative, pattern = ANCHORS[rule][layout]
    line = _find(os.path.join(root, *relative.split("/")), pattern)
    return "%s:%s" % (relative, line if line is not None else "?")


def builtin_algorithms(root: str) -> List[str]:
    """The members of ``SpeculativeAlgorithm`` plus its reserved aliases (NEXTN), read from the tree."""
    info = os.path.join(root, "srt", "speculative", "spec_info.py")
    names: List[str] = []
    cls = _class(_parse(info), "SpeculativeAlgorithm") if os.path.isfile(info) else None
    for stmt in cls.body if cls else []:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and stmt.targets[0].id.isupper():
            names.append(stmt.targets[0].id)
    registry = os.path.join(root, "srt", "speculative", "spec_registry.py")
    if os.path.isfile(registry):
        aliases = _literal(_module_names(_parse(registry)).get("_RESERVED_ALIASES"), {})
        names += sorted(aliases) if isinstance(aliases, (list, set, frozenset, tuple)) else []
    return names


def check_rules(ns: argparse.Namespace, *, root: str, layout: str) -> Dict[str, Any]:
    """SGLang's speculative-decoding resolution for the rules that crash or silently adjust.

    Returns ``{"errors": [{"kind", "exception", "message", "where"}], "adjustments": [{"field", "requested",
    "effective", "message", "where"}], "notes": [...]}``. Only the rules below are applied; the rest of start-up
    (the model's config, memory, backends) is SGLang's to decide.
    """
    errors: List[Dict[str, Any]] = []
    adjustments: List[Dict[str, Any]] = []
    notes: List[str] = []
    algo = getattr(ns, "speculative_algorithm", None)
    if algo is None:
        return {"errors": errors, "adjustments": adjustments, "notes": notes}
    # sglang 0.5.12.post1 srt/server_args.py:3561 / 0.5.23 srt/arg_groups/speculative_hook.py:137:
    #   speculative_algorithm = speculative_algorithm.upper(); NEXTN then resolves to EAGLE
    #   (0.5.12.post1 server_args.py:344 `_resolve_speculative_algorithm_alias`, 0.5.23 spec_info.py:60)
    algo = str(algo).upper()
    known = builtin_algorithms(root)
    if algo == "NEXTN" and _find(os.path.join(root, "srt", "server_args.py"), r'speculative_algorithm == "NEXTN"'):
        known.append("NEXTN")  # 0.5.12.post1 maps it before from_string (server_args.py:344), 0.5.23 in from_string
    if algo not in known:
        # sglang 0.5.12.post1 srt/speculative/spec_info.py:54, 0.5.23 :65 (SpeculativeAlgorithm.from_string)
        errors.append({"kind": "unknown_algorithm", "exception": "ValueError",
                       "message": "Unknown speculative algorithm name: %s" % algo,
                       "where": where(root, layout, "unknown_algorithm"),
                       "detail": "built-in: %s (an algorithm registered by a plugin cannot be seen statically)"
                                 % ", ".join(known)})
        return {"errors": errors, "adjustments": adjustments, "notes": notes}
    algo = "EAGLE" if algo == "NEXTN" else algo
    if algo not in EAGLE_FAMILY:
        notes.append("%s: its start-up rules are not checked before the start" % algo)
        return {"errors": errors, "adjustments": adjustments, "notes": notes}
    if getattr(ns, "speculative_adaptive", False):
        notes.append("--speculative-adaptive chooses steps at start-up; the step rules are not checked")
        return {"errors": errors, "adjustments": adjustments, "notes": notes}
    steps = getattr(ns, "speculative_num_steps", None)
    topk = getattr(ns, "speculative_eagle_topk", None)
    draft = getattr(ns, "speculative_num_draft_tokens", None)
    if steps is None:
        if topk is not None or draft is not None:
            # sglang 0.5.12.post1 srt/server_args.py:3808 / 0.5.23 srt/arg_groups/speculative_hook.py:1160:
            #   if speculative_num_steps is None: assert (speculative_eagle_topk is None and
            #   speculative_num_draft_tokens is None)  -- a bare AssertionError, no message
            errors.append({"kind": "topk_without_steps", "exception": "AssertionError", "message": "",
                           "where": where(root, layout, "topk_without_steps"),
                           "detail": "--speculative-eagle-topk or --speculative-num-draft-tokens is set without "
                                     "--speculative-num-steps (set all three, or none)"})
        else:
            notes.append("steps, topk and draft tokens are unset: SGLang chooses them from the target's "
                         "architecture at start-up")
        return {"errors": errors, "adjustments": adjustments, "notes": notes}
    if topk == 1 and draft != steps + 1:
        # sglang 0.5.12.post1 srt/server_args.py:3828-3835 / 0.5.23 srt/arg_groups/speculative_hook.py:1255-1266
        adjustments.append({"field": "speculative_num_draft_tokens", "requested": draft, "effective": steps + 1,
                            "message": W_DRAFT_TOKENS, "where": where(root, layout, "draft_tokens_adjusted")})
    if topk is None:
        # sglang 0.5.12.post1 srt/server_args.py:3838 / 0.5.23 srt/arg_groups/speculative_hook.py:1274:
        #   if (speculative_eagle_topk > 1 and page_size > 1 ...) -- topk is still None here
        errors.append({"kind": "steps_without_topk", "exception": "TypeError",
                       "message": "'>' not supported between instances of 'NoneType' and 'int'",
                       "where": where(root, layout, "steps_without_topk"),
                       "detail": "--speculative-num-steps is set without --speculative-eagle-topk"})
    return {"errors": errors, "adjustments": adjustments, "notes": notes}
