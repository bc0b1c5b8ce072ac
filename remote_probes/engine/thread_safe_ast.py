"""``ast.parse`` that no other parse can interleave with.

CPython 3.11 (3.11.7 here) counts the AST constructor's recursion in state the interpreter's threads share, and
checks the count when the tree is built. A second parse that starts while a first one is building its tree makes the
first fail with "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905 fixed another cause,
not this one). The second parse can come from another thread, which gets in when the collector runs a finalizer in
the middle of the first parse's allocations, or from that finalizer itself in the same thread. The agent runs probes
in threads and the lab trains its drafts in threads, and both parse source (CI failed on it once). So every parse in
orchestrator/ and remote_probes/ comes here: one at a time in the process, with the collector paused for the
parse, so no finalizer runs in the middle of one. Stdlib only (it runs on the engine's host).
"""
from __future__ import annotations

import ast
import gc
import threading

# One lock per process (reentrant: a finalizer that runs as the collector resumes, with the lock still held, may
# parse), kept on the ast module: this file may be loaded twice in one process,
# as remote_probes.thread_safe_ast and as the flat sibling thread_safe_ast, and two locks would guard nothing.
_PARSE_LOCK = ast.__dict__.setdefault("_orchestrator_parse_lock", threading.RLock())


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``, alone in the process."""
    tree = _parse(source, filename, "exec")
    assert isinstance(tree, ast.Module)
    return tree


def literal_eval(text: str) -> object:
    """``ast.literal_eval(text)``, its parse alone in the process (the evaluation of the tree parses nothing)."""
    return ast.literal_eval(_parse(text.lstrip(" \t"), "<unknown>", "eval"))


def _parse(source: str, filename: str, mode: str) -> ast.AST:
    with _PARSE_LOCK:
        collecting = gc.isenabled()
        gc.disable()  # under the lock: no other parse turns it back on in the middle of this one
        try:
            return ast.parse(source, filename=filename, mode=mode)
        finally:
            if collecting:
                gc.enable()  # the parse is over: what the collector finalizes now may parse
