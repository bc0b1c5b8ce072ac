"""The static checks of a draft: its checkpoint and config against the format, the target and what the installed
engine loads (draft_inspect), and whether a draft test can run it here (runnable)."""

from __future__ import annotations
