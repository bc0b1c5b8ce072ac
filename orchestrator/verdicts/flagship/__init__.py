"""The flagship's (playbooks/eagle3.yaml) verdict rules and facts, by the experiment they weigh: the servers and their
benchmarks (``serving``), the static reads of the checkpoint and the engine's source (``checkpoint``), the draft test,
its counterfactuals and the reconcile (``draft_evidence``), the final weighing of a fix (``weighing``), and the
user's own traffic replayed (``traffic``)."""

from orchestrator.verdicts.flagship import checkpoint, draft_evidence, facts, serving, traffic, weighing

__all__ = ["checkpoint", "draft_evidence", "facts", "serving", "traffic", "weighing"]
