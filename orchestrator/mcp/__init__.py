"""`orchestrator mcp`: the investigation as MCP tools for an AI assistant (official ``mcp`` SDK, stdio).

One MCP connection is one recorded session. Every tool call becomes session events the way a TUI ad-hoc action
does (``runner.adhoc.AdhocActions``, author ``mcp``), so ``orchestrator tui --replay`` and the report show an
assistant's investigation like anyone else's. ``connection`` holds the session and the tools' logic (no SDK
imports, unit-testable); ``tools`` binds them to the SDK.
"""
