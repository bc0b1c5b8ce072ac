"""remote_probes/engine/thread_safe_ast.py: a parse nothing can interleave with. CPython 3.11's AST constructor counts its
recursion in state shared by the threads, and a second parse that starts while the first builds its tree (from
another thread, or from a finalizer the collector runs mid-parse) fails the first. The agent runs probes in threads
and the lab trains its two Qwen3 drafts in threads; CI once failed there ("AST constructor recursion depth mismatch
(before=36, after=31)")."""

from __future__ import annotations

import ast
import gc
import importlib.util
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from remote_probes.engine import thread_safe_ast

ROOT = Path(__file__).resolve().parents[2]
SOURCE = (ROOT / "remote_probes" / "engine" / "sglang_argparse.py").read_text()  # big enough to allocate past a collection


_RAW_PARSE = ast.parse  # the second parse calls it unwatched


class _MidParse:
    """Cyclic garbage: its finalizer runs when the collector next runs, which is during the parse's allocations
    unless something stops the collector."""

    def __init__(self, action: Callable[[], None], during: list[bool], parsing: list[bool]) -> None:
        self.me = self
        self.action, self.during, self.parsing = action, during, parsing

    def __del__(self) -> None:
        self.during.append(bool(self.parsing))
        self.action()


def _parse_with(parse: Callable[[str], ast.Module], second: Callable[[], None],
                monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Parse SOURCE with a second parse waiting in a finalizer; for each time the finalizer ran, whether the first
    parse was still going on."""
    parsing: list[bool] = []
    during: list[bool] = []

    def watched(*args: Any, **kwargs: Any) -> Any:
        parsing.append(True)
        try:
            return _RAW_PARSE(*args, **kwargs)
        finally:
            parsing.pop()

    gc.collect()
    monkeypatch.setattr(ast, "parse", watched)
    _MidParse(second, during, parsing)
    try:
        tree = parse(SOURCE)
    finally:
        gc.collect()  # the finalizer has run by now
        monkeypatch.undo()
    assert ast.dump(tree) == ast.dump(ast.parse(SOURCE))
    return during


def _another_thread_parses() -> None:
    thread = threading.Thread(target=lambda: _RAW_PARSE("x = [1, (2, 3)]"))
    thread.start()
    thread.join()


def _this_thread_parses() -> None:
    _RAW_PARSE("y = 1")


@pytest.mark.parametrize("second", [_another_thread_parses, _this_thread_parses], ids=["other-thread", "finalizer"])
def test_a_parse_starting_in_the_middle_of_another_is_the_fault_guarded(second: Callable[[], None],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        during = _parse_with(ast.parse, second, monkeypatch)
    except SystemError as exc:
        assert "recursion depth mismatch" in str(exc)
    else:
        assert during == [True]  # the interleaving happened, and this Python's constructor survives it


@pytest.mark.parametrize("second", [_another_thread_parses, _this_thread_parses], ids=["other-thread", "finalizer"])
def test_through_the_guard_the_same_interleaving_cannot_happen(second: Callable[[], None],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    assert _parse_with(thread_safe_ast.parse, second, monkeypatch) == [False]  # it waited for the parse to end
    assert gc.isenabled()


def test_a_literal_goes_through_the_guard_too() -> None:
    assert thread_safe_ast.literal_eval("[1, (2, 'a')]") == [1, (2, "a")]
    with pytest.raises(ValueError):
        thread_safe_ast.literal_eval("torch.bfloat16")
    assert gc.isenabled()


def test_the_lock_is_one_per_process_whichever_way_the_module_was_loaded() -> None:
    spec = importlib.util.spec_from_file_location("thread_safe_ast", ROOT / "remote_probes" / "engine" / "thread_safe_ast.py")
    assert spec and spec.loader
    flat = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(flat)  # the remote host's way: a sibling script, a second module object
    assert flat._PARSE_LOCK is thread_safe_ast._PARSE_LOCK


def _direct_parses(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "ast"):
            of_a_node = node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == "node"
            if node.func.attr == "parse" or (node.func.attr == "literal_eval" and not of_a_node):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: ast.{node.func.attr}")
    return found


def test_every_parse_of_source_in_the_product_goes_through_the_guard() -> None:
    files = [*sorted((ROOT / "orchestrator").rglob("*.py")), *sorted((ROOT / "remote_probes").rglob("*.py"))]
    guard = ROOT / "remote_probes" / "engine" / "thread_safe_ast.py"
    assert [hit for f in files if f != guard for hit in _direct_parses(f)] == []
