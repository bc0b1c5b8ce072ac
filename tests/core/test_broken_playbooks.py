"""The broken-playbook corpus: each file in broken/ says, in `# expect: LINE:COL: substring` header lines,
which located errors the loader must report. Every expected error must appear at exactly that place, and
every reported error must be one the file expects (no noise, no duplicates at other places)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.errors import PlaybookError, PlaybookErrors
from orchestrator.playbook.loader import load_playbook

BROKEN = Path(__file__).parent / "broken"
CASES = sorted(BROKEN.glob("*.yaml"))
EXPECT = re.compile(r"^# expect: (\d+):(\d+): (.+?)\s*$")


def expectations(path: Path) -> list[tuple[int, int, str]]:
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        match = EXPECT.match(line)
        if match:
            found.append((int(match.group(1)), int(match.group(2)), match.group(3)))
    return found


def reported(path: Path) -> list[PlaybookError]:
    with pytest.raises((PlaybookError, PlaybookErrors)) as info:
        load_playbook(path)
    exc = info.value
    return list(exc.errors) if isinstance(exc, PlaybookErrors) else [exc]


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 24
    for path in CASES:
        assert expectations(path), f"{path.name} has no '# expect: LINE:COL: text' header"


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_broken_playbook_reports_located_error(path: Path) -> None:
    errors = reported(path)
    for error in errors:
        assert error.location is not None, f"unlocated error: {error.message}"
        assert error.location.file == str(path)
        # The rendered message is what users and editors see: file:line:col: message, on one line.
        assert error.message == f"{path}:{error.location.line}:{error.location.col}: {error.bare_message}"
        assert "\n" not in error.message
        assert "Traceback" not in error.message
    got = [(e.location.line, e.location.col, e.bare_message) for e in errors if e.location]
    for line, col, text in expectations(path):
        assert any(gl == line and gc == col and text in msg for gl, gc, msg in got), (
            f"{path.name}: expected {line}:{col}: ...{text}...\n got: {got}")
    expected_places = {(line, col) for line, col, _ in expectations(path)}
    unexpected = [g for g in got if (g[0], g[1]) not in expected_places]
    assert not unexpected, f"{path.name}: errors nobody expected: {unexpected}"


CLI_CASES = ["yaml_tab.yaml", "multiple_errors.yaml", "top_not_mapping.yaml", "undefined_var_evidence.yaml"]


def assert_located_lines(path: Path, proc) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = proc.stderr.splitlines()
    for line, col, text in expectations(path):
        # Each error is one whole `file:line:col: message` line, however long (editors jump to it).
        assert any(ln.startswith(f"{path}:{line}:{col}: ") and text in ln for ln in lines), proc.stderr


@pytest.mark.parametrize("name", CLI_CASES)
def test_cli_reports_corpus_errors_with_exit_2(cli_inproc, local_inventory: Path, name: str) -> None:
    path = BROKEN / name
    for command in ("validate", "run"):
        assert_located_lines(path, cli_inproc(command, str(path), "-i", str(local_inventory)))


def test_cli_subprocess_reports_errors_with_exit_2(cli, local_inventory: Path) -> None:
    path = BROKEN / "multiple_errors.yaml"
    assert_located_lines(path, cli("run", str(path), "-i", str(local_inventory), "-v"))


def test_rejected_run_creates_no_session(cli_inproc, tmp_path: Path, local_inventory: Path) -> None:
    proc = cli_inproc("run", str(BROKEN / "two_actions.yaml"), "-i", str(local_inventory), "--sessions-dir", "s")
    assert proc.returncode == 2
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").iterdir())


def test_missing_file_is_exit_2_not_traceback(cli_inproc, tmp_path: Path, local_inventory: Path) -> None:
    proc = cli_inproc("validate", str(tmp_path / "nope.yaml"), "-i", str(local_inventory))
    assert proc.returncode == 2
    assert "file not found" in proc.stderr


def test_binary_file_is_exit_2_not_traceback(cli_inproc, tmp_path: Path, local_inventory: Path) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"name: x\nsteps: []\n\xff\xfe\x00bad")
    proc = cli_inproc("validate", str(path), "-i", str(local_inventory))
    assert proc.returncode == 2, proc.stderr
    assert "cannot read" in proc.stderr
