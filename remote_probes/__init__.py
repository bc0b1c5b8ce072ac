"""Probe scripts pushed to target hosts and run with the host's own python, as one package on both sides.

The whole package is pushed as one content-addressed tree (``orchestrator.probes.PUSH_PATTERN``) and runs there as
the package it is here: the pushed root is on ``sys.path``, a probe runs as ``python3 -m remote_probes.ROLE.NAME``
(or forked by the agent from its compiled file), and every module imports every other one by its absolute name
(``from remote_probes.evaluation.interval_stats import mean_interval``), here and on the host alike.

By role, each package importing only the ones listed after it (import-linter holds the order, pyproject.toml):

- ``fixes/``: the fix derived from the evidence (``draft_fix``: corrected flags and a corrected draft beside it);
- ``evaluation/``: the standalone draft test, its counterfactuals, the reconcile, and the interval statistics;
- ``checks/``: the static checks of a draft (``draft_inspect``: the checkpoint and config against the format, the
  target and what the installed engine loads) and whether a draft test can run it here;
- ``draft_reading/``: the draft's config as the installed engine's EAGLE-3 class reads it, field by field (its
  source parsed, never imported) against the checkpoint and the target: what each field does and the fix;
- ``engine/``: the installed engine read without importing it (its source by symbol or pattern, its flag parser,
  its model registry, where it captures the draft's hidden states) and its HTTP server (``server_client``);
- ``eagle3/``: the EAGLE-3 format (checkpoint, config, the draft's forward pass, wiring, what each engine serves);
- ``agent/``: the per-session agent that runs probes without a Python start (``agent.py``), the probe protocol
  (``protocol.py``: ``run_probe(main)``, the result markers, progress lines), and the host's environment
  (``env_info``).

``agent/probes.py`` names the scripts the orchestrator runs by name (each ends in ``run_probe(main)`` and answers one
typed result: ``orchestrator.probes.PROBES``; ``server_client`` one per call) and the role package that holds each;
the rest are libraries.
tests/probes/test_probe_layout.py holds the layout to this.
"""

from __future__ import annotations

ROLES = ("agent", "eagle3", "engine", "draft_reading", "checks", "evaluation", "fixes")
