"""Tuning: predict the fastest chain speculative configuration from two benchmarks, then verify a few.

``cost_model`` fits a host's per-cycle cost from a no-speculation benchmark and one speculative benchmark and
predicts accept length and tok/s for every chain length from an acceptance profile; ``chart`` draws the predicted
curve and the measured points. The `tune` step (orchestrator/actions/tune.py) runs the benchmarks.
"""
