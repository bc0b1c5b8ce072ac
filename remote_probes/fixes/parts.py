"""The fix for a served part the counterfactual draft test named (draft_counterfactual.py), for draft_fix.py.

Standard library only. Parts the engine reads from the draft's CONFIG are corrected in the corrected config beside
the draft (both engines build the draft's decoder layer from its own config): ``rope`` takes the target's RoPE keys,
``attention`` the target's head count, kv heads and head_dim, ``field.<name>`` the target's value of that field. A part the engine takes from the CHECKPOINT is mended
where the engine's rule allows it: an ``embedding`` vLLM keeps because the checkpoint ships a distinct one is
dropped from a filtered copy of the weights (vLLM then shares the target's; llm_base_proposer.py
_maybe_share_embeddings). The rest are blockers with what remains: SGLang always replaces the draft's embedding with
the target's (llama.py set_embed), a head, a final norm or a d2t map is re-exported from training.

Public API: ``part_fixes(parts, config, target_config, engine, name) -> dict`` and
``write_without(src_dir, dest_dir, drop, replace) -> list[str]`` (safetensors files rewritten without the dropped
tensors, with the replaced ones' bytes), ``raw_tensor(src_dir, names) -> (bytes, dtype, name)`` (one tensor's bytes,
read without torch: the d2t and non-finite fixes read theirs with it).
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any, Dict, List, Optional, Tuple

from remote_probes.eagle3.config import with_flag_off

ROPE_KEYS = ("rope_theta", "rope_scaling", "rope_parameters")
ATTENTION_KEYS = ("num_attention_heads", "num_key_value_heads", "head_dim")


def part_fixes(parts: List[Dict[str, Any]], config: Dict[str, Any], target_config: Dict[str, Any], engine: str,
               name: str) -> Dict[str, Any]:
    """``{"config": corrected copy, "config_changed", "drop": [tensor names], "changes", "blockers"}`` for the
    recovering swaps ``parts`` (each ``{"part", "served", "swapped", "refs"}``); ``name`` is the engine as said."""
    config = json.loads(json.dumps(config))
    out: Dict[str, Any] = {"config": config, "config_changed": False, "drop": [], "changes": [], "blockers": []}
    for swap in parts:
        part = str(swap.get("part"))
        where = ", ".join("%s:%s" % (r.get("file"), r.get("line")) for r in swap.get("refs") or [])
        why = "the draft scores best with %s swapped (%s -> %s)%s" % (
            part, swap.get("served"), swap.get("swapped"), "; %s decides at %s" % (name, where) if where else "")
        if part in ("rope", "attention"):
            keys = ROPE_KEYS if part == "rope" else ATTENTION_KEYS
            before = {k: config.get(k) for k in keys if k in config}
            for k in keys:
                config.pop(k, None)
            after = {k: target_config[k] for k in keys if target_config.get(k) is not None}
            config.update(after)
            out["config_changed"] = True
            out["changes"].append({"what": "config %s" % "/".join(sorted(after)), "from": before, "to": after,
                                   "why": why + ": %s builds the draft's layer from the draft's config" % name})
        elif part.startswith("field.") and part[len("field."):] in ("norm_output", "norm_before_residual"):
            key = part[len("field."):]  # a behaviour flag the draft scores best without (counterfactual.FLAG_SWAPS)
            before = {key: config.get(key, (config.get("eagle_config") or {}).get(key))}
            config.update(with_flag_off(config, key))
            out["config_changed"] = True
            out["changes"].append({"what": "config %s" % key, "from": before, "to": {key: False},
                                   "why": why + ": %s builds the draft's step from the draft's config" % name})
        elif part.startswith("field.") and target_config.get(part[len("field."):]) is not None:
            key = part[len("field."):]  # a numeric field the draft's layer reads (counterfactual.FIELD_SWAPS)
            before, after = {key: config.get(key)}, {key: target_config[key]}
            config.update(after)
            out["config_changed"] = True
            out["changes"].append({"what": "config %s" % key, "from": before, "to": after,
                                   "why": why + ": %s builds the draft's layer from the draft's config" % name})
        elif part == "embedding" and engine == "vllm" and "the target's" in str(swap.get("swapped")):
            out["drop"].append("embed_tokens.weight")
            out["changes"].append({"what": "embed_tokens.weight", "from": "in the checkpoint", "to": "dropped",
                                   "why": why + ": without one in the checkpoint %s shares the target's" % name})
        else:
            remedy = {"embedding": "retrain the draft with the target's embedding frozen (SpecForge does), or serve "
                                   "it where the engine keeps a distinct embed_tokens (vLLM >= 0.12)",
                      "head": "re-export the draft's trained lm_head", "norm": "re-export the trained final norm",
                      "d2t": "re-export d2t as offsets from the training vocabulary",
                      "flags": "serve with an engine version whose EAGLE-3 class reads the flag (SGLang 0.5.23 reads "
                               "norm_before_fc; vLLM >= 0.32 reads all four), or retrain the draft without it"
                      }.get(part, "retrain the draft")
            out["blockers"].append({"what": part, "why": why + ": no config or flag of %s changes it" % name,
                                    "remedies": [remedy]})
    return out


def _canonical(name: str) -> str:
    return name[len("model."):] if name.startswith("model.") else name


ADDED_FILE = "orchestrator-added.safetensors"


def raw_tensor(src_dir: str, names: Tuple[str, ...]) -> Tuple[Optional[bytes], Optional[str], Optional[str]]:
    """(raw bytes, dtype, the name found) of the first tensor named in ``names`` in the directory's safetensors
    files, read without torch; (None, None, None) when none holds it."""
    for fname in sorted(os.listdir(src_dir)):
        if not fname.endswith(".safetensors"):
            continue
        with open(os.path.join(src_dir, fname), "rb") as fh:
            size = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(size))
            name = next((n for n in names if n in header), None)
            if name is None:
                continue
            begin, end = header[name]["data_offsets"]
            fh.seek(8 + size + begin)
            return fh.read(end - begin), header[name].get("dtype"), name
    return None, None, None


def tensor_names(src_dir: str) -> set:
    """Every tensor name of the directory's safetensors files, canonical (without ``model.``)."""
    out = set()
    for fname in sorted(os.listdir(src_dir)):
        if fname.endswith(".safetensors"):
            with open(os.path.join(src_dir, fname), "rb") as fh:
                size = struct.unpack("<Q", fh.read(8))[0]
                out |= {_canonical(n) for n in json.loads(fh.read(size)) if n != "__metadata__"}
    return out


def write_added(src_dir: str, dest_dir: str, tensors: Dict[str, bytes]) -> List[str]:
    """Int64 vectors the checkpoint lacks (``tensors``: name -> raw little-endian bytes), written as one more
    safetensors file in ``dest_dir`` (and into a copy of the shard index, when the checkpoint has one): the engines
    load every file the directory (or its index) names. The files it wrote, by name."""
    header: Dict[str, Any] = {"__metadata__": {"format": "pt", "written_by": "orchestrator draft_fix"}}
    offset = 0
    for name, blob in tensors.items():
        header[name] = {"dtype": "I64", "shape": [len(blob) // 8], "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(os.path.join(dest_dir, ADDED_FILE), "wb") as out:
        out.write(struct.pack("<Q", len(head)) + head)
        for blob in tensors.values():
            out.write(blob)
    written = [ADDED_FILE]
    index = os.path.join(dest_dir, "model.safetensors.index.json")  # already filtered by write_without, or not
    if not os.path.isfile(index) or os.path.islink(index):
        index = os.path.join(src_dir, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as fh:
            doc = json.load(fh)
        doc.setdefault("weight_map", {}).update({name: ADDED_FILE for name in tensors})
        if os.path.islink(os.path.join(dest_dir, "model.safetensors.index.json")):
            os.unlink(os.path.join(dest_dir, "model.safetensors.index.json"))
        with open(os.path.join(dest_dir, "model.safetensors.index.json"), "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2)
        written.append("model.safetensors.index.json")
    return written


def write_without(src_dir: str, dest_dir: str, drop: List[str],
                  replace: Optional[Dict[str, bytes]] = None, rename: Optional[Dict[str, str]] = None) -> List[str]:
    """Copy each ``*.safetensors`` of ``src_dir`` holding a tensor named in ``drop`` or ``replace`` (with or without
    ``model.``) into ``dest_dir`` without the dropped ones, with the replaced ones' raw bytes (same size: dtype
    and shape stay) and the ``rename`` ones (saved name -> new name) under their new names, streaming tensor by tensor; the shard index, if any, loses the dropped names. The files it
    wrote, by name (the caller links the rest)."""
    wanted = set(drop)
    replace = replace or {}
    rename = rename or {}  # saved name (as written) -> new name: the header changes, the bytes do not
    written: List[str] = []
    removed: List[str] = []
    for fname in sorted(os.listdir(src_dir)):
        if not fname.endswith(".safetensors"):
            continue
        path = os.path.join(src_dir, fname)
        with open(path, "rb") as fh:
            size = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(size))
            names = [n for n in header if n != "__metadata__" and _canonical(n) in wanted]
            swapped = {n: replace[_canonical(n)] for n in header if n != "__metadata__" and _canonical(n) in replace}
            moved = [n for n in header if n in rename]
            if not names and not swapped and not moved:
                continue
            for n, blob in swapped.items():
                begin, end = header[n]["data_offsets"]
                if len(blob) != end - begin:
                    raise ValueError("%s: the replacement has %d bytes, the tensor %d" % (n, len(blob), end - begin))
            removed += names
            keep = [(n, header[n]) for n in header if n != "__metadata__" and n not in names]
            new, offset = {}, 0
            for n, meta in keep:
                begin, end = meta["data_offsets"]
                new[rename.get(n, n)] = dict(meta, data_offsets=[offset, offset + end - begin])
                offset += end - begin
            if "__metadata__" in header:
                new["__metadata__"] = header["__metadata__"]
            blob = json.dumps(new, separators=(",", ":")).encode()
            blob += b" " * (-len(blob) % 8)
            tmp = os.path.join(dest_dir, fname + ".tmp")
            with open(tmp, "wb") as out:
                out.write(struct.pack("<Q", len(blob)) + blob)
                base = 8 + size
                for n, meta in keep:
                    if n in swapped:
                        out.write(swapped[n])
                        continue
                    begin, end = meta["data_offsets"]
                    fh.seek(base + begin)
                    left = end - begin
                    while left:
                        chunk = fh.read(min(left, 1 << 24))
                        out.write(chunk)
                        left -= len(chunk)
            os.replace(tmp, os.path.join(dest_dir, fname))
            written.append(fname)
    index = os.path.join(src_dir, "model.safetensors.index.json")
    if written and os.path.isfile(index):
        with open(index, encoding="utf-8") as fh:
            doc = json.load(fh)
        doc["weight_map"] = {rename.get(k, k): v for k, v in (doc.get("weight_map") or {}).items() if k not in removed}
        with open(os.path.join(dest_dir, "model.safetensors.index.json"), "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2)
        written.append("model.safetensors.index.json")
    return written
