"""The agent's warm interpreter (remote_probes/agent/agent.py, Zygote): a torch probe's call through it against the same
call in a plain fork of the agent (``isolate``), interleaved in one run so load drift hits both alike.

    .venv/bin/python bench/warm_agent.py [--repeat 8]

On the local transport, with the real agent and a probe that imports what draft_test imports first (its own preload
line: torch and transformers' Llama/Qwen3 modeling code) and returns. Prints, per mode, the median call time with
its min and max, the paired difference's median, and the first warm call (it waits for the zygote's import), with
the load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

from orchestrator.probes import new_nonce, parse_probe_output, probes_dir  # noqa: E402
from orchestrator.transport.local import LocalTransport  # noqa: E402
from remote_probes.agent import agent as _agent  # noqa: E402

PROBE = '''{preload}
import os, sys
PRELOADED = "torch" in sys.modules
import torch
import transformers.models.llama.modeling_llama
from transformers import AutoModelForCausalLM, AutoTokenizer
from remote_probes.agent.protocol import run_probe

def main(args):
    return {{"preloaded": PRELOADED, "threads": torch.get_num_threads()}}

if __name__ == "__main__":
    run_probe(main)
'''


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=8)
    opts = parser.parse_args()
    draft_test = probes_dir() / "evaluation" / "draft_test.py"
    preload = "# orchestrator-agent: preload " + " ".join(
        _agent.read_script("draft_test.py", draft_test.read_bytes()).preload)
    with tempfile.TemporaryDirectory() as tmp:
        probes = Path(tmp) / "remote_probes"  # the product's package, the bench's probe in a package of its own
        shutil.copytree(probes_dir(), probes, ignore=shutil.ignore_patterns("__pycache__"))
        (probes / "bench").mkdir()
        (probes / "bench" / "__init__.py").write_text("")
        (probes / "bench" / "torch_probe.py").write_text(PROBE.format(preload=preload))
        transport = LocalTransport("localhost", state_dir=str(Path(tmp) / "state"), session_id="warm-bench")
        env = {"OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
        try:
            remote = await transport.put_tree(probes, pattern="*.py")
            agent = await transport.agents.get(sys.executable, remote)
            assert agent is not None, transport.agents.unavailable

            async def timed(isolate: bool) -> float:
                nonce = new_nonce()
                started = time.perf_counter()
                run = await agent.run_probe("torch_probe", {}, nonce=nonce, env=env, isolate=isolate)
                took = time.perf_counter() - started
                outcome = parse_probe_output(run.stdout, nonce, exit_status=run.exit_code, stderr=run.stderr)
                assert outcome.ok and outcome.result is not None, (outcome.error, run.stderr[-1000:])
                assert outcome.result["preloaded"] is (not isolate), outcome.result
                return took

            before = loadavg()
            first = await timed(False)
            warm, plain = [], []
            for _ in range(opts.repeat):
                plain.append(await timed(True))
                warm.append(await timed(False))
            after = loadavg()
        finally:
            await transport.close()
    diffs = [p - w for p, w in zip(plain, warm, strict=True)]
    print(f"load average {before} -> {after}; {opts.repeat} calls each, interleaved")
    print(f"first warm call (waits for the import): {first:.2f}s")
    for name, values in (("plain fork", plain), ("warm", warm)):
        print(f"{name:>11}: median {statistics.median(values):.3f}s  [min {min(values):.3f}, max {max(values):.3f}]")
    print(f"paired saving per call: median {statistics.median(diffs):.3f}s  [min {min(diffs):.3f}, max {max(diffs):.3f}]")


if __name__ == "__main__":
    asyncio.run(main())
