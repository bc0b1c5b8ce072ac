"""Probe: static checks of an EAGLE-3 draft checkpoint directory (standard library only, Python >= 3.9).

Reads config.json and the safetensors JSON headers (8-byte little-endian length + JSON), sharded or not, and the
small integer tensors d2t/t2d straight from the file. Nothing is imported from torch or safetensors.

Args: ``{"path": draft_dir, "target_path"?: dir with the target's config.json, "target_num_layers"?: int,
"target_hidden_size"?: int, "target_vocab_size"?: int, "engine_sys_path"?: [dirs holding the sglang package],
"vllm_sys_path"?: [dirs holding the vllm package], "vllm_runner"?: "v1" | "v2", "engine"?: "sglang" | "vllm",
"method"?: "eagle3" | "eagle"}``. With ``engine: vllm`` (a vLLM host) the architecture check reads the installed
vLLM's model registry (engine_registry.scan_vllm: ``model_executor/models/registry.py`` and the draft rename rule
of ``transformers_utils/configs/eagle.py``, by ast, never imported) instead of looking for an SGLang. ``feeds.vllm`` follows the
installed vLLM's own rules (vllm_capture.py; ``"vllm"`` in the result says which version and runner), else the newest
vLLM read (0.33.0, Model Runner V2).
(explicit numbers win over target_path). The installed SGLang (found like ``sglang_source`` does, or under
``engine_sys_path``) is scanned, never imported, for its model registry: whether a loader exists for the draft's
architecture and which variant flags that loader reads (engine_registry.py). ``"engine"`` in the result says which
SGLang was scanned (null when none was found: the architecture check then goes by the class name).
Result: ``{"path", "config": {subset}, "target": {...}, "weights": {...}, "naming": {...},
"tensors": {name: {"dtype", "shape"}}, "feeds": {"sglang": [HF indices] | null, "vllm": ... | null},
"findings": [{"id", "severity": "info"|"warning"|"error", "message", "details"}]}``.
The checks themselves live in ``draft_findings.py``.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from array import array
from typing import Any

from remote_probes.agent.protocol import ProbeFailure, run_probe
from remote_probes.checks.findings import analyse
from remote_probes.checks.tensor_values import scan
from remote_probes.draft_reading.engine_limits import limits_reading
from remote_probes.draft_reading.field_findings import field_findings
from remote_probes.draft_reading.field_table import engine_reading
from remote_probes.draft_reading.tensor_placement import as_trained, loader_reading, place
from remote_probes.eagle3.config import flat_config, rope_config
from remote_probes.engine.registry import (
    config_reads,
    loader_flags,
    scan_sglang,
    scan_vllm,
    vllm_draft_architecture,
)
from remote_probes.engine.target_capture import resolve as resolve_target_class
from remote_probes.engine.target_capture import target_loop
from remote_probes.engine.vllm_capture import capture_rules, find_vllm_root

CONFIG_KEYS = ("architectures", "model_type", "hidden_size", "target_hidden_size", "intermediate_size",
               "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
               "draft_vocab_size", "tie_word_embeddings", "rope_theta", "rope_scaling", "max_position_embeddings",
               "rms_norm_eps", "torch_dtype", "eagle_config", "eagle_aux_hidden_state_layer_ids",
               "num_aux_hidden_states", "norm_before_residual", "norm_before_fc", "fc_norm", "norm_output",
               "use_aux_norm", "rope_parameters", "speculators_model_type")
_INT_CODES = {"I64": ("q", 8), "I32": ("i", 4), "I16": ("h", 2), "I8": ("b", 1), "U8": ("B", 1), "BOOL": ("B", 1)}
_MAX_HEADER = 100 * 1024 * 1024
_MAX_SMALL_TENSOR = 64 * 1024 * 1024


def read_json(path: str, what: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise ProbeFailure("unreadable", f"cannot read {what} {path}: {exc}", path=path) from None
    except ValueError as exc:
        raise ProbeFailure("bad_config", f"{what} {path} is not valid JSON: {exc}", path=path) from None
    if not isinstance(data, dict):
        raise ProbeFailure("bad_config", f"{what} {path} is not a JSON object", path=path)
    return data


def read_header(path: str) -> tuple[dict[str, Any], int]:
    """(tensor table, byte offset where tensor data starts) of one .safetensors file."""
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise ProbeFailure("bad_weights", f"{path} is too short to be a safetensors file", path=path)
        (size,) = struct.unpack("<Q", head)
        if size > _MAX_HEADER:
            raise ProbeFailure("bad_weights", f"{path} declares a {size}-byte header: not a safetensors file",
                               path=path)
        raw = handle.read(size)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProbeFailure("bad_weights", f"{path} has an unreadable safetensors header: {exc}", path=path) from None
    header.pop("__metadata__", None)
    return header, 8 + size


def read_ints(meta: dict[str, Any]) -> list[int] | None:
    """Values of a small integer/bool tensor, read with ``array`` (safetensors stores little-endian)."""
    code = _INT_CODES.get(meta.get("dtype", ""))
    if code is None:
        return None
    begin, end = meta["data_offsets"]
    if end - begin > _MAX_SMALL_TENSOR:
        return None
    with open(meta["file"], "rb") as handle:
        handle.seek(meta["data_start"] + begin)
        raw = handle.read(end - begin)
    values = array(code[0])
    if values.itemsize != code[1]:
        return None  # an exotic platform whose C types differ; skip rather than misread
    values.frombytes(raw[:len(raw) - len(raw) % code[1]])
    if sys.byteorder == "big":
        values.byteswap()
    return values.tolist()


def weight_table(path: str) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """All tensors (name -> dtype, shape, file, offsets) and a description of the weight files found."""
    names = sorted(os.listdir(path))
    info: dict[str, Any] = {"format": None, "files": [], "sharded": False,
                            "pytorch_bin": [n for n in names if n.endswith((".bin", ".pt", ".pth"))]}
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index):
        weight_map = read_json(index, "safetensors index").get("weight_map") or {}
        files = sorted(set(weight_map.values()))
        info.update(sharded=True, index_entries=len(weight_map))
    else:
        files = [n for n in names if n.endswith(".safetensors")]
    tensors: dict[str, dict[str, Any]] = {}
    missing = []
    for name in files:
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            missing.append(name)
            continue
        header, data_start = read_header(file)
        for tname, meta in header.items():
            tensors[tname] = {"dtype": meta.get("dtype"), "shape": list(meta.get("shape") or []), "file": file,
                              "data_start": data_start, "data_offsets": meta.get("data_offsets") or [0, 0]}
    if files:
        info["format"] = "safetensors"
    elif info["pytorch_bin"]:
        info["format"] = "pytorch_bin"
    info.update(files=files, missing_shards=missing)
    return tensors, info


def target_info(args: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"num_layers": None, "hidden_size": None, "vocab_size": None, "rope_theta": None,
                           "source": {}}
    if args.get("target_path"):
        cfg_path = os.path.join(os.path.expanduser(str(args["target_path"])), "config.json")
        cfg = flat_config(read_json(cfg_path, "target config"))  # multimodal targets nest text_config
        for key, cfg_key in (("num_layers", "num_hidden_layers"), ("hidden_size", "hidden_size"),
                             ("vocab_size", "vocab_size")):
            if isinstance(cfg.get(cfg_key), (int, float)):
                out[key] = cfg[cfg_key]
                out["source"][key] = "target_path"
        for key in ("max_position_embeddings", "torch_dtype", "tie_word_embeddings", "num_attention_heads"):
            if cfg.get(key) is not None:  # transformers 5 writes "dtype" where 4.x wrote "torch_dtype"
                out[key] = cfg[key]
        if cfg.get("torch_dtype") is None and isinstance(cfg.get("dtype"), str):
            out["torch_dtype"] = cfg["dtype"]
        theta, _, theta_source = rope_config(cfg)  # transformers 5: rope_parameters.rope_theta
        if theta is not None:
            out["rope_theta"], out["rope_theta_source"] = theta, theta_source
            out["source"]["rope_theta"] = "target_path"
    for key in ("num_layers", "hidden_size", "vocab_size"):
        value = args.get("target_" + key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ProbeFailure("bad_args", f"'target_{key}' must be a positive integer, got {value!r}")
            out[key] = value
            out["source"][key] = "args"
    return out


def main(args: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(args.get("path"), str) or not args["path"]:
        raise ProbeFailure("bad_args", "'path' (the draft checkpoint directory) is required")
    path = os.path.abspath(os.path.expanduser(args["path"]))
    if not os.path.isdir(path):
        raise ProbeFailure("not_found", f"draft path {path} is not a directory", path=path)
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        raise ProbeFailure("not_found", f"draft directory {path} has no config.json", path=path)
    raw = read_json(cfg_path, "draft config")
    target = target_info(args)
    tensors, weights = weight_table(path)
    archs = raw.get("architectures") if isinstance(raw.get("architectures"), list) else []
    arch = archs[0] if archs and isinstance(archs[0], str) else None
    if args.get("engine") not in (None, "sglang", "vllm"):
        raise ProbeFailure("bad_args", f"'engine' must be sglang or vllm, got {args.get('engine')!r}")
    if args.get("engine") == "vllm":
        engine = vllm_registry(args, arch)
        module = engine["architectures"].get(engine["looked_up"]) if engine and arch else None
        reads_nested = None  # SGLang's nested-config question; vLLM's loader is read by loader_flags
    else:
        engine = engine_scan(args)
        module = engine["architectures"].get(arch) if engine and arch else None
        reads_nested = (config_reads(engine["root"], "transformer_layer_config", module)
                        if engine and isinstance(raw.get("transformer_layer_config"), dict) else None)
    flags = loader_flags(engine["root"], module) if engine and module and engine.get("root") else None
    vllm = vllm_scan(args)
    target["class"] = target_class(args, engine)
    # the checks below judge the tensors under the names the engine's loader places (a naming fault is said once,
    # by the field reading's tensor.names finding)
    root = engine.get("root") if engine and not engine.get("missing") else None
    loader = loader_reading(root, "vllm" if args.get("engine") == "vllm" else "sglang") if root else None
    checked = as_trained(tensors, place(list(tensors), loader) if loader else None)
    small = {name: read_ints(meta) for name, meta in checked.items() if name.split(".")[-1] in ("d2t", "t2d")}
    feeds, naming, findings = analyse(raw, checked, small, weights, target, engine, flags, reads_nested, vllm)
    findings += fields_as_read(raw, tensors, args, engine)
    config = {k: raw[k] for k in CONFIG_KEYS if k in raw}
    if isinstance(raw.get("transformer_layer_config"), dict):  # speculators format nests the Llama config
        config["transformer_layer_config"] = {k: v for k, v in raw["transformer_layer_config"].items()
                                              if k in CONFIG_KEYS}
    return {"path": path, "config": config, "target": target, "weights": weights, "naming": naming,
            "tensors": {name: {"dtype": m["dtype"], "shape": m["shape"]} for name, m in sorted(tensors.items())},
            "feeds": feeds, "findings": findings,
            "vllm": None if vllm is None else {k: vllm.get(k) for k in ("version", "root", "runner",
                                                                       "runner_why", "runners", "capture",
                                                                       "lm_head_missing")},
            "engine": None if engine is None else {"engine": engine["engine"], "version": engine["version"],
                                                   "root": engine["root"], "loader_module": module,
                                                   "loader_flags": flags,
                                                   "architectures": len(engine["architectures"]),
                                                   "unresolved_modules": engine["unresolved"]}}


def fields_as_read(raw: dict[str, Any], tensors: dict[str, Any], args: dict[str, Any],
                   engine: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The draft's config field by field as the installed engine's EAGLE-3 class reads it (draft_reading/)."""
    name = "vllm" if args.get("engine") == "vllm" else "sglang"
    root = engine.get("root") if engine and not engine.get("missing") else None
    reading = engine_reading(root, name, engine.get("version") if engine else None)
    reading["loader"] = loader_reading(root, name) if root else None
    reading["limits"] = limits_reading(root, name) if root else None
    target = None
    if args.get("target_path"):
        try:
            target = flat_config(read_json(os.path.join(os.path.expanduser(str(args["target_path"])), "config.json"),
                                           "target config"))
        except ProbeFailure:
            target = None  # target_info already said why
    return field_findings(flat_config(raw), tensors, target, reading, values=scan(tensors))


def engine_scan(args: dict[str, Any]) -> dict[str, Any] | None:
    extra = args.get("engine_sys_path")
    if extra is not None and (not isinstance(extra, list) or not all(isinstance(p, str) for p in extra)):
        raise ProbeFailure("bad_args", "'engine_sys_path' must be a list of directories")
    return scan_sglang(extra or None)


def target_class(args: dict[str, Any], engine: dict[str, Any] | None) -> dict[str, Any] | None:
    """Which class of the host's engine runs the target and its default capture (target_capture.py), when the
    target's config and an installed engine are both here: the feeds prediction then uses that class's own rule."""
    if not args.get("target_path") or engine is None or not engine.get("root"):
        return None
    try:
        config = read_json(os.path.join(os.path.expanduser(str(args["target_path"])), "config.json"), "target config")
    except ProbeFailure:
        return None  # target_info already reported a missing or broken target config
    result = resolve_target_class(config, "vllm" if engine.get("engine") == "vllm" else "sglang", engine["root"])
    keys = ("engine", "found", "followed", "default_ids", "num_layers", "num_layers_source", "why")
    return dict({k: result.get(k) for k in keys}, where=(result.get("capture") or {}).get("where"))


def vllm_registry(args: dict[str, Any], arch: str | None) -> dict[str, Any] | None:
    """On a vLLM host (``engine: vllm``): the installed vLLM's model registry (engine_registry.scan_vllm), with the
    name it looks the draft up by for ``method`` (default eagle3). None when no vLLM is found."""
    extra = args.get("vllm_sys_path")
    if extra is not None and (not isinstance(extra, list) or not all(isinstance(p, str) for p in extra)):
        raise ProbeFailure("bad_args", "'vllm_sys_path' must be a list of directories")
    method = args.get("method") or "eagle3"
    if method not in ("eagle3", "eagle"):
        raise ProbeFailure("bad_args", f"'method' must be eagle3 or eagle, got {method!r}")
    root = find_vllm_root(extra or None)
    registry = scan_vllm(root) if root else None
    if registry is None:  # said as such by the architecture finding, never judged by SGLang's classes
        return {"engine": "vllm", "version": None, "root": root, "architectures": {}, "speculative": [],
                "rename": {}, "unresolved": [], "method": method, "looked_up": arch, "missing": True}
    return {**registry, "method": method, "looked_up": vllm_draft_architecture(arch, method, registry) if arch
            else None}


def vllm_scan(args: dict[str, Any]) -> dict[str, Any] | None:
    """The installed vLLM's feeding rules (vllm_capture.py), or None (feeds.vllm then follows the newest read)."""
    extra = args.get("vllm_sys_path")
    if extra is not None and (not isinstance(extra, list) or not all(isinstance(p, str) for p in extra)):
        raise ProbeFailure("bad_args", "'vllm_sys_path' must be a list of directories")
    runner = args.get("vllm_runner")
    if runner not in (None, "v1", "v2"):
        raise ProbeFailure("bad_args", f"'vllm_runner' must be v1 or v2, got {runner!r}")
    root = find_vllm_root(extra or None)
    return capture_rules(root, runner, target_loop(args.get("target_path"), "vllm", root)) if root else None


if __name__ == "__main__":
    run_probe(main)
