"""Probe scripts pushed to target hosts and run with the host's own python.

This package exists so an installed orchestrator can find the scripts (and import the libraries it shares with
them); on the remote side each file runs as a plain script (``python3 NAME.py``) next to its siblings, never as a
package. The whole directory is pushed as one content-addressed tree (``orchestrator.probes.PUSH_PATTERN``), so
the three kinds of file below live side by side: a probe imports its libraries as siblings.

- **runtime** (``RUNTIME``, the ``_``-prefixed files): the probe protocol (``_probe.py``: ``run_probe(main)``, the
  result markers, progress lines) and the per-session agent that runs probes without a Python start
  (``_agent.py``).
- **probes** (``PROBES``): the scripts the orchestrator runs by name, each ending in ``run_probe(main)`` and
  answering one typed result (``orchestrator.probes.PROBES``; ``server_client`` one per call).
- **libraries** (``LIBRARIES``): what the probes share, never run on their own; the orchestrator imports some of
  them too (the lab server, the intervals).

One import style: a sibling is imported by its flat name (``from interval_stats import mean_interval``), which is
how it resolves on the host. A module the orchestrator also imports as ``remote_probes.NAME`` (and every module it
imports) writes that import in the one package-safe form, relative first, flat as the fallback::

    if TYPE_CHECKING:  # the checker reads the package
        from ._probe import ProbeFailure
    else:
        try:  # imported as part of the remote_probes package (the orchestrator, the lab server) ...
            from ._probe import ProbeFailure
        except ImportError:  # ... or as a sibling script on the remote host
            from _probe import ProbeFailure

tests/probes/test_probe_layout.py checks the three lists against the files and the import style.
"""

RUNTIME = ("_agent", "_probe")
PROBES = ("draft_fix", "draft_inspect", "draft_reconcile", "draft_test", "env_info", "server_client", "sglang_flags",
          "sglang_source", "target_capture")
LIBRARIES = ("draft_agreement", "draft_counterfactual", "draft_findings", "draft_fix_d2t", "draft_fix_parts",
             "draft_fix_vllm", "draft_runnable", "draft_test_metrics", "eagle3_checkpoint", "eagle3_config", "eagle3_draft",
             "eagle3_served", "eagle3_validate", "eagle3_wiring", "engine_registry", "interval_stats",
             "sglang_argparse", "sglang_capture", "source_address", "thread_safe_ast", "vllm_capture")
DATA = ("draft_test_prompts.json",)  # read by draft_test beside it
