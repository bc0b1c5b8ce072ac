"""Inference-engine adapters (SGLang, vLLM, the lab: siblings of servers/base.EngineAdapter) and the per-session ServerManager."""
