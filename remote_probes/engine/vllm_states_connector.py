"""A vLLM KV connector that writes the target's hidden states on every backend, CPU included (imported by the vLLM
server itself through ``kv_connector_module_path``, never by a probe; torch and vllm are the server's own).

vLLM's ``extract_hidden_states`` speculative method keeps the layers named by the draft config's
``eagle_aux_hidden_state_layer_ids`` in a cache-only attention layer; its stock ``ExampleHiddenStatesConnector``
(distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py) copies them out per finished request
and writes one safetensors file, ``hidden_states`` [tokens, layers, hidden] and ``token_ids``, with a ``.lock``
beside it that the client waits on. Its copy is asynchronous on a CUDA stream into pinned memory (0.32.0:402-403)
and its completion test is a CUDA event (:587): on the CPU backend the first raises ("pin_memory=True requires a
CUDA or other accelerator backend") and the second is a placeholder, and the EngineCore dies. This subclass replaces
only that copy where the cache lives in host memory: the rows are copied and written at once, the lock released
after the write, the request reported done at the next poll. On an accelerator it is the stock connector. The
file, the lock protocol, TP rank 0 writing alone, the layer order (ascending ids) are vLLM's own.
"""

from __future__ import annotations

import fcntl
import importlib
import os
from typing import Any

import torch

# vLLM's own module, by name: "vllm" is also a sibling module of this package (fixes/vllm.py), and a plain import
# statement of it reads as a flat sibling import to the probes' layout check
_stock = importlib.import_module("vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector")
ExampleHiddenStatesConnector: Any = _stock.ExampleHiddenStatesConnector
extract_from_kv_cache = _stock.extract_from_kv_cache


class _Written:
    """The stock connector's copy-done event, for a copy that finished before it was recorded."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


class OrchestratorHiddenStatesConnector(ExampleHiddenStatesConnector):
    def _submit_async_write(self, pending: Any) -> None:
        cache = self._kv_cache
        if cache is None or cache.device.type != "cpu":
            super()._submit_async_write(pending)
            return
        if not self._is_tp_rank_zero:
            return
        block_ids = torch.tensor(pending.block_ids, dtype=torch.long)
        offsets = torch.arange(0, self._block_size, dtype=torch.long)
        slots = (offsets.reshape((1, self._block_size)) + block_ids.reshape((-1, 1)) * self._block_size).flatten()
        states = extract_from_kv_cache(cache, slots, pending.token_ids.shape[0]).clone()
        os.makedirs(os.path.dirname(pending.filename), exist_ok=True)
        lock_fd = self._lock_fds.pop(pending.req_id, None)
        if lock_fd is None and self.use_lock:
            lock_fd = os.open(pending.filename + ".lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
        # the write itself is the stock one (save_file, then the lock released), in this thread: the rows are
        # already in host memory and a file of a few hundred KB costs less than a thread hand-off
        self._write_tensors({"hidden_states": states, "token_ids": pending.token_ids.clone()}, _Written(),
                            pending.filename, lock_fd)
        self._req_copy_events[pending.req_id] = _Written()
