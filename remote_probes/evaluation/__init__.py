"""The standalone draft test, its counterfactual served parts, the reconcile with a server, and interval statistics."""

from __future__ import annotations
