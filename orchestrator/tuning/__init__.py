"""Tuning: predict the fastest chain speculative configuration from two benchmarks, then verify a few.

``cost_model`` fits a host's per-cycle cost from a no-speculation benchmark and one speculative benchmark and
predicts accept length and tok/s for every chain length from an acceptance profile; ``chart`` draws the predicted
curve and the measured points. The `tune` step (orchestrator/actions/tune.py) runs the benchmarks.
"""


def server_name(step_id: str, label: str) -> str:
    """The name a tune step gives the server it starts for one configuration (``baseline``, ``k=5``, ``k=5 topk=4
    tokens=16``): the TUI finds each configuration's server by it."""
    return f"tune-{step_id}-{label.replace('=', '').replace(' ', '-')}"
