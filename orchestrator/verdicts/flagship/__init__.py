"""The flagship's (playbooks/eagle3.yaml) verdict rules and facts, by the experiment they weigh: the servers and their
benchmarks (``serving``), the static reads of the checkpoint and the engine's source (``checkpoint``), the draft test,
its counterfactuals and the reconcile (``draft_evidence``), and the final weighing of a fix (``weighing``)."""

from orchestrator.verdicts.flagship import checkpoint, draft_evidence, facts, serving, weighing

__all__ = ["checkpoint", "draft_evidence", "facts", "serving", "weighing"]
