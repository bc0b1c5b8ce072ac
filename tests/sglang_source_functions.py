"""SGLang's own Python functions, taken from an installed source tree and run here without importing SGLang.

The tree-drafting helpers (srt/speculative/spec_utils.py, eagle_utils.py, srt/utils/common.py's ``fast_topk``) are
plain torch, but their modules import CUDA kernels and Triton at the top. ``functions`` reads the file with ``ast``,
keeps the named top-level functions without their decorators (``torch.compile``), and executes them in a namespace
that holds torch, typing and whatever else the caller passes (another function they call). The code is SGLang's
own, byte for byte, from the version under test; nothing is copied into this repository.
"""

from __future__ import annotations

import ast
import typing
from pathlib import Path
from typing import Any

import torch


def functions(tree: Path, relpath: str, names: tuple[str, ...], **extra: Any) -> dict[str, Any]:
    """``names`` defined at the top level of ``tree/sglang/<relpath>``, as callables (KeyError naming a missing one)."""
    source = (tree / "sglang" / relpath).read_text()
    module = ast.parse(source)
    keep = []
    for node in module.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            node.decorator_list = []
            keep.append(node)
    found = {node.name for node in keep}
    missing = [n for n in names if n not in found]
    if missing:
        raise KeyError(f"{relpath} of {tree} defines no {', '.join(missing)}")
    namespace: dict[str, Any] = {"torch": torch, **{k: getattr(typing, k) for k in typing.__all__}, **extra}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(tree / "sglang" / relpath), "exec"), namespace)
    return {n: namespace[n] for n in names}
