"""No module outside the playbook runner's owners takes or holds the runner (issue 29).

The owners: the runner's own package (``orchestrator/runner/``: the runner, its command API ``control.Controller``
and the ad-hoc pokes) and the session composer that builds and runs it (``session/compose.py``,
``session/recording.py``). Everything else gets a narrow port: the services get ``emit`` and their own port
(``SlurmSessionPort``), the front ends a ``PreparedSession`` (``run()``) or a ``Controller`` and its ``view``.
Checked from the source (ast), so a duck-typed reach counts too: outside the owners no module names the runner's
class (an import, an annotation, a call) nor reaches for the controller's private ``_runner``. The import-linter
contract "Only the runner's owners import it" (pyproject.toml) checks the direct imports of its module.
"""

from __future__ import annotations

import ast
from pathlib import Path

from orchestrator.runner.control import Controller
from orchestrator.runner.playbook_runner import PlaybookRunner

ROOT = Path(__file__).resolve().parents[2]
OWNERS = ("orchestrator/runner/", "orchestrator/session/compose.py", "orchestrator/session/recording.py")
RUNNER = PlaybookRunner.__name__


def _annotations(tree: ast.AST) -> list[ast.AST]:
    """String annotations (``r: "PlaybookRunner"``), parsed: a reach hidden in quotes is still a reach."""
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        notes = [getattr(node, "annotation", None), getattr(node, "returns", None)]
        for note in notes:
            if isinstance(note, ast.Constant) and isinstance(note.value, str):
                try:
                    found.append(ast.parse(note.value, mode="eval"))
                except SyntaxError:
                    continue
    return found


def _reaches(source: str, where: str) -> list[str]:
    found = []
    tree = ast.parse(source)
    for node in [n for t in (tree, *_annotations(tree)) for n in ast.walk(t)]:
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Name) and node.id == RUNNER:
            found.append(f"{where}:{line}: names {RUNNER}")
        elif isinstance(node, ast.alias) and node.name.split(".")[-1] == RUNNER:
            found.append(f"{where}:{line}: imports {RUNNER}")
        elif isinstance(node, ast.Attribute) and node.attr in (RUNNER, "_runner"):
            found.append(f"{where}:{line}: reaches .{node.attr}")
    return found


def test_only_the_owners_take_the_runner() -> None:
    outside = [p for p in sorted((ROOT / "orchestrator").rglob("*.py"))
               if not p.relative_to(ROOT).as_posix().startswith(OWNERS)]
    assert outside and [r for p in outside for r in _reaches(p.read_text(), str(p.relative_to(ROOT)))] == []


def test_the_check_sees_a_reach() -> None:
    source = (f"from orchestrator.runner import {RUNNER}\n"
              f"def f(r: '{RUNNER}', c) -> None:\n    c._runner.cancel()\n    x: {RUNNER}\n")
    assert sorted(r.split(": ", 1)[1] for r in _reaches(source, "probe")) == sorted(
        [f"imports {RUNNER}", "reaches ._runner", f"names {RUNNER}", f"names {RUNNER}"])


def test_a_front_end_reads_the_session_through_the_view() -> None:
    assert not any(name == "engine" or name.startswith("engine_") for name in vars(Controller))
    assert {"view", "cancelled", "cancel"} <= set(vars(Controller))
