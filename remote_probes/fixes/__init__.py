"""The fix derived from the evidence: corrected flags and a corrected draft written beside the original."""

from __future__ import annotations
