"""A request's top-k, top-p, min-p and logit bias as vLLM 0.32 takes them (sampling_params.py), for the lab's vLLM
stand-in: validated with vLLM's own messages (``_verify_args``), reset to neutral for a greedy request (temperature
below 1e-5: ``__post_init__``), and, on a server that speculates, a min_p above 1e-5 or any logit_bias refused
with vLLM's ``_validate_spec_decode`` message: vLLM builds no min-p or logit-bias processor when speculative
decoding is on (v1/sample/logits_processor/__init__.py), and says so at start-up with the warning
``SPEC_WARNING``. Without speculation min_p is applied (remote_probes/evaluation/decoding.py); a logit bias is not
(refused "lab (NOT vLLM)")."""

from __future__ import annotations

from typing import Any

from orchestrator.lab.stand_in.sglang_openai import number_field
from remote_probes.evaluation.traffic_offline import SAMPLING_EPS  # a temperature below it is greedy

SPEC_REFUSAL = "The min_p and logit_bias sampling parameters are not yet supported with speculative decoding."
SPEC_WARNING = "min_p and logit_bias parameters won't work with speculative decoding."


def sampling_filters(body: dict[str, Any], temperature: float, speculative: bool,
                     error: type[Exception]) -> dict[str, Any]:
    """``{"top_k", "top_p", "min_p"}`` for the request, as vLLM serves it (module doc); ``error`` is the 400."""
    top_p = number_field(body, "top_p", 1.0, error)
    if not 0.0 < top_p <= 1.0:
        raise error(f"top_p must be in (0, 1], got {top_p}.")
    top_k = body.get("top_k")
    top_k = 0 if top_k is None else top_k
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise error(f"top_k must be an integer, got {type(top_k).__name__}")
    if top_k < -1:
        raise error(f"top_k must be 0 (disable), or at least 1, got {top_k}.")
    min_p = number_field(body, "min_p", 0.0, error)
    if not 0.0 <= min_p <= 1.0:
        raise error(f"min_p must be in [0, 1], got {min_p}.")
    if temperature < SAMPLING_EPS:  # greedy: vLLM resets the three
        top_p, top_k, min_p = 1.0, 0, 0.0
    if speculative and (min_p > SAMPLING_EPS or body.get("logit_bias")):
        raise error(SPEC_REFUSAL)
    if body.get("logit_bias"):
        raise error("lab (NOT vLLM): the lab's vLLM stand-in applies no logit_bias: replay it on a real vLLM")
    return {"top_k": top_k, "top_p": top_p, "min_p": min_p}
