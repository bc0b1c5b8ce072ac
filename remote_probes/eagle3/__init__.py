"""The EAGLE-3 format: checkpoint, config, the draft forward pass, wiring and the parts each engine serves."""

from __future__ import annotations
