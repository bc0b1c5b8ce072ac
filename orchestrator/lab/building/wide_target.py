"""The lab's target made larger without changing what it computes: every MLP widened by units whose weights are
zero. A unit's gate and up rows are zero, so its activation is SiLU(0) * 0 = 0, and its down_proj column is zero, so
nothing of it reaches the residual stream: the hidden states and the greedy tokens are the original's (to float
rounding: tests/lab/test_engine_capture_vllm.py holds the draft test's figures on it to the original's).

Why: a host whose memory cannot hold a transformers copy of the target needs a target larger than the memory the
draft test may take, and the lab's (10 MB) is smaller than torch itself. Widened, it is as large as asked while the
lab's drafts, trained against the original, still predict it and its planted faults still hold. A real vLLM serves
it at 27-31 tok/s at 292 MiB and 30-44 at 148 MiB, against 67-93 for the 10 MB original (2 cores).

Public API: ``widen_mlp(source, dest, intermediate_size) -> Path``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

MLP_ROWS = ("mlp.gate_proj.weight", "mlp.up_proj.weight")  # [intermediate, hidden]
MLP_COLUMNS = ("mlp.down_proj.weight",)  # [hidden, intermediate]
NOTE = "wide_target.json"


def widen_mlp(source: Path | str, dest: Path | str, intermediate_size: int) -> Path:
    """A copy of the Llama-layer target at ``source`` in ``dest`` (replaced) whose MLPs have ``intermediate_size``
    units, the added ones zero; ``dest/wide_target.json`` says from what. :raises ValueError: not wider, or not a
    single-file Llama-MLP checkpoint."""
    import torch
    from safetensors.torch import load_file, save_file

    source, dest = Path(source), Path(dest)
    config = json.loads((source / "config.json").read_text())
    width = int(config["intermediate_size"])
    if intermediate_size <= width:
        raise ValueError(f"{source}: intermediate_size {intermediate_size} is not wider than its {width}")
    weights = source / "model.safetensors"
    if not weights.is_file():
        raise ValueError(f"{source}: no model.safetensors (a sharded checkpoint is not widened here)")
    tensors = load_file(str(weights))
    added = intermediate_size - width
    widened = 0
    for name, tensor in list(tensors.items()):
        if name.endswith(MLP_ROWS):
            tensors[name] = torch.cat([tensor, tensor.new_zeros(added, tensor.shape[1])], 0).contiguous()
        elif name.endswith(MLP_COLUMNS):
            tensors[name] = torch.cat([tensor, tensor.new_zeros(tensor.shape[0], added)], 1).contiguous()
        else:
            continue
        widened += 1
    if widened != 3 * int(config["num_hidden_layers"]):
        raise ValueError(f"{source}: {widened} MLP tensors for {config['num_hidden_layers']} layers (not a Llama MLP)")
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("model.safetensors"))
    save_file(tensors, str(dest / "model.safetensors"), metadata={"format": "pt"})
    (dest / "config.json").write_text(json.dumps({**config, "intermediate_size": intermediate_size}, indent=2))
    (dest / NOTE).write_text(json.dumps({"from": str(source), "intermediate_size": [width, intermediate_size],
                                         "added_units": "zero: the same function"}, indent=2))
    return dest
