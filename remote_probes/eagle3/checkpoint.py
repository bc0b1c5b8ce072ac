"""Reading EAGLE-3 draft checkpoints from disk (torch only; no safetensors package needed).

Used by ``eagle3_validate.load_draft``. Knows the naming variants real drafts use and normalises them to one
canonical set of keys (SpecForge's ``midlayer.*``):

- SpecForge / EAGLE: ``midlayer.self_attn.q_proj.weight``, ``fc.weight``, ``norm.weight``, ``lm_head.weight``
- vLLM-style / speculators: ``layers.0.*`` instead of ``midlayer.*``
- anything above under a ``model.`` prefix (SGLang's loader adds it when missing)

``read_state_dict(path)`` returns ``(config_dict, {canonical_name: tensor}, notes)``.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any, Dict, List, Tuple

import torch

from remote_probes.agent.protocol import ProbeFailure
from remote_probes.eagle3.names import canonical_name


class DraftLoadError(ProbeFailure):
    """A draft checkpoint that cannot be used as given; ``field`` names the tensor or config key at fault."""

    def __init__(self, message: str, *, field: str, **details: Any) -> None:
        super().__init__("draft_load", message, field=field, **details)
        self.field = field


_ST_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}


def read_safetensors(path: str) -> Dict[str, torch.Tensor]:
    """Read one .safetensors file with the standard library + torch (format: 8-byte LE header size, JSON, data)."""
    with open(path, "rb") as handle:
        raw = handle.read()
    if len(raw) < 8:
        raise DraftLoadError("%s is not a safetensors file (too short)" % path, field=os.path.basename(path))
    (header_len,) = struct.unpack("<Q", raw[:8])
    try:
        header = json.loads(raw[8:8 + header_len])
    except ValueError as exc:
        raise DraftLoadError("%s has an unreadable safetensors header: %s" % (path, exc),
                             field=os.path.basename(path)) from None
    base = 8 + header_len
    tensors: Dict[str, torch.Tensor] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dtype = _ST_DTYPES.get(meta.get("dtype", ""))
        if dtype is None:
            raise DraftLoadError("tensor %s has unsupported dtype %s" % (name, meta.get("dtype")), field=name)
        start, end = meta["data_offsets"]
        buf = bytearray(raw[base + start:base + end])
        flat = torch.frombuffer(buf, dtype=dtype) if buf else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(meta["shape"])
    return tensors


def _weight_files(path: str) -> List[str]:
    names = sorted(os.listdir(path))
    st = [n for n in names if n.endswith(".safetensors")]
    if st:
        return [os.path.join(path, n) for n in st]
    return [os.path.join(path, n) for n in names if n.endswith(".bin") or n.endswith(".pt")]


def read_state_dict(path: str) -> Tuple[Dict[str, Any], Dict[str, torch.Tensor], List[str]]:
    """Read config.json and all weight files of a draft directory; names are canonicalised.

    :raises DraftLoadError: missing directory / config.json / weights, unreadable files, duplicate tensors.
    """
    if not os.path.isdir(path):
        raise DraftLoadError("draft path %s is not a directory" % path, field="draft")
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        raise DraftLoadError("draft directory %s has no config.json" % path, field="config.json")
    try:
        with open(cfg_path, encoding="utf-8") as handle:
            config = json.load(handle)
    except ValueError as exc:
        raise DraftLoadError("config.json of %s is not valid JSON: %s" % (path, exc), field="config.json") from None
    if not isinstance(config, dict):
        raise DraftLoadError("config.json of %s is not a JSON object" % path, field="config.json")
    files = _weight_files(path)
    if not files:
        raise DraftLoadError("draft directory %s has no *.safetensors or *.bin weights" % path, field="weights")
    notes: List[str] = []
    state: Dict[str, torch.Tensor] = {}
    for file in files:
        if file.endswith(".safetensors"):
            part = read_safetensors(file)
        else:
            part = torch.load(file, map_location="cpu", weights_only=True)
        for name, tensor in part.items():
            canon = canonical_name(name)
            if canon != name and not any("renamed" in n for n in notes):
                notes.append("tensor names renamed to the midlayer.* layout (e.g. %s -> %s)" % (name, canon))
            if canon in state:
                raise DraftLoadError("tensor %s appears twice (as %s)" % (canon, name), field=canon)
            state[canon] = tensor
    return config, state, notes
