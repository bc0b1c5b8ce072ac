"""The end-of-run secrets scan (tests/conftest.py) finds a leak wherever a session can hold one: a log, an output
file, a report, a screenshot, an archive member, a committed snapshot. Without this, a scan that looked in the
wrong place would pass forever."""

from __future__ import annotations

import io
import tarfile
import tempfile
from pathlib import Path

from tests.planted_secrets import PRINTED_HF_TOKEN, TUI_VAR, scan_everything


def test_the_scan_finds_each_kind_of_leak() -> None:
    # Outside pytest's temporary root: the end-of-run scan would rightly fail on these planted leaks.
    with tempfile.TemporaryDirectory(prefix="orch-scan-") as tmp:
        _check_leaks_found(Path(tmp))


def _check_leaks_found(tmp_path: Path) -> None:
    session = tmp_path / "run" / "sessions" / "20260101T000000Z-x"
    (session / "outputs").mkdir(parents=True)
    (session / "events.jsonl").write_text('{"type":"session_started"}\n', encoding="utf-8")
    (session / "outputs" / "s1.localhost.log").write_text(f"head {TUI_VAR[:10]}", encoding="utf-8")  # a split one
    (session / "report.html").write_text(f"<p>{TUI_VAR}</p>", encoding="utf-8")
    (tmp_path / "shot.screenshot.svg").write_text(f"<svg>{TUI_VAR}</svg>", encoding="utf-8")
    with tarfile.open(tmp_path / "x.tar.gz", "w:gz") as tar:
        data = PRINTED_HF_TOKEN.encode()  # allowed in a log, never in an export
        info = tarfile.TarInfo("x/events.jsonl")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    snapshots = tmp_path / "snaps" / "test_x"
    snapshots.mkdir(parents=True)
    (snapshots / "a.svg").write_text(TUI_VAR, encoding="utf-8")
    leaks, counts = scan_everything(tmp_path, snapshots=tmp_path / "snaps")
    places = sorted(Path(leak.where.split("!")[0]).name for leak in leaks)
    assert places == ["a.svg", "report.html", "s1.localhost.log", "shot.screenshot.svg", "x.tar.gz"], leaks
    assert counts == {"sessions": 1, "archives": 1, "snapshots": 2}
    # and a clean tree is clean
    assert scan_everything(tmp_path / "run" / "nothing", snapshots=tmp_path / "none") == ([], {
        "sessions": 0, "archives": 0, "snapshots": 0})
