"""A d2t map that holds target ids instead of offsets, rewritten as offsets, for draft_fix.py.

Standard library only. Both engines map a draft id i to the target id i + d2t[i] (vLLM 0.32.0
model_executor/models/llama_eagle3.py compute_logits: ``targets = arange(draft_vocab_size) + draft_id_to_target_id``;
SGLang's hot_token_id = d2t + arange). A checkpoint whose d2t holds the target ids themselves (draft_findings.py
classify_d2t: ``direct_ids``, every value distinct and inside the target vocabulary) maps every drafted token to a
wrong id, or past the vocabulary (vLLM: IndexError at the first draft step, every request HTTP 500). The offsets
are determined by the ids alone, d2t[i] - i, so the fix needs no training: the corrected draft beside the original
carries the rewritten tensor (draft_fix_parts.write_without ``replace``), the original is never touched.

A checkpoint that lost d2t on export but kept t2d (the boolean mask over the target vocabulary SpecForge saves beside
it) has its map in t2d: the draft's ids are the mask's set ids in order, so d2t[i] = nonzero(t2d)[i] - i
(``d2t_from_t2d``). Without d2t both engines read draft id i as target id i (vLLM's draft_id_to_target_id stays
zeros; NeMo Automodel PR 2447 saw acceptance collapse from it), so the derived tensor is added in a new file of the
corrected copy.

Public API: ``d2t_as_offsets(draft_dir, vocab) -> (bytes | None, why)``: the new tensor's raw bytes (same dtype,
shape and size) or None with the reason it cannot be derived; ``d2t_from_t2d(draft_dir, draft_vocab_size) ->
(bytes | None, why)``: an int64 d2t of ``draft_vocab_size`` offsets from the checkpoint's t2d.
"""

from __future__ import annotations

import struct
from typing import Dict, Optional, Tuple

from remote_probes.fixes.parts import raw_tensor

#: safetensors integer dtypes d2t is stored in, as struct codes (little-endian)
INT_CODES = {"I64": "q", "I32": "i"}


#: safetensors boolean / byte dtypes t2d is stored in
MASK_CODES = {"BOOL": "B", "U8": "B", "I64": "q", "I32": "i"}


def _read_named(draft_dir: str, names: Tuple[str, ...], codes: Dict[str, str]) -> Tuple[Optional[list], Optional[str], str]:
    """(values, dtype, why) of the first tensor named in ``names`` (with or without ``model.``), read without torch,
    when its dtype is one of ``codes`` (safetensors dtype -> struct code)."""
    raw, dtype, name = raw_tensor(draft_dir, names)
    if raw is None:
        return None, None, "no %s tensor in the draft's weights" % names[0]
    code = codes.get(str(dtype))
    if code is None:
        return None, dtype, "%s has dtype %s, which this probe does not read" % (name, dtype)
    count = len(raw) // struct.calcsize("<" + code)
    return list(struct.unpack("<%d%s" % (count, code), raw)), dtype, ""


def d2t_from_t2d(draft_dir: str, draft_vocab_size: Optional[int]) -> Tuple[Optional[bytes], str]:
    """The offsets nonzero(t2d)[i] - i as an int64 tensor's raw bytes, when the checkpoint's t2d marks exactly
    ``draft_vocab_size`` target ids."""
    mask, _dtype, why = _read_named(draft_dir, ("t2d", "model.t2d"), MASK_CODES)
    if mask is None:
        return None, why
    ids = [i for i, v in enumerate(mask) if v]
    if not isinstance(draft_vocab_size, int) or len(ids) != draft_vocab_size:
        return None, "t2d marks %d target ids, not draft_vocab_size %s: the map cannot be read from it" % (
            len(ids), draft_vocab_size)
    return struct.pack("<%dq" % len(ids), *[t - i for i, t in enumerate(ids)]), ""


def d2t_as_offsets(draft_dir: str, vocab: Optional[int]) -> Tuple[Optional[bytes], str]:
    """The offsets d2t[i] - i of a d2t that holds distinct target ids inside ``vocab``, as the tensor's raw bytes."""
    values, dtype, why = _read_named(draft_dir, ("d2t", "model.d2t"), INT_CODES)
    if values is None or dtype is None:
        return None, why
    if len(set(values)) != len(values) or any(v < 0 for v in values) or (vocab is not None and max(values) >= vocab):
        return None, "d2t does not hold distinct target ids inside the vocabulary: its offsets cannot be derived"
    offsets = [v - i for i, v in enumerate(values)]
    return struct.pack("<%d%s" % (len(offsets), INT_CODES[dtype]), *offsets), ""


def d2t_from_disagreeing_t2d(draft_dir: str, draft_vocab_size: Optional[int]) -> Tuple[Optional[bytes], str]:
    """t2d's map as d2t offsets (``d2t_from_t2d``), only where it differs from the checkpoint's d2t: a copy that
    changes nothing would verify nothing."""
    blob, why = d2t_from_t2d(draft_dir, draft_vocab_size)
    if blob is None:
        return None, why
    values, dtype, why = _read_named(draft_dir, ("d2t", "model.d2t"), INT_CODES)
    if values is not None and dtype is not None:
        derived = list(struct.unpack("<%dq" % (len(blob) // 8), blob))
        if derived == list(values):
            return None, "d2t already holds t2d's map"
    return blob, ""
