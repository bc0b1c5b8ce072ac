"""The lab's stand-in servers: a server that speaks SGLang's HTTP API and applies SGLang's rules, and one that
speaks vLLM's, both running real chain speculative decoding with the tiny models (model_runner), single or
multi-node (ranks). They say in their banner that they are the orchestrator lab, not the engine."""
