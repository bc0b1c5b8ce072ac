"""The CLI as users meet it: --help, validate, schema, run (exit codes 0/1/2, --json, -e), exec."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from orchestrator.cli import app
from tests import realparts
from tests.core.conftest import subprocess_env

OK = "name: fine\nhosts: localhost\nvars: {who: world}\nsteps:\n  - {name: greet, shell: 'echo hello {{ who }}'}\n"
FAILS = "name: fails\nhosts: localhost\nsteps:\n  - {name: bad, shell: 'exit 5'}\n  - {name: never, shell: 'echo no'}\n"


def only_session(root: Path) -> Path:
    sessions = [p for p in root.iterdir() if (p / "events.jsonl").exists()]
    assert len(sessions) == 1, sessions
    return sessions[0]


def test_help_as_subprocess(cli) -> None:
    proc = cli("--help")
    assert proc.returncode == 0, proc.stderr
    for command in ("run", "validate", "schema", "sessions", "report", "exec"):
        assert command in proc.stdout


def test_core_imports_no_ui_and_no_torch() -> None:
    code = ("import sys, orchestrator.runner, orchestrator.cli, orchestrator.session.recording; "
            "print(sorted(m for m in ('textual', 'torch', 'transformers') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_validate_ok_and_bad(cli, cli_inproc, tmp_path: Path, local_inventory: Path) -> None:
    (tmp_path / "ok.yaml").write_text(OK)
    proc = cli_inproc("validate", "ok.yaml", "-i", str(local_inventory))
    assert proc.returncode == 0, proc.stderr
    assert "is valid" in proc.stdout and "1 steps" in proc.stdout
    (tmp_path / "bad.yaml").write_text("name: bad\nsteps:\n  - shell: 'echo {{ nope }}'\n")
    proc = cli("validate", "bad.yaml", "-i", str(local_inventory))
    assert proc.returncode == 2
    assert "bad.yaml:3:12: undefined variable 'nope'" in proc.stderr and "Traceback" not in proc.stderr
    # A name the inventory or -e provides is known at validation time.
    assert cli_inproc("validate", "bad.yaml", "-i", str(local_inventory), "-e", "nope=1").returncode == 0


def test_schema_is_json_with_every_action(cli, cli_inproc, tmp_path: Path) -> None:
    proc = cli("schema")
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    variants = schema["$defs"]["step"]["oneOf"]
    kinds = {v["title"] for v in variants}
    assert {"shell", "set"} <= kinds
    shell = next(v for v in variants if v["title"] == "shell")
    assert shell["required"] == ["shell"] and "register" in shell["properties"] and "timeout" in shell["properties"]
    assert schema["properties"]["steps"]["items"] == {"$ref": "#/$defs/step"}
    assert cli_inproc("schema", "-o", "s.json").returncode == 0
    assert json.loads((tmp_path / "s.json").read_text()) == schema


def test_schema_validates_playbooks_when_jsonschema_is_available() -> None:
    import pytest

    jsonschema = realparts.importorskip("jsonschema")
    from orchestrator.playbook.schema import playbook_schema

    schema = playbook_schema()
    jsonschema.validate({"name": "x", "steps": [{"shell": "echo", "register": "r"}, {"set": {"a": 1}}]}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "x", "steps": [{"shell": "echo", "set": {"a": 1}}]}, schema)


def test_run_exit_codes_0_1_2(cli, cli_inproc, tmp_path: Path, local_inventory: Path) -> None:
    inv = ["-i", str(local_inventory), "--sessions-dir", "sessions"]
    (tmp_path / "ok.yaml").write_text(OK)
    (tmp_path / "fails.yaml").write_text(FAILS)
    ok = cli("run", "ok.yaml", *inv, "-v")
    assert ok.returncode == 0, ok.stderr
    assert "hello world" in ok.stdout and "✓" in ok.stdout
    fails = cli_inproc("run", "fails.yaml", *inv)
    assert fails.returncode == 1
    assert "exit code 5" in fails.stdout
    bad = cli_inproc("run", "ok.yaml", *inv, "-e", "not a pair")
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr and "Traceback" not in bad.stderr
    unknown_host = cli_inproc("run", "ok.yaml", "-i", str(local_inventory), "--host", "gpu-nowhere:notaport")
    assert unknown_host.returncode == 2 and "Traceback" not in unknown_host.stderr
    names = sorted(p.name.split("-", 1)[1] for p in (tmp_path / "sessions").iterdir())
    assert names == ["fails", "fine"]


def test_run_with_extra_vars_and_json(cli, cli_inproc, tmp_path: Path, local_inventory: Path) -> None:
    (tmp_path / "ok.yaml").write_text(OK)
    (tmp_path / "vars.yaml").write_text("who: file\n")
    proc = cli("run", "ok.yaml", "-i", str(local_inventory), "--sessions-dir", "sessions", "--json", "-e", "who=cli")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]  # nothing but JSON on stdout
    types = [e["type"] for e in events]
    assert types[0] == "session_started" and types[-1] == "session_finished" and "step_finished" in types
    assert "".join(e["text"] for e in events if e["type"] == "output") == "hello cli\n"
    logged = (only_session(tmp_path / "sessions") / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["seq"] for line in logged] == [e["seq"] for e in events]
    from_file = cli_inproc("run", "ok.yaml", "-i", str(local_inventory), "--sessions-dir", "s2", "-v", "-e", "@vars.yaml")
    assert from_file.returncode == 0 and "hello file" in from_file.stdout


def test_exec_records_a_session(cli, cli_inproc, tmp_path: Path, local_inventory: Path) -> None:
    proc = cli("exec", "localhost", "-i", str(local_inventory), "--sessions-dir", "sessions", "--", "echo", "hi there")
    assert proc.returncode == 0, proc.stderr
    assert "hi there" in proc.stdout
    session = only_session(tmp_path / "sessions")
    events = [json.loads(line) for line in (session / "events.jsonl").read_text().splitlines()]
    step = next(e for e in events if e["type"] == "step_finished")
    assert step["status"] == "ok" and step["results"][0]["result"]["stdout"] == "hi there\n"
    assert (session / "report.md").exists()
    failing = cli_inproc("exec", "localhost", "-i", str(local_inventory), "--sessions-dir", "sessions", "--", "exit 3")
    assert failing.returncode == 1


def test_run_in_process_with_cli_runner(tmp_path: Path, local_inventory: Path) -> None:
    (tmp_path / "ok.yaml").write_text(OK)
    result = CliRunner().invoke(app, ["run", str(tmp_path / "ok.yaml"), "-i", str(local_inventory),
                                      "--sessions-dir", str(tmp_path / "sessions")])
    assert result.exit_code == 0, result.output
    assert (only_session(tmp_path / "sessions") / "report.md").read_text().count("greet") >= 1
