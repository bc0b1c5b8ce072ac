"""orchestrator: recorded, repeatable investigations of speculative-decoding problems on GPU servers."""

__version__ = "0.1.0"
