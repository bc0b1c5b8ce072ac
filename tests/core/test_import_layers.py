"""The house reads top-down: no import circle anywhere in ``orchestrator/`` or ``remote_probes/``, between modules
or between orchestrator's packages (cli, engine, actions, playbook, servers, transport, ...).

Every import counts, wherever it is written: at module level, inside a function or a class (a function-level import
is still a dependency, it only runs later), except under ``if TYPE_CHECKING:`` (types only, never loaded). The
graph is read from the source (ast), so it needs nothing installed, and it resolves the two ways an import names a
module here: ``orchestrator.x.y`` / ``remote_probes.x.y`` (absolute) and ``from . import x`` / ``from .x import y``
(relative). import-linter (pyproject.toml, run by tests/test_static_checks.py) checks the
direction of the package layers; this checks that nothing, at any granularity, comes back round.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("orchestrator", "remote_probes")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        parent = parents[node]
        if isinstance(parent, ast.If) and "TYPE_CHECKING" in ast.unparse(parent.test) and node in parent.body:
            return True
        node = parent
    return False


def _imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The known modules ``module`` imports, anywhere in its source (not under ``if TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()

    def resolve(name: str) -> str | None:
        candidate = name
        while candidate:
            if candidate in known:
                return candidate
            candidate = candidate.rpartition(".")[0]
        return None

    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or _type_checking_only(node, parents):
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from pkg import mod` imports the submodule pkg.mod; `from mod import name` imports mod
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        out.update(m for m in map(resolve, targets) if m)
    return out - {module}


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
    return {name: _imports(name, path, known) for name, path in known.items()}


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


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    """A function-level import, a relative one and an absolute one are edges; a TYPE_CHECKING one is not."""
    (tmp_path / "evaluation").mkdir()
    source = tmp_path / "evaluation" / "p.py"
    source.write_text("from typing import TYPE_CHECKING\nfrom remote_probes.agent.protocol import run_probe\n"
                      "if TYPE_CHECKING:\n    from remote_probes.eagle3 import config\n"
                      "def f():\n    from .interval_stats import mean_interval\n    import remote_probes.agent.env_info\n")
    known = {m: source for m in ("remote_probes.evaluation.p", "remote_probes.agent.protocol",
                                 "remote_probes.evaluation.interval_stats", "remote_probes.agent.env_info",
                                 "remote_probes.eagle3.config")}
    assert _imports("remote_probes.evaluation.p", source, known) == {
        "remote_probes.agent.protocol", "remote_probes.evaluation.interval_stats", "remote_probes.agent.env_info"}
    (tmp_path / "o.py").write_text("def g():\n    from orchestrator.lab.building import build\n")
    known = {"orchestrator.lab.o": tmp_path / "o.py", "orchestrator.lab.building.build": source,
             "orchestrator.lab.building": source}
    assert _imports("orchestrator.lab.o", tmp_path / "o.py", known) == {"orchestrator.lab.building.build"}
