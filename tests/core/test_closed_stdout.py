"""A reader that stops reading never ends the investigation (issue 41): ``orchestrator run ... | head -1`` closes the
pipe after the first line; the run goes on to the end, every step ok, the session log and report complete, exit 0,
no traceback and no process left; the same with ``--json``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.core.conftest import subprocess_env


@pytest.mark.parametrize("json_lines", [False, True])
def test_a_closed_stdout_leaves_a_complete_session(json_lines: bool, tmp_path: Path, local_inventory: Path) -> None:
    steps = "\n".join(f"  - name: step {i}\n    shell: echo line {i}" for i in range(8))
    (tmp_path / "pb.yaml").write_text(f"name: piped\nhosts: localhost\nsteps:\n{steps}\n"
                                      f"always:\n  - name: last\n    shell: touch {tmp_path}/last\n", encoding="utf-8")
    read, write = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "pb.yaml", "-i", str(local_inventory),
                             "--sessions-dir", "sessions", *(["--json"] if json_lines else [])],
                            cwd=tmp_path, env=subprocess_env(), stdout=write, stderr=subprocess.PIPE, text=True)
    os.close(write)
    with os.fdopen(read) as reader:  # `| head -1`: one line, then the reading end is closed
        assert reader.readline()
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    [session] = list((tmp_path / "sessions").iterdir())
    events = [json.loads(line) for line in (session / "events.jsonl").read_text().splitlines()]
    finished = [e for e in events if e["type"] == "step_finished"]
    assert len(finished) == 9 and {e["status"] for e in finished} == {"ok"}
    assert events[-1]["type"] == "session_finished" and events[-1]["status"] == "ok"
    assert (session / "report.md").exists() and (tmp_path / "last").exists()
