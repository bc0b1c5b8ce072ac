"""The Textual TUI: a subscriber of session events and a sender of commands (``control.Controller``).
Importing ``orchestrator.runner`` never loads this package (tests/tui/test_boundary.py)."""
