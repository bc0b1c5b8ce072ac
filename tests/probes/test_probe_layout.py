"""remote_probes/ by role (remote_probes/__init__.py): every module in a role package, the probes where
agent/probes.py says, every file pushed, and one import style, the absolute package name, here and on the host."""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import remote_probes
from orchestrator.probes import PROBES, PUSH_PATTERN, TYPED_PER_CALL, probe_module, probes_dir
from orchestrator.transport.base import _tree_stamp
from remote_probes.agent import probes as remote

DIR = probes_dir()
MODULES = {".".join(p.relative_to(DIR).with_suffix("").parts): p for p in DIR.rglob("*.py")
           if p.name != "__init__.py"}
ENTRY = re.compile(r"^if __name__ == .__main__.:\s*\n\s+run_probe\(", re.M)


def test_every_module_lives_in_a_role_package() -> None:
    roles = {p.name for p in DIR.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert roles == set(remote_probes.ROLES)
    assert all((DIR / role / "__init__.py").is_file() for role in roles)
    assert all("." in name for name in MODULES), [n for n in MODULES if "." not in n]  # nothing loose at the top


def test_the_probes_are_where_the_registry_says_and_run_as_modules() -> None:
    entries = {name for name, path in MODULES.items() if ENTRY.search(path.read_text())}
    assert entries == {f"{role}.{name}" for name, role in remote.PROBES.items()}
    assert set(remote.PROBES) == set(PROBES) | set(TYPED_PER_CALL)  # a probe runs and is typed
    for name, role in remote.PROBES.items():
        assert probe_module(name) == f"remote_probes.{role}.{name}"
    assert probe_module("../x") is None and probe_module("_agent") is None and probe_module("nope") is None


def test_the_push_carries_every_file_they_need() -> None:
    pushed = {rel for rel, _, _ in _tree_stamp(DIR, PUSH_PATTERN)}
    wanted = {str(p.relative_to(DIR)) for p in DIR.rglob("*.py")} | set(remote.DATA)
    assert wanted <= pushed
    assert all(fnmatch.fnmatch(Path(rel).name, PUSH_PATTERN) for rel in pushed)
    assert not any("__pycache__" in rel for rel in pushed)


def _probe_imports(tree: ast.Module) -> list[ast.ImportFrom | ast.Import]:
    """Every import of a remote_probes module, or of what looks like one by a flat or relative name."""
    flat = {name.rsplit(".", 1)[-1] for name in MODULES} | {"_probe", "_agent"}
    found: list[ast.ImportFrom | ast.Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in
                                                 {"remote_probes", *flat}):
            found.append(node)
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] in {"remote_probes", *flat}
                                                  for a in node.names):
            found.append(node)
    return found


def _absolute(node: ast.ImportFrom | ast.Import) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and (node.module or "").startswith("remote_probes.")
    return all(a.name.startswith("remote_probes.") for a in node.names)


def test_one_import_style() -> None:
    """``from remote_probes.ROLE.MODULE import ...`` everywhere: no flat sibling name, no relative import, no
    fallback from one to the other (the host runs the package as it is here)."""
    wrong = []
    for name, path in sorted(MODULES.items()):
        for node in _probe_imports(ast.parse(path.read_text())):
            if not _absolute(node):
                wrong.append(f"{name}:{node.lineno}: `{ast.unparse(node)}`")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Try) and any(
                    isinstance(n, (ast.Import, ast.ImportFrom)) and n in _probe_imports(ast.Module(body=h.body, type_ignores=[]))
                    for h in node.handlers for n in ast.walk(h)):
                wrong.append(f"{name}:{node.lineno}: a fallback import")
    assert wrong == []


def test_the_style_check_sees_a_wrong_form() -> None:
    for text in ("from _probe import run_probe\n", "from .protocol import run_probe\n", "import interval_stats\n"):
        assert not all(map(_absolute, _probe_imports(ast.parse(text)))), text
    assert all(map(_absolute, _probe_imports(ast.parse("from remote_probes.agent.protocol import run_probe\n"))))
