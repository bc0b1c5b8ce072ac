"""`orchestrator sessions export` / `import` (issue 19): a real session, exported with secrets masked again and
paths anonymised, imported on "another machine" (another directory), then reported, shown and replayed in the TUI;
hostile or damaged archives are refused with a clear error and leave nothing behind."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import SessionError
from orchestrator.session.reader import read_session
from orchestrator.session.sanitise import Sanitiser, local_path_prefixes
from orchestrator.session.share import MANIFEST, ExportSummary, export_session, import_session
from tests.planted_secrets import (
    EXPORTER_SHELL_TOKEN,
    NEVER_EXPORTED,
    PRINTED_HF_TOKEN,
    SHARE_ENV,
    SHARE_VAR,
    scan_archive,
)

PLAYBOOK = f"""name: share me
hosts: localhost
vars:
  token: {{secret: true, value: "{SHARE_VAR}"}}
hypotheses:
  - id: seen
    title: The step sees its own directory
steps:
  - name: where am I
    shell:
      command: |
        echo "token={{{{ token }}}} env=$SHARE_API_KEY"
        echo "cwd=$PWD home=$HOME"
        echo "printed {PRINTED_HF_TOKEN}"
        echo "shell=$SHELL_PRINTED_VALUE"
        echo "launch: python -m sglang.launch_server --api-key sk-not-a-known-secret-12345"
      env: {{SHARE_API_KEY: "{SHARE_ENV}"}}
    register: where
    evidence:
      seen: {{confirm_if: "where.rc == 0", because: "it printed its cwd"}}
"""


def export(directory: Path, archive: Path, **options: Any) -> ExportSummary:
    """``export_session`` as the exporter's shell would run it: a secret-named variable in its environment."""
    return export_session(directory, archive, env={"EXPORTER_TOKEN": EXPORTER_SHELL_TOKEN}, **options)


def members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive, "r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


@pytest.fixture
def recorded(cli, tmp_path: Path, local_inventory: Path) -> Path:
    """A real session: run by `python -m orchestrator run` in tmp_path, secrets known and unknown to it."""
    (tmp_path / "pb.yaml").write_text(PLAYBOOK, encoding="utf-8")
    # SHELL_PRINTED_VALUE is a plain name: the run cannot know its value is a secret.
    proc = cli("run", "pb.yaml", "-i", str(local_inventory), "--sessions-dir", "sessions",
               SHELL_PRINTED_VALUE=EXPORTER_SHELL_TOKEN)
    assert proc.returncode == 0, proc.stderr
    [session] = (tmp_path / "sessions").iterdir()
    log = (session / "events.jsonl").read_text(encoding="utf-8")
    # The premise: the log masks what the run knew, and holds what it could not know.
    assert SHARE_VAR not in log and SHARE_ENV not in log
    assert PRINTED_HF_TOKEN in log and EXPORTER_SHELL_TOKEN in log and str(tmp_path) in log
    return session


def test_round_trip_report_show_and_tui_replay(cli, recorded: Path, tmp_path: Path) -> None:
    archive = tmp_path / "share.tar.gz"
    # The exporter's shell holds the token under a secret-looking name: the export masks its value everywhere.
    proc = cli("sessions", "export", "last", "--sessions-dir", "sessions", "-o", str(archive), "--anonymise-paths",
               EXPORTER_TOKEN=EXPORTER_SHELL_TOKEN)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(archive)
    assert "masked by the export scan" in proc.stderr and "anonymised" in proc.stderr

    files = members(archive)
    name = recorded.name
    assert set(files) == {MANIFEST, f"{name}/events.jsonl", f"{name}/outputs/s1.localhost.log",
                          f"{name}/report.md", f"{name}/report.html"}
    assert scan_archive(archive, NEVER_EXPORTED) == []
    everything = b"".join(files.values()).decode()
    assert str(tmp_path) not in everything and str(Path.home()) + "/" not in everything
    assert "cwd=<cwd> home=~" in everything and "--api-key ***" in everything
    manifest = json.loads(files[MANIFEST])
    assert manifest["anonymised_paths"] and manifest["masked_by_export"] >= 3 and manifest["status"] == "ok"

    # "Another machine": another directory, another sessions root.
    elsewhere = tmp_path / "colleague"
    elsewhere.mkdir()
    proc = cli("sessions", "import", str(archive), "--sessions-dir", str(elsewhere / "sessions"))
    assert proc.returncode == 0, proc.stderr
    imported = Path(proc.stdout.strip())
    assert imported == elsewhere / "sessions" / name and f"tui --replay {name}" in proc.stderr
    assert sorted(p.name for p in (elsewhere / "sessions").iterdir()) == [name]  # no staging left

    original, copy = read_session(recorded), read_session(imported)
    assert [(e.seq, e.type) for e in copy.events] == [(e.seq, e.type) for e in original.events]
    assert not copy.incomplete and copy.finished is not None and copy.finished.status == "ok"

    proc = cli("report", name, "--sessions-dir", str(elsewhere / "sessions"), "--stdout")
    assert proc.returncode == 0 and "Postmortem: share me" in proc.stdout and "confirmed" in proc.stdout
    assert "cwd=<cwd>" in proc.stdout and PRINTED_HF_TOKEN not in proc.stdout
    proc = cli("sessions", "show", name, "--sessions-dir", str(elsewhere / "sessions"))
    assert proc.returncode == 0 and "where am I" in proc.stdout

    # The same import again is refused, and --name imports beside it.
    proc = cli("sessions", "import", str(archive), "--sessions-dir", str(elsewhere / "sessions"))
    assert proc.returncode == 2 and "already exists" in proc.stderr and "Traceback" not in proc.stderr
    proc = cli("sessions", "import", str(archive), "--sessions-dir", str(elsewhere / "sessions"), "--name", "copy2")
    assert proc.returncode == 0 and read_session(elsewhere / "sessions" / "copy2").finished is not None


async def test_imported_session_replays_in_the_tui(recorded: Path, tmp_path: Path) -> None:
    from orchestrator.tui.app import OrchestratorApp
    from orchestrator.tui.screens.replay import ReplayScreen

    archive = tmp_path / "s.tgz"
    export(recorded, archive, anonymise_paths=True)
    summary = import_session(archive, tmp_path / "elsewhere")
    loaded = read_session(summary.directory)
    app = OrchestratorApp(replay=loaded)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        screen = pilot.app.screen
        assert isinstance(screen, ReplayScreen) and screen.session.name == recorded.name
        panes = screen.query_one("#panes")
        assert panes.model.status == "ok" and panes.model.steps["s1"].status == "ok"
        assert panes.model.board.entries["seen"].state == "confirmed"
        await pilot.press("home")
        assert panes.model.steps["s1"].status == "pending"
        (summary.directory / "replay.screenshot.svg").write_text(app.export_screenshot(), encoding="utf-8")
        await pilot.press("q")


def test_without_anonymising_paths_stay(recorded: Path, tmp_path: Path) -> None:
    archive = tmp_path / "plain.tar.gz"
    summary = export(recorded, archive)
    log = members(archive)[f"{recorded.name}/events.jsonl"].decode()
    assert str(tmp_path) in log and summary.anonymised == 0  # the option is what removes them
    assert PRINTED_HF_TOKEN not in log and summary.masked >= 2  # masking is not optional


def test_a_killed_session_exports_and_reports_incomplete(recorded: Path, tmp_path: Path, cli) -> None:
    log = recorded / "events.jsonl"
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    log.write_text("".join(lines[:-2]) + lines[-2][: len(lines[-2]) // 2], encoding="utf-8")  # torn, no finish
    archive = tmp_path / "killed.tar.gz"
    export(recorded, archive)
    assert json.loads(members(archive)[MANIFEST])["incomplete"] is True
    summary = import_session(archive, tmp_path / "other")
    assert any("torn" in p for p in summary.problems)
    proc = cli("report", str(summary.directory), "--stdout")
    assert proc.returncode == 0 and "did not finish" in proc.stdout and "Incomplete record" in proc.stdout


def _archive(path: Path, entries: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _manifest(files: dict[str, bytes], **over: object) -> tuple[tarfile.TarInfo, bytes]:
    import hashlib

    body = {"format": "orchestrator-session-export", "format_version": 1, "session": "s",
            "files": {k: {"size": len(v), "sha256": hashlib.sha256(v).hexdigest()} for k, v in files.items()},
            **over}
    return _file(MANIFEST, json.dumps(body).encode())


LOG = b'{"schema_version":1,"seq":1,"ts":1.0,"type":"session_started","session_id":"s","playbook":"p"}\n'


def _link(name: str, target: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info, None


HOSTILE = {
    "escape": ([_manifest({"events.jsonl": LOG}), _file("s/events.jsonl", LOG), _file("s/../../evil", b"x")],
               "outside the session's folder"),
    "absolute": ([_manifest({"events.jsonl": LOG}), _file("s/events.jsonl", LOG), _file("/tmp/evil", b"x")],
                 "outside the session's folder"),
    "symlink": ([_manifest({"events.jsonl": LOG}), _file("s/events.jsonl", LOG), _link("s/outputs", "/etc")],
                "only files and folders"),
    "edited": ([_manifest({"events.jsonl": LOG}), _file("s/events.jsonl", LOG.replace(b"p", b"q"))],
               "does not match the manifest's hash"),
    "unlisted": ([_manifest({"events.jsonl": LOG}), _file("s/events.jsonl", LOG), _file("s/extra", b"x")],
                 "not the file the manifest lists"),
    "newer": ([_manifest({"events.jsonl": LOG}, format_version=99), _file("s/events.jsonl", LOG)],
              "newer than this orchestrator reads"),
    "no manifest": ([_file("s/events.jsonl", LOG)], "no orchestrator-export.json"),
    "no log": ([_manifest({}), _file("s/report.md", b"")], "not the file the manifest lists"),
    "bad name": ([_manifest({"events.jsonl": LOG}, session="../up"), _file("s/events.jsonl", LOG)],
                 "lacks a valid session name"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_or_damaged_archive_is_refused_and_leaves_nothing(tmp_path: Path, case: str) -> None:
    entries, expected = HOSTILE[case]
    archive = _archive(tmp_path / "bad.tar.gz", entries)
    root = tmp_path / "root"
    with pytest.raises(SessionError, match=expected):
        import_session(archive, root)
    assert not root.exists() or list(root.iterdir()) == []
    assert not (tmp_path / "evil").exists() and not Path("/tmp/evil").exists()


def test_truncated_archive_is_a_clear_error(recorded: Path, tmp_path: Path, cli) -> None:
    archive = tmp_path / "whole.tar.gz"
    export(recorded, archive)
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    proc = cli("sessions", "import", str(cut), "--sessions-dir", "imported")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "damaged archive" in proc.stderr or "not a session export" in proc.stderr
    assert not (tmp_path / "imported").exists() or list((tmp_path / "imported").iterdir()) == []


def test_export_errors_are_user_errors(cli, recorded: Path, tmp_path: Path) -> None:
    proc = cli("sessions", "export", "last", "--sessions-dir", "sessions", "-o", "x.zip")
    assert proc.returncode == 2 and ".tar.gz" in proc.stderr
    proc = cli("sessions", "export", "last", "--sessions-dir", "sessions", "-o", "no/such/dir/x.tar.gz")
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    proc = cli("sessions", "export", "last", "--sessions-dir", "sessions", "--secret-env", "UNSET_VAR_19")
    assert proc.returncode == 2 and "not set" in proc.stderr
    assert not list(tmp_path.glob("*.tar.gz*"))  # nothing half-written


@pytest.mark.parametrize(("text", "expected"), [
    ("cd /home/ann/work/x && ls /home/ann", "cd <cwd>/x && ls ~"),
    ("/home/annex stays, /home/ann.bak stays", "/home/annex stays, /home/ann.bak stays"),
    ("HF_TOKEN=abcdef123 MAX_NEW_TOKENS=2048", "HF_TOKEN=*** MAX_NEW_TOKENS=2048"),
    ("Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic ***"),
    ("curl -H 'Bearer abc.def.ghi'", "curl -H 'Bearer ***'"),
    ("key AKIAABCDEFGHIJKLMNOP end", "key *** end"),
    ("git at 3f2a9c1d4e5b6a7980112233445566778899aabb", "git at 3f2a9c1d4e5b6a7980112233445566778899aabb"),
])
def test_sanitiser_masks_shapes_and_anonymises_whole_path_components(text: str, expected: str) -> None:
    sanitiser = Sanitiser()
    sanitiser.set_paths(local_path_prefixes(session_dir=Path("/srv/s/x"), cwd=Path("/home/ann/work"),
                                            home=Path("/home/ann")))
    assert sanitiser.text(text) == expected


def test_sanitiser_masks_values_under_secret_keys_only() -> None:
    sanitiser = Sanitiser()
    data = {"flags": {"api-key": "plain-value", "max-new-tokens": "2048", "secret_env": ["HF_TOKEN"]}}
    assert sanitiser.deep(data) == {"flags": {"api-key": "***", "max-new-tokens": "2048", "secret_env": ["HF_TOKEN"]}}
    assert sanitiser.masked == 1
