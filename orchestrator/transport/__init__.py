"""Transports: how commands and files reach a host. One interface, local and SSH implementations."""

from orchestrator.transport.base import Command, OutputCallback, ProcessHandle, RunResult, Transport

__all__ = ["Command", "OutputCallback", "ProcessHandle", "RunResult", "Transport"]
