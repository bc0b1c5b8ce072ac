"""Which scripts are probes, and where each lives in the pushed tree: the agent finds a probe's file by its name here
(stdlib only: it runs on the host), and the orchestrator finds the module it runs with ``python -m``."""

from __future__ import annotations

import os

#: probe name -> the role package that holds it
PROBES = {
    "draft_fix": "fixes", "draft_inspect": "checks", "draft_reconcile": "evaluation", "draft_test": "evaluation",
    "env_info": "agent", "server_client": "engine", "sglang_flags": "engine", "sglang_source": "engine",
    "states_plan": "evaluation", "target_capture": "engine",
}
#: data files a probe reads beside it (pushed with the modules)
DATA = ("evaluation/draft_test_prompts.json",)
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # remote_probes/


def probe_path(name: str, package_dir: str = PACKAGE_DIR) -> str | None:
    """The file of the probe ``name`` (a probe of ``PROBES``, or one a test placed in any sub-package of the pushed
    tree); None when there is none. A name is a plain identifier: it never reaches outside the package."""
    if not name.replace("_", "").isalnum() or name.startswith("_"):
        return None
    roles = [PROBES[name]] if name in PROBES else sorted(os.listdir(package_dir))
    for role in roles:
        path = os.path.join(package_dir, role, name + ".py")
        if os.path.isfile(path):
            return path
    return None
