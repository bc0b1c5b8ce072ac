"""The Textual TUI: a subscriber of engine events and a sender of commands (``control.Controller``).
Importing ``orchestrator.engine`` never loads this package (tests/tui/test_boundary.py)."""
