"""Before the draft test loads anything: can it run this draft's architecture here, and do the weights fit?

Standard library only (Python >= 3.9). The draft test's model (eagle3/draft.py) is ONE decoder layer over the
concatenated aux states with a dense gated MLP and RMSNorm, and one of two attentions: Llama grouped-query attention
(q/k/v/o: SpecForge's and speculators' Llama drafts, SGLang's ``LlamaForCausalLMEagle3``) or DeepSeek-V3 MLA
(``kv_lora_rank``/``q_lora_rank``: SGLang's ``Eagle3DeepseekV2ForCausalLM``, srt/models/kimi_k25_eagle3.py; built
from transformers' module, eagle3/mla.py). Expert keys in a draft's config do not change the layer: the engines
build a dense MLP for an EAGLE-3 draft whatever they say, and so does the test (expert tensors are left unplaced,
and said). An MLA draft whose config lacks one
of the MLA dimensions is refused here, before any weight is read (the loader would refuse it only after the target
is loaded).

The memory check reads the checkpoints' safetensors headers (the first 8 bytes are the header's length, then a JSON
table of every tensor's dtype and shape) and counts parameters; the test holds the target and up to two copies of
the draft (as trained and as served: eagle3_served.py) at the dtype it loads them in (float32 on a CPU, the stored
dtype on a GPU). That estimate must fit the memory the host has free (``MemAvailable`` of /proc/meminfo, or the
GPU's free memory), or the test is refused with both figures: a 30 GB draft is never loaded into a 24 GB machine.

Public API: ``check_architecture(config) -> None``, ``checkpoint_params(path) -> dict``,
``check_fits(target, draft, *, bytes_per_param, available, where) -> dict``, ``mem_available() -> int | None``
(all raise ``ProbeFailure``: ``unsupported_architecture``, ``draft_load``, ``too_large``).
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any, Dict, List, Optional

from remote_probes.agent.protocol import ProbeFailure
from remote_probes.eagle3.config import flat_config

#: safetensors dtype -> bytes per element
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
               "F8_E4M3": 1, "F8_E5M2": 1}
MLA_KEYS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim")
#: what the MLA attention needs besides the Llama layer's keys (q_lora_rank is optional: None means one q_proj)
MLA_DIMS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
#: copies of the draft the test holds at once (the checkpoint's own parts and the served ones)
DRAFT_COPIES = 2
_MAX_HEADER = 100 * 1024 * 1024


def check_architecture(config: Dict[str, Any]) -> None:
    """Refuse an MLA draft whose config lacks an MLA dimension, saying which. A Llama or a complete MLA draft passes,
    expert keys or not (the engines serve the draft layer's MLP dense)."""
    flat = flat_config(config)  # speculators nests the layer's config, as the loader reads it (DraftConfig)
    archs = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    mla = {k: flat[k] for k in MLA_KEYS if flat.get(k) is not None}
    named = ", ".join(archs) or "no architectures"
    # expert keys (a config copied from an MoE target) are not refused: the engines' EAGLE-3 draft layers build a
    # dense MLP whatever they say (SGLang's Eagle3MLADecoderLayer a DeepseekV2MLP, kimi_k25_eagle3.py; its
    # LlamaForCausalLMEagle3 a LlamaMLP), and so does the test; expert tensors in the checkpoint are left unplaced and
    # said in the load report's notes
    if not mla and not any("Deepseek" in a or "Kimi" in a for a in archs):
        return  # a Llama layer
    missing = [k for k in MLA_DIMS if not (isinstance(flat.get(k), int) and flat[k] > 0)]
    if missing:
        raise ProbeFailure(
            "draft_load",
            "the draft (%s) has MLA attention (%s) but its config gives no %s: the MLA layer's shapes are unknown "
            "(eagle3/mla.py builds it from them, as SGLang's Eagle3DeepseekV2ForCausalLM does)"
            % (named, ", ".join("%s=%s" % kv for kv in mla.items()) or "a DeepSeek-style architecture",
               ", ".join(missing)), field=missing[0], architectures=archs, mla=mla)


def _header(path: str) -> Dict[str, Any]:
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError("shorter than a safetensors header")
        (size,) = struct.unpack("<Q", raw)
        if size > _MAX_HEADER:
            raise ValueError("header of %d bytes" % size)
        table = json.loads(f.read(size))
    if not isinstance(table, dict):
        raise ValueError("header is not a JSON object")
    return table


def checkpoint_params(path: str) -> Dict[str, Any]:
    """Parameters and stored bytes of a checkpoint directory's safetensors files (headers only); ``params`` is None
    when it has none readable (a pytorch_model.bin: its size on disk is used for ``stored_bytes``)."""
    names = sorted(os.listdir(path)) if os.path.isdir(path) else []
    files = [n for n in names if n.endswith(".safetensors")]
    params, stored = 0, 0
    unreadable: List[str] = []
    for name in files:
        try:
            table = _header(os.path.join(path, name))
        except (OSError, ValueError) as exc:
            unreadable.append("%s: %s" % (name, exc))
            continue
        for key, meta in table.items():
            if key == "__metadata__" or not isinstance(meta, dict):
                continue
            count = 1
            for dim in meta.get("shape") or []:
                count *= int(dim)
            params += count
            stored += count * DTYPE_BYTES.get(str(meta.get("dtype")), 4)
    others = [n for n in names if n.endswith((".bin", ".pt", ".pth"))]
    if others and not files:
        stored = sum(os.path.getsize(os.path.join(path, n)) for n in others)
        return {"params": None, "stored_bytes": stored, "files": others, "unreadable": unreadable}
    return {"params": params if files and not unreadable else None, "stored_bytes": stored, "files": files,
            "unreadable": unreadable}


def mem_available() -> Optional[int]:
    """The memory this process can still take, in bytes: /proc/meminfo's MemAvailable, or less where the process's
    cgroup (a container, a Slurm job's memory limit) leaves less (None where neither says: not Linux)."""
    free = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    free = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        free = None
    room = cgroup_room()
    if room is not None and (free is None or room < free):
        return room
    return free


def _read_int(path: str) -> Optional[int]:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (v2) or garbage: no limit said


def _memory_stat(stat_path: str, key: str) -> int:
    """``key`` of a cgroup's memory.stat (0 where it cannot be read)."""
    try:
        with open(stat_path) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key and value.strip().isdigit():
                    return int(value)
    except OSError:
        pass
    return 0


def cgroup_room(proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> Optional[int]:
    """The limit less the working set of this process's memory cgroup (v2 ``memory.max``/``memory.current``, v1
    ``memory.limit_in_bytes``/``memory.usage_in_bytes``); None without a limit. v1's "no limit" is a huge number.

    The usage counts the page cache charged to the cgroup: every file its processes read (a checkpoint copied, the
    libraries torch maps) stays charged after they exit, 220 MiB after one ``import torch, transformers`` here. The
    kernel reclaims the inactive part before it kills anything, so it is free to the next load: the working set is
    the usage less ``inactive_file`` (v1: ``total_inactive_file``, the hierarchy's), as the kubelet and ``docker
    stats`` count it."""
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        controllers, path = parts[1], parts[2].lstrip("/")
        if controllers == "":  # v2: one unified hierarchy
            base = os.path.join(root, path)
            limit = _read_int(os.path.join(base, "memory.max"))
            used = _read_int(os.path.join(base, "memory.current"))
            stat_key = "inactive_file"
        elif "memory" in controllers.split(","):
            base = os.path.join(root, "memory", path)
            limit = _read_int(os.path.join(base, "memory.limit_in_bytes"))
            used = _read_int(os.path.join(base, "memory.usage_in_bytes"))
            stat_key = "total_inactive_file"
            if limit is not None and limit >= 1 << 60:
                limit = None
        else:
            continue
        if limit is not None:
            working_set = max(0, (used or 0) - _memory_stat(os.path.join(base, "memory.stat"), stat_key))
            return max(0, limit - working_set)
    return None


def _gib(n: float) -> str:
    return "%.1f GiB" % (n / 2 ** 30)


def check_fits(target: str, draft: str, *, bytes_per_param: Optional[int], available: Optional[int],
               where: str) -> Dict[str, Any]:
    """The memory the test needs against ``available`` (bytes free on ``where``); raises ``too_large``.
    ``bytes_per_param`` None: the stored dtype (a GPU's "auto")."""
    t, d = checkpoint_params(target), checkpoint_params(draft)

    def load_bytes(info: Dict[str, Any]) -> int:
        if bytes_per_param is None or info["params"] is None:  # a .bin's dtype is unknown unread: its size
            return int(info["stored_bytes"])
        return int(info["params"] * bytes_per_param)

    needed = load_bytes(t) + DRAFT_COPIES * load_bytes(d)
    out = {"needed_bytes": needed, "available_bytes": available, "where": where, "target": t, "draft": d,
           "bytes_per_param": bytes_per_param}
    if available is not None and needed > available:
        raise ProbeFailure(
            "too_large",
            "the draft test would need about %s on %s (target %s + %d x draft %s at %s bytes per parameter) and "
            "%s is free: it does not load them; take the target's hidden states from the engine that serves it "
            "(states_from; the flagship's hidden_states_from: engine), or run it on a host with more free memory, "
            "or with a smaller dtype" % (_gib(needed), where, _gib(load_bytes(t)), DRAFT_COPIES, _gib(load_bytes(d)),
                       bytes_per_param or "stored", _gib(available)), **out)
    return out
