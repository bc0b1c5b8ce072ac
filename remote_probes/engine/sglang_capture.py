"""Which target hidden states an installed SGLang CAN capture for an EAGLE-3 draft, read from its source.

Standard library only, Python >= 3.9; sglang is never imported. A wiring is a list of HF ``hidden_states`` indices
(see eagle3_wiring.py): 0 = embedding output, i = output of decoder layer i-1, N = after the final norm.

SGLang captures aux hidden states inside the decoder-layer loop of the target's model (``LlamaModel.forward`` in
srt/models/llama.py for a Llama target; the loop of the target's own class where target_capture.py finds it, e.g.
``Qwen2Model.forward`` in qwen2.py for Qwen3 on 0.5.12.post1), at the ENTRY of layer ``id + 1`` for each nested
``eagle_config`` id, so:

- index i in 1..N-1 is always capturable (eagle_config id i - 1);
- index N (after the final norm) never is: the loop ends before it, so the draft receives fewer states than its
  fc was trained on and its first forward fails on the fc's shape;
- index 0 (the embedding output, eagle_config id -1) depends on the version:
  - 0.5.12.post1 appends ``hidden_states + residual`` at the layer's entry, and ``residual`` is None before
    layer 0 (srt/models/llama.py:384, :395): the first forward raises TypeError; its ``Qwen2Model.forward`` (Qwen2,
    Qwen3) appends ``hidden_states`` alone while ``residual`` is None (qwen2.py:362-365): capturable;
  - 0.5.23 passes ``capture_output`` to the layer, whose boundary captures the embedding itself while no
    residual exists yet (srt/models/llama.py:491, srt/layers/layer_boundary/stage.py:421-434).

The rule is read from the installed tree each time (not from a version table), so a version this module has
never seen is judged by its own code, and "unknown" is said when the code matches neither shape.

Public API: ``find_sglang_root(sys_path=None) -> str | None``,
``capture_rules(root, loop=None) -> {"embedding": bool | None, "final_norm": False, "why", "evidence": [{file, line, text}]}``,
``servable_ids(wiring, n_layers, rules) -> (ids | None, [blocker sentences])``.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
from typing import Any, Dict, List, Optional, Tuple

from remote_probes.engine.thread_safe_ast import parse as parse_python

LLAMA = os.path.join("srt", "models", "llama.py")
STAGE = os.path.join("srt", "layers", "layer_boundary", "stage.py")


def find_sglang_root(sys_path: Optional[List[str]] = None) -> Optional[str]:
    """The installed ``sglang`` package directory (found without importing it), or None."""
    try:
        if sys_path:
            spec = importlib.machinery.PathFinder.find_spec("sglang", [os.path.expanduser(p) for p in sys_path])
        else:
            spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.realpath(list(spec.submodule_search_locations)[0])


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return None


def _method(tree: ast.AST, cls: str, name: str) -> Optional[ast.FunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    return None


def _line(lines: List[str], lineno: int) -> str:
    return lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""


def capture_rules(root: str, loop: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """What this tree's target can capture (see the module doc); ``embedding`` None = cannot tell.

    ``loop``: where the target's class runs its layer loop (target_capture's ``capture_loop``: ``file`` under the
    sglang package, ``defined_in`` the class whose ``forward`` it is); without it, Llama's (``LlamaModel.forward`` in
    srt/models/llama.py). The rule is the class's own: SGLang 0.5.12.post1's ``Qwen2Model.forward`` (which Qwen3
    inherits) appends ``hidden_states`` alone while ``residual`` is None, so its embedding output IS capturable."""
    rel = str(loop["file"]).replace("/", os.sep) if loop and loop.get("file") else LLAMA
    owner = str(loop.get("defined_in") or "") if loop else "LlamaModel"
    out: Dict[str, Any] = {"embedding": None, "final_norm": False, "evidence": [],
                           "why": "", "root": root, "loop": "%s.forward (%s)" % (owner, rel.replace(os.sep, "/"))}
    text = _read(os.path.join(root, rel))
    if text is None:
        out["why"] = "no %s in %s: the capture rule cannot be read" % (rel, root)
        return out
    lines = text.splitlines()
    try:
        tree = parse_python(text)
    except SyntaxError as exc:
        out["why"] = "%s does not parse (%s)" % (rel, exc)
        return out
    forward = _method(tree, owner, "forward")
    if forward is None:
        out["why"] = "no %s.forward in %s" % (owner, rel)
        return out
    residual_none = None
    appends_sum = None
    appends_guarded = None  # hidden_states + residual if residual is not None else hidden_states
    passes_capture = None
    for node in ast.walk(forward):
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "residual" for t in node.targets)
                and isinstance(node.value, ast.Constant) and node.value.value is None):
            residual_none = residual_none or node
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "aux_hidden_states"
                and node.args and isinstance(node.args[0], ast.BinOp) and isinstance(node.args[0].op, ast.Add)):
            names = {n.id for n in ast.walk(node.args[0]) if isinstance(n, ast.Name)}
            if "residual" in names:
                appends_sum = appends_sum or node
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "aux_hidden_states"
                and node.args and isinstance(node.args[0], ast.IfExp) and "residual" in ast.dump(node.args[0].test)):
            appends_guarded = appends_guarded or node
        if isinstance(node, ast.Call):
            keyword = next((k for k in node.keywords if k.arg == "capture_output"), None)
            passes_capture = passes_capture or keyword  # its own line: "capture_output=aux_hidden_states..."
    if appends_sum is not None and residual_none is not None:
        out["embedding"] = False
        out["evidence"] = [{"file": rel, "line": residual_none.lineno, "text": _line(lines, residual_none.lineno)},
                           {"file": rel, "line": appends_sum.lineno, "text": _line(lines, appends_sum.lineno)}]
        out["why"] = ("captures hidden_states + residual at a layer's entry and residual is None before layer 0, "
                      "so the embedding output cannot be captured (TypeError on the first forward)")
        return out
    if appends_guarded is not None:
        line = appends_guarded.lineno
        out["embedding"] = True
        out["evidence"] = [{"file": rel, "line": j, "text": _line(lines, j)}
                           for j in range(line, getattr(appends_guarded, "end_lineno", line) + 1)]
        out["why"] = ("captures hidden_states alone while residual is None (before layer 0), so the embedding output "
                      "can be captured (eagle_config id -1)")
        return out
    if passes_capture is not None:
        line = getattr(passes_capture, "lineno", forward.lineno)  # keywords carry a line from Python 3.9 on
        evidence = [{"file": rel, "line": line, "text": _line(lines, line)}]
        stage = _read(os.path.join(root, STAGE))
        hit = None
        if stage is not None:
            stage_lines = stage.splitlines()
            # the capture decision: "capture_before_read = capture is not None and ((stream.residual is None ..."
            starts = [i for i, s in enumerate(stage_lines) if "capture_before_read" in s and "=" in s]
            hit = next((j + 1 for i in starts for j in range(i, min(i + 4, len(stage_lines)))
                        if "stream.residual is None" in stage_lines[j]), None)
            if hit is not None:
                evidence.append({"file": STAGE, "line": hit, "text": _line(stage_lines, hit)})
        if hit is not None:
            out["embedding"] = True
            out["why"] = ("captures through the layer boundary (capture_output), which takes the embedding itself "
                          "while no residual exists yet, so the embedding output can be captured (eagle_config id -1)")
        else:
            out["why"] = ("captures through the layer boundary (capture_output), but %s does not show how a capture "
                          "before the first residual behaves" % STAGE)
        out["evidence"] = evidence
        return out
    out["why"] = "%s.forward captures aux hidden states in a way this check does not recognise" % owner
    return out


def servable_ids(wiring: List[int], n_layers: int, rules: Dict[str, Any]) -> Tuple[Optional[List[int]], List[str]]:
    """The nested ``eagle_config`` ids that make this SGLang feed ``wiring`` (HF indices), or None with the reasons
    it cannot be fed by config."""
    blockers: List[str] = []
    for i in wiring:
        if i == n_layers:
            blockers.append("hidden_states[%d] is the target's output after the final norm; SGLang captures only "
                            "at a decoder layer's entry (ids 0..%d), never after the norm" % (i, n_layers - 2))
        elif i < 0 or i > n_layers:
            blockers.append("hidden_states[%d] does not exist in a %d-layer target" % (i, n_layers))
        elif i == 0 and rules.get("embedding") is not True:
            blockers.append("hidden_states[0] is the embedding output: this SGLang %s"
                            % (rules.get("why") or "cannot be shown to capture it"))
    if len(set(wiring)) != len(wiring):
        blockers.append("wiring %s repeats a layer; SGLang captures each layer once" % (wiring,))
    if blockers:
        return None, blockers
    return [i - 1 for i in wiring], []
