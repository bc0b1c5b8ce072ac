"""The runner: runs a playbook against hosts and emits events. It prints nothing."""

from orchestrator.runner.playbook_runner import PlaybookRunner, RunnerOptions, SessionOutcome

__all__ = ["PlaybookRunner", "RunnerOptions", "SessionOutcome"]
