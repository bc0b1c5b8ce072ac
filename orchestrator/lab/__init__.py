"""The embedded lab, by role: ``training/`` (the tiny models, trained on CPU by a declared recipe), ``building/``
(scenarios, the build and its calibration, the shipped models, the lab inventories), ``stand_in/`` (the lab
servers that stand in for SGLang and vLLM), ``vllm_host/`` (a real vLLM on this CPU). import-linter holds the order:
vllm_host over building over stand_in and training."""
