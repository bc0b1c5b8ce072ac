"""The installed engine, read without importing it: its source, flags, model registry, capture, and its HTTP server."""

from __future__ import annotations
