"""Per-tool round trip of `orchestrator mcp` on the lab: read_source, exec, probe (env_info).

    .venv/bin/python bench/mcp_roundtrip.py [--runs 20] [--lab-dir DIR]

Starts `orchestrator mcp` as a real subprocess and speaks to it with the official SDK's client over stdio, as
an assistant would. For each tool it times N calls end to end (request out -> result back) and reports the
median and p90, beside the step's own duration as the engine recorded it: the difference is what MCP, the
session log and the redaction add around the work. The work itself is dominated today by the one-shot probe
start (a fresh python on the host per read/probe); the persistent-agent issue targets < 10 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# (label, tool, arguments). env_info imports torch on the host (versions, CUDA): seconds of the probe's own;
# draft_inspect is stdlib-only (safetensors headers), so it shows what a probe costs without torch.
CALLS: list[tuple[str, str, dict[str, Any]]] = [
    ("read_source", "read_source", {"package": "sglang", "file": "srt/speculative/eagle_worker.py", "address": "155,200"}),
    ("exec", "exec", {"argv": ["uname", "-a"]}),
    ("probe env_info", "probe", {"name": "env_info"}),
    ("probe draft_inspect", "probe", {"name": "draft_inspect"}),
]


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]


async def measure(runs: int, lab_dir: str | None) -> dict[str, tuple[list[float], list[float]]]:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_LAB_SCENARIO")}
    env["PYTHONPATH"] = str(REPO)
    if lab_dir:
        env["ORCHESTRATOR_LAB_DIR"] = lab_dir
    out: dict[str, tuple[list[float], list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        params = StdioServerParameters(command=sys.executable, env=env, cwd=tmp,
                                       args=["-m", "orchestrator", "mcp", "--sessions-dir", f"{tmp}/sessions"])
        with open(f"{tmp}/stderr", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as client:
                await client.initialize()
                for label, tool, arguments in CALLS:
                    await client.call_tool(tool, arguments)  # warm: first transport use, first probe push
                    trips, steps = [], []
                    for _ in range(runs):
                        started = time.perf_counter()
                        result = await client.call_tool(tool, arguments)
                        trips.append(time.perf_counter() - started)
                        assert not result.is_error and result.structured_content, result.content
                        assert result.structured_content["status"] == "ok", result.structured_content
                        steps.append(float(result.structured_content["duration"]))
                    out[label] = (trips, steps)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--lab-dir", default=os.environ.get("ORCHESTRATOR_LAB_DIR"),
                        help="a built lab (default: $ORCHESTRATOR_LAB_DIR, else the default lab)")
    args = parser.parse_args()
    results = asyncio.run(measure(args.runs, args.lab_dir))
    print(f"| tool | round trip p50 | p90 | step duration p50 | around the step p50 |  (n={args.runs})")
    print("|---|---:|---:|---:|---:|")
    for tool, (trips, steps) in results.items():
        trip, step = statistics.median(trips), statistics.median(steps)
        print(f"| {tool} | {trip * 1000:.1f} ms | {_p90(trips) * 1000:.1f} ms | {step * 1000:.1f} ms | "
              f"{(trip - step) * 1000:.1f} ms |")


if __name__ == "__main__":
    main()
