"""The tool as its users install it: the wheel and sdist hold everything the product runs, and a wheel installed
(not editable) into a fresh venv outside the checkout runs the bundled flagship against the lab from an empty
directory. The wheel is built from the sdist, so a file the sdist leaves out fails here too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from orchestrator.hypotheses.board import HypothesisBoard
from orchestrator.session.reader import read_session
from tests import realparts

ROOT = Path(__file__).resolve().parents[2]
PROBE_PACKAGES = sorted(str(p.parent.relative_to(ROOT)) for p in (ROOT / "remote_probes").rglob("__init__.py"))
BUNDLED = sorted(p.name for p in (ROOT / "orchestrator" / "playbooks").iterdir())

pytestmark = [pytest.mark.slow, pytest.mark.torch, pytest.mark.xdist_group("installed_wheel")]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    realparts.importorskip("build", reason="the build frontend is not installed (pip install -e '.[test]')")
    out = tmp_path_factory.mktemp("dist")
    # no isolation: the venv's setuptools (the build-system's requirement, pinned by the test extra) builds offline
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_the_wheel_and_sdist_hold_every_probe_package_and_the_bundled_playbooks(dist: Path) -> None:
    wheel = zipfile.ZipFile(next(dist.glob("*.whl"))).namelist()
    sdist_tar = tarfile.open(next(dist.glob("*.tar.gz")))
    sdist = {name.split("/", 1)[1] for name in sdist_tar.getnames() if "/" in name}
    for names, kind in ((set(wheel), "wheel"), (sdist, "sdist")):
        for package in PROBE_PACKAGES:
            assert f"{package}/__init__.py" in names, f"the {kind} lacks the probe package {package}"
        for name in BUNDLED:
            assert f"orchestrator/playbooks/{name}" in names, f"the {kind} lacks the bundled playbooks/{name}"
        assert "remote_probes/evaluation/draft_test_prompts.json" in names, f"the {kind} lacks the draft test's prompts"
        assert any(n.startswith("orchestrator/data/lab/") for n in names), f"the {kind} lacks the lab's shipped models"


@pytest.mark.timeout(1800)  # an install and a flagship run, on a busy 2-core CI machine
def test_an_installed_wheel_runs_the_flagship_by_name_from_an_empty_directory(dist: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    wheel = next(dist.glob("*.whl"))
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-compile", "-c",
                           str(ROOT / "constraints.txt"), f"{wheel}[lab]"], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        realparts.missing(f"pip could not install the wheel's dependencies (offline?): {done.stderr[-2000:]}")
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("ORCHESTRATOR_SESSIONS_DIR", "PYTHONPATH", "VIRTUAL_ENV", "ORCHESTRATOR_LAB_SCENARIO",
                        "ORCHESTRATOR_LAB_ENGINE")}
    env["ORCHESTRATOR_LAB_DIR"] = str(tmp_path / "lab")  # the installed tool builds its own lab
    tool = str(venv / "bin" / "orchestrator")

    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import orchestrator, remote_probes.agent; "
                            "print(orchestrator.__file__); print(remote_probes.agent.__file__)"],
                           cwd=empty, env=env, capture_output=True, text=True, check=True)
    for line in where.stdout.split():
        assert Path(line).is_relative_to(venv), f"imported from outside the installed venv: {line}"
    version = subprocess.run([tool, "--version"], cwd=empty, env=env, capture_output=True, text=True, check=True)
    assert version.stdout.strip() == "orchestrator 0.1.0"
    listed = subprocess.run([tool, "playbooks"], cwd=empty, env=env, capture_output=True, text=True, check=True)
    for name in ("eagle3", "tune", "sweep", "read-sglang", "cross-engine"):
        assert f"\n{name}" in f"\n{listed.stdout}", listed.stdout

    run = subprocess.run([tool, "run", "eagle3"], cwd=empty, env=env, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    sessions = list((empty / "sessions").iterdir())
    assert len(sessions) == 1, sessions
    session = read_session(sessions[0])
    board = HypothesisBoard.from_events(session.events)
    # the lab's default scenario is the seed's wiring fault: found and verified by the installed tool
    assert board.entries["wiring"].state == "confirmed", json.dumps(
        {k: e.state for k, e in board.entries.items()}, indent=1)
