"""The values of a draft's weights: NaN or Inf anywhere, and weight matrices that are all zeros (standard library
only, at the speed of the C byte routines: no Python loop over elements).

A non-finite weight makes every draft step that reads it non-finite, so the draft proposes garbage and nothing is
accepted, whatever the wiring or the parts served (a bf16/fp16 export of a diverged or overflowed training step; an
optimizer state saved as weights). A projection of zeros (a shard an FSDP export never gathered) computes nothing.
Neither is visible in a config or a shape; both are seconds to find in the bytes.

How: IEEE-754 non-finite values are exactly those whose exponent bits are all ones. For each dtype the bytes that
hold the exponent are taken with one stride slice each, mapped to 0/1 by ``bytes.translate`` (a 256-entry table
for "these bits are all set"), read as one integer, and ANDed: its set bits count the non-finite elements.

Public API: ``scan(tensors) -> list of findings``, ``count_nonfinite(raw, dtype)``, ``nonfinite_positions(raw,
dtype)``, ``SCANNED``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

#: dtype -> (element size, [(byte of the element, mask)]): non-finite iff every (byte & mask) == mask
_EXPONENT: Dict[str, Tuple[int, List[Tuple[int, int]]]] = {
    "F32": (4, [(3, 0x7F), (2, 0x80)]), "BF16": (2, [(1, 0x7F), (0, 0x80)]), "F16": (2, [(1, 0x7C)]),
    "F64": (8, [(7, 0x7F), (6, 0xF0)]),
}
SCANNED = tuple(_EXPONENT)
_TABLES = {mask: bytes(1 if (b & mask) == mask else 0 for b in range(256)) for _, tests in _EXPONENT.values()
           for _, mask in tests}
_CHUNK = 1 << 26  # bytes read at a time (a multiple of every element size)


def _nonfinite_bits(raw: bytes, dtype: str) -> int:
    """An integer whose bit 8*j is set exactly when element j of ``raw`` is NaN or +-Inf."""
    size, tests = _EXPONENT[dtype]
    acc: Optional[int] = None
    for index, mask in tests:
        bits = int.from_bytes(raw[index::size].translate(_TABLES[mask]), "little")
        acc = bits if acc is None else acc & bits
    return acc or 0


def count_nonfinite(raw: bytes, dtype: str) -> int:
    """How many elements of ``raw`` (little-endian, as safetensors stores them) are NaN or +-Inf."""
    return bin(_nonfinite_bits(raw, dtype)).count("1")


def nonfinite_positions(raw: bytes, dtype: str, limit: int) -> Optional[List[int]]:
    """The indices of the non-finite elements of ``raw``, or None when there are more than ``limit`` (a loop per
    element found, so only for a few)."""
    acc = _nonfinite_bits(raw, dtype)
    if bin(acc).count("1") > limit:
        return None
    out = []
    while acc:
        low = acc & -acc
        out.append((low.bit_length() - 1) // 8)
        acc ^= low
    return out


def _scan_one(meta: Dict[str, Any]) -> Tuple[int, bool]:
    """(non-finite elements, all zeros) of one tensor of a safetensors file (``meta``: draft_inspect.weight_table)."""
    begin, end = meta["data_offsets"]
    bad, zero = 0, True
    with open(meta["file"], "rb") as handle:
        handle.seek(meta["data_start"] + begin)
        left = end - begin
        while left:
            raw = handle.read(min(left, _CHUNK))
            if not raw:
                break
            left -= len(raw)
            bad += count_nonfinite(raw, meta["dtype"])
            zero = zero and raw.count(0) == len(raw)
    return bad, zero and end > begin


def scan(tensors: Dict[str, Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One error finding per float tensor holding a NaN or Inf, or a 2-D weight that is all zeros
    (``{"id": "tensor.values", "severity": "error", "message", "details": {"field": name, ...}}``); tensors of other
    dtypes are not scanned (said by count in the last, info, finding)."""
    out: List[Dict[str, Any]] = []
    scanned = skipped = 0
    for name, meta in sorted(tensors.items()):
        if meta.get("dtype") not in _EXPONENT:
            skipped += meta.get("dtype") not in ("I64", "I32", "I16", "I8", "U8", "BOOL")
            continue
        scanned += 1
        try:
            bad, zero = _scan_one(meta)
        except OSError as exc:
            out.append({"id": "tensor.values", "severity": "warning", "message": "%s could not be read: %s"
                        % (name, exc), "details": {"field": name}})
            continue
        total = 1
        for dim in meta.get("shape") or []:
            total *= int(dim)
        if bad:
            out.append({"id": "tensor.values", "severity": "error", "message": (
                "%s holds %d non-finite value%s (NaN or Inf) of %d: every draft step that reads it is non-finite, so "
                "the draft proposes nothing the target accepts. No config or flag changes it: re-export the tensor "
                "from a finite training checkpoint." % (name, bad, "" if bad == 1 else "s", total)),
                "details": {"field": name, "value": "%d non-finite of %d" % (bad, total), "nonfinite": bad,
                            "elements": total, "dtype": meta.get("dtype"), "fix": None}})
        elif zero and (len(meta.get("shape") or []) == 2 or name.endswith("norm.weight")):
            # a norm's scale starts at ones and never trains to all zeros: zeros silence everything after it
            what = "the norm silences every state it scales" if name.endswith("norm.weight") else \
                "the projection computes nothing (a shard the export never gathered)"
            out.append({"id": "tensor.values", "severity": "error", "message": (
                "%s is all zeros (%d elements): %s. Re-export it from training." % (name, total, what)),
                "details": {"field": name, "value": "all zeros", "elements": total, "dtype": meta.get("dtype"),
                            "fix": None}})
    out.append({"id": "tensor.scan", "severity": "info", "message": "%d float tensors scanned for NaN/Inf and zero "
                "matrices%s." % (scanned, "; %d of a dtype not scanned" % skipped if skipped else ""),
                "details": {"scanned": scanned, "not_scanned": skipped}})
    return out
