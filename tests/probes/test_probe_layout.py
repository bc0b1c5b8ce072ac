"""remote_probes/: runtime, probes and libraries apart (the lists in remote_probes/__init__.py, held to the files),
every one of them pushed, and one import style (remote_probes/__init__.py says which)."""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import remote_probes
from orchestrator.probes import PROBES, PUSH_PATTERN, TYPED_PER_CALL, probes_dir

ROOT = Path(__file__).resolve().parents[2]
DIR = probes_dir()
MODULES = {p.stem: p for p in DIR.glob("*.py") if p.stem != "__init__"}
ENTRY = re.compile(r"^if __name__ == .__main__.:\s*\n\s+run_probe\(", re.M)


def test_every_file_is_of_one_kind_and_the_kinds_are_what_they_say() -> None:
    kinds = [*remote_probes.RUNTIME, *remote_probes.PROBES, *remote_probes.LIBRARIES]
    assert sorted(kinds) == sorted(MODULES)  # each file in exactly one list, no list names a missing file
    assert set(remote_probes.RUNTIME) == {m for m in MODULES if m.startswith("_")}
    entries = {m for m, p in MODULES.items() if ENTRY.search(p.read_text())}
    assert set(remote_probes.PROBES) == entries == set(PROBES) | set(TYPED_PER_CALL)  # a probe runs and is typed


def test_the_push_carries_every_file_they_need() -> None:
    pushed = {p.name for p in DIR.iterdir() if p.is_file() and fnmatch.fnmatch(p.name, PUSH_PATTERN)}
    assert {f"{m}.py" for m in MODULES} | set(remote_probes.DATA) <= pushed
    assert all((DIR / name).is_file() for name in remote_probes.DATA)


def _sibling_imports(tree: ast.Module) -> list[tuple[ast.ImportFrom | ast.Import, list[ast.AST]]]:
    """Every import of a sibling module, with the chain of nodes it sits in (outermost first)."""
    found: list[tuple[ast.ImportFrom | ast.Import, list[ast.AST]]] = []

    def visit(node: ast.AST, chain: list[ast.AST]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ImportFrom) and (child.level or (child.module or "").split(".")[0] in MODULES):
                found.append((child, chain))
            elif isinstance(child, ast.Import) and any(a.name.split(".")[0] in MODULES for a in child.names):
                found.append((child, chain))
            visit(child, [*chain, child])

    visit(tree, [])
    return found


def _package_safe(node: ast.AST, chain: list[ast.AST]) -> bool:
    """In the one package-safe form: relative under ``if TYPE_CHECKING`` and in a ``try``, flat in its
    ``except ImportError``, the flat names the relative ones."""
    if not chain or not isinstance(chain[0], ast.If) or "TYPE_CHECKING" not in ast.unparse(chain[0].test):
        return False
    guard = chain[0]
    if isinstance(node, ast.ImportFrom) and node.level == 1 and node in guard.body:
        return True
    tries = [n for n in guard.orelse if isinstance(n, ast.Try)]
    if len(tries) != 1 or len(tries[0].handlers) != 1 or ast.unparse(tries[0].handlers[0].type or ast.Pass()) != "ImportError":
        return False
    relative = [ast.unparse(n).replace("from .", "from ") for n in tries[0].body]
    flat = [ast.unparse(n) for n in tries[0].handlers[0].body]
    return relative == flat and all(isinstance(n, ast.ImportFrom) and n.level == 1 for n in tries[0].body)


def _falls_back(node: ast.AST) -> bool:
    """A ``try`` that imports a sibling one way and, failing, another (not a missing torch said as a failure)."""
    return isinstance(node, ast.Try) and any(
        isinstance(n, (ast.Import, ast.ImportFrom)) for h in node.handlers for n in ast.walk(h)
        if isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").split(".")[0] in MODULES))


def _used_by_the_orchestrator() -> set[str]:
    """The remote_probes modules the orchestrator imports as ``remote_probes.NAME``, and what they import."""
    named = set()
    for path in (ROOT / "orchestrator").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("remote_probes."):
                named.add(node.module.split(".")[1])
    todo, seen = list(named), set()
    while todo:
        name = todo.pop()
        if name in seen or name not in MODULES:
            continue
        seen.add(name)
        for imp, _ in _sibling_imports(ast.parse(MODULES[name].read_text())):
            module = imp.module if isinstance(imp, ast.ImportFrom) else imp.names[0].name
            todo.append((module or "").split(".")[0])
    return seen


def test_one_import_style() -> None:
    """A sibling by its flat name; in a module the orchestrator imports as a package (and what that imports), only
    in the package-safe form. Never the flat-first fallback (it would load a sibling twice, under two names)."""
    package_side = _used_by_the_orchestrator()
    assert {"eagle3_draft", "eagle3_checkpoint", "target_capture", "interval_stats"} <= package_side  # it sees them
    wrong = []
    for name, path in sorted(MODULES.items()):
        for node, chain in _sibling_imports(ast.parse(path.read_text())):
            safe = _package_safe(node, chain)
            flat = isinstance(node, ast.Import) or node.level == 0
            if name in package_side and not safe:
                wrong.append(f"{name}.py:{node.lineno}: the orchestrator imports it as a package; write "
                             f"`{ast.unparse(node)}` in the package-safe form")
            elif not safe and not flat:
                wrong.append(f"{name}.py:{node.lineno}: a relative import outside the package-safe form")
            elif not safe and any(_falls_back(c) for c in chain):
                wrong.append(f"{name}.py:{node.lineno}: a fallback import outside the package-safe form")
    assert wrong == []


def test_the_style_check_sees_a_wrong_form() -> None:
    flat_first = ast.parse("try:\n    from _probe import run_probe\nexcept ImportError:\n    from ._probe import run_probe\n")
    found = _sibling_imports(flat_first)
    assert found and not any(_package_safe(n, c) for n, c in found) and all(any(map(_falls_back, c)) for n, c in found
                                                                            if n.level == 0)
    good = ast.parse("if TYPE_CHECKING:\n    from ._probe import run_probe\nelse:\n    try:\n"
                     "        from ._probe import run_probe\n    except ImportError:\n        from _probe import run_probe\n")
    assert all(_package_safe(n, c) for n, c in _sibling_imports(good))
