"""`orchestrator mcp`: the investigation as MCP tools for an AI assistant (official ``mcp`` SDK, stdio).

One MCP connection is one recorded session. Every tool call becomes session events the way a TUI ad-hoc action
does (``engine.adhoc.AdhocActions``, author ``mcp``), so ``orchestrator tui --replay`` and the report show an
assistant's investigation like anyone else's. ``session`` holds the session and the tools' logic (no SDK
imports, unit-testable); ``server`` binds them to the SDK.
"""
