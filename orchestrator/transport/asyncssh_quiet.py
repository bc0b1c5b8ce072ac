"""asyncssh, imported without the deprecation warnings its DSA support trips in cryptography at import time (ten
lines on stderr on every SSH run, about code the user never calls: DSA keys are refused by default). Only those
warnings are silenced, and only during the import; the rest of asyncssh's warnings stay."""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="DSA is deprecated")
    import asyncssh

__all__ = ["asyncssh"]
