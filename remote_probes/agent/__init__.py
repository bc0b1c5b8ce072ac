"""The agent that runs probes on the host, the probe protocol, and the host environment probe."""

from __future__ import annotations
