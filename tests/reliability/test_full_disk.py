"""A full disk under the session log (issue 19): a real tmpfs of 48 KiB, a real `orchestrator run` whose output
fills it. The run stops cleanly (the running step cancelled, `always:` still run, exit 130) with a message that
says why; the log is cut back to its last whole event (no torn line), reads as unfinished, and every report
is whole or absent, never a truncated file that looks like one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.session.reader import read_session
from tests import realparts

PLAYBOOK = """name: full disk
hosts: localhost
steps:
  - name: chatty
    shell: "for i in $(seq 1 3000); do echo line $i of output that fills the small disk; done"
  - name: after
    shell: "touch {tmp}/after"
always:
  - name: tidy
    shell: "touch {tmp}/tidy"
"""


@pytest.fixture
def tiny_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0:
        realparts.missing("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(mount)], capture_output=True, text=True)
    realparts.require(done.returncode == 0, f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_stops_the_run_cleanly(cli, tmp_path: Path, local_inventory: Path, tiny_disk: Path) -> None:
    (tmp_path / "pb.yaml").write_text(PLAYBOOK.format(tmp=tmp_path), encoding="utf-8")
    proc = cli("run", "pb.yaml", "-i", str(local_inventory), "--sessions-dir", str(tiny_disk / "sessions"))
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "No space left on device" in proc.stderr and "stopping the run" in proc.stderr
    assert (tmp_path / "tidy").exists() and not (tmp_path / "after").exists()  # always: ran; the rest did not
    [session] = (tiny_disk / "sessions").iterdir()
    loaded = read_session(session)
    assert loaded.torn_lines == 0 and loaded.malformed == []  # cut back to the last whole event
    assert loaded.finished is None and loaded.incomplete
    assert not list(session.glob("*.part"))
    for name in ("report.md", "report.html"):
        path = session / name
        if path.exists():  # the cut freed room: then it must be whole
            text = path.read_text(encoding="utf-8")
            assert "did not finish" in text and (name == "report.md" or text.rstrip().endswith("</html>"))
