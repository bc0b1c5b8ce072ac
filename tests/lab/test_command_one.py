"""Command 1 as a new user runs it (issue 41): `orchestrator run playbooks/eagle3.yaml`, no inventory (the embedded
lab), sessions in the default relative ./sessions, its output piped into `head -1`. The closed pipe ends the showing,
never the investigation: exit 0, a complete session with its verdict, every lab server stopped (no process left);
and report.html, opened in a real headless Chromium, shows every chart the Markdown report links, as decoded images
(the page's document.images), not as HTML text."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from orchestrator.lab.building.build import LabPaths
from tests.browser import chromium, open_page
from tests.core.conftest import subprocess_env
from tests.servers.conftest import processes_with

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.lab
@pytest.mark.timeout(600)
def test_command_one_piped_into_head_ends_complete_and_its_page_shows_every_chart(lab: LabPaths,
                                                                                  tmp_path: Path) -> None:
    chromium()  # a missing browser says so before the minute of the run
    marker = f"ORCH_TEST_COMMAND_ONE={uuid.uuid4().hex}"  # every process the run starts inherits it
    key, value = marker.split("=")
    env = subprocess_env(ORCHESTRATOR_LAB_DIR=str(lab.root), **{key: value})
    read, write = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(REPO / "playbooks" / "eagle3.yaml")],
                            cwd=tmp_path, env=env, stdout=write, stderr=subprocess.PIPE, text=True)
    os.close(write)
    with os.fdopen(read) as head:  # `| head -1`
        assert head.readline()
    _out, err = proc.communicate(timeout=540)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-3000:]
    assert processes_with(marker) == []

    [session] = list((tmp_path / "sessions").iterdir())  # the default, relative to where the user stands
    events = [json.loads(line) for line in (session / "events.jsonl").read_text().splitlines()]
    assert events[-1]["type"] == "session_finished" and events[-1]["status"] == "ok", events[-1]
    markdown = (session / "report.md").read_text()
    linked = re.findall(r"!\[[^\]]*\]\((artifacts/[^)]+\.svg)\)", markdown)
    assert linked and all((session / chart).is_file() for chart in linked), linked

    page = open_page(session / "report.html", screenshot=tmp_path / "report.png")
    assert len(page.images) == len(linked), (page.images, linked)
    assert all(image.shown for image in page.images), page.images
    assert not re.search(r"chart “[^”]+” missing", page.text), page.text[:2000]
    assert (tmp_path / "report.png").stat().st_size > 10_000  # a full page drawn, not a blank one
