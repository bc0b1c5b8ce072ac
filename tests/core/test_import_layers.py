"""The house reads top-down: no import cycle between orchestrator's modules, nor between its packages
(cli, engine, actions, playbook, servers, transport, ...), counting the imports that run when a module loads
(module level, outside ``if TYPE_CHECKING``). A function-level import is how a lower layer reaches up lazily
on purpose, so it does not count."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "orchestrator"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _load_time_imports(path: Path, known: dict[str, Path]) -> set[str]:
    out: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.ImportFrom) and inner.level == 0 and (inner.module or "").startswith("orchestrator"):
                module = inner.module or ""
                out.update(f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in inner.names)
            elif isinstance(inner, ast.Import):
                out.update(a.name for a in inner.names if a.name.startswith("orchestrator"))
    return {m for m in out if m in known}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _load_time_imports(path, known) - {name} for name, path in known.items()}


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_no_module_imports_itself_back() -> None:
    assert _cycles(_graph()) == []


def test_no_two_packages_import_each_other() -> None:
    packages: dict[str, set[str]] = {}
    for module, imports in _graph().items():
        packages.setdefault(_package(module), set()).update(
            _package(m) for m in imports if _package(m) != _package(module))
    assert _cycles(packages) == []


def test_the_checker_sees_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_cycle_even_through_function_level_imports() -> None:
    """Counting every import (a function-level one too, as import-linter does), nothing imports itself back: not in
    remote_probes (the probes and their libraries), not in orchestrator outside the lab. The lab's build, calibrate,
    models, shipped, inventory and vllm_lab still reach each other lazily (issue 29 leaves that to the lab's owners)."""
    from tests import realparts

    grimp = realparts.importorskip("grimp")
    graph = grimp.build_graph("orchestrator", "remote_probes", exclude_type_checking_imports=True, cache_dir=None)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    outside_lab = [c for c in _cycles(edges) if not all(m.startswith("orchestrator.lab.") for m in c)]
    assert outside_lab == []
