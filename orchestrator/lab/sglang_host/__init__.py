"""A real SGLang on this machine's CPU: the host's own venv built by `orchestrator lab sglang-host`, serving the lab's
target without speculation (research/sglang-cpu.md)."""
