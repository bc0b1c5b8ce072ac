"""The TUI's command API lives in ``orchestrator.runner.control`` since the MCP server became its second
front end (front ends are peers: neither imports the other). Kept here so existing imports still work."""

from __future__ import annotations

from orchestrator.runner.control import ControlGate, Controller, ControllerMode, Mode, SessionHold

__all__ = ["ControlGate", "Controller", "ControllerMode", "Mode", "SessionHold"]
