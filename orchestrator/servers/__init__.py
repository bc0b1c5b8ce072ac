"""Inference-server adapters (SGLang, the lab; later vLLM) and the per-session ServerManager."""
