"""The probe protocol end to end: real scripts that misbehave, and the parser on broken output."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import ProbeError
from orchestrator.probes import (
    parse_probe_output,
    parse_progress_line,
    parse_result,
    probes_dir,
    validate_args,
)

NONCE = "n0nce"
BEGIN, END = f"@@ORCH-RESULT-BEGIN {NONCE}@@", f"@@ORCH-RESULT-END {NONCE}@@"
# Every pushed script is checked; these may also import what any SGLang host has (draft_test's model code).
TORCH_FILES = {"eagle3/checkpoint.py", "eagle3/draft.py", "eagle3/mla.py", "eagle3/validate.py", "eagle3/tree.py",
               "evaluation/draft_test.py", "evaluation/counterfactual.py", "evaluation/light_target.py",
               "evaluation/target_model.py", "evaluation/penalties.py", "evaluation/traffic_offline.py",
               "evaluation/decoding.py", "evaluation/spec_simulation.py",
               "engine/engine_states.py", "engine/sglang_states.py"}
# Imported by the serving engine itself (vLLM loads it as its KV connector), never by a probe: the engine's own
# packages, on the engine's Python.
ENGINE_PLUGIN_FILES = {"engine/vllm_states_connector.py": {"torch"},  # vllm by importlib
                       # SGLang's model registry imports it (SGLANG_EXTERNAL_MODEL_PACKAGE); sglang by importlib
                       "engine/sglang_capture_model/capturing_target.py": set()}
PROBE_FILES = sorted(str(p.relative_to(probes_dir())) for p in probes_dir().rglob("*.py"))


def _probe_dir(tmp_path: Path, body: str) -> Path:
    """A probe script of the test's own, run with the real package on the path, as on the remote host."""
    script = tmp_path / "my_probe.py"
    script.write_text(body)
    return script


def test_stray_prints_before_and_after_the_markers(tmp_path, run_script):
    script = _probe_dir(tmp_path, (
        "import sys\nfrom remote_probes.agent.protocol import run_probe, progress\n"
        "print('WARNING: noisy library', end='')\n"  # no newline: the marker must still start a line
        "def main(args):\n"
        "    print('@@ORCH-RESULT-BEGIN forged@@')\n    print('{\"ok\": true, \"result\": {\"x\": 0}}')\n"
        "    progress('halfway', step=1)\n    return {'x': args['x'] + 1}\n"
        "import atexit\natexit.register(lambda: print('bye from atexit'))\n"
        "run_probe(main)\n"))
    run = run_script(script, {"x": 41})
    assert run.proc.returncode == 0
    assert run.outcome.ok and run.outcome.result == {"x": 42}
    assert "noisy library" in run.outcome.stray_output and "bye from atexit" in run.outcome.stray_output
    progress = [p for p in map(parse_progress_line, run.proc.stderr.splitlines()) if p]
    assert progress == [{"step": 1, "message": "halfway"}]


def test_a_crashing_probe_reports_kind_crash_with_traceback(tmp_path, run_script):
    script = _probe_dir(tmp_path, "from remote_probes.agent.protocol import run_probe\n"
                                  "def main(args):\n    return {'v': 1 / 0}\nrun_probe(main)\n")
    run = run_script(script, {})
    assert run.proc.returncode == 3
    assert not run.outcome.ok and run.outcome.error is not None
    assert run.outcome.error.kind == "crash" and "ZeroDivisionError" in run.outcome.error.message
    assert "1 / 0" in run.outcome.error.details["traceback"]
    with pytest.raises(ProbeError, match="my_probe failed \\(crash\\)"):
        run.outcome.unwrap("my_probe")


def test_a_probe_failure_and_bad_args(tmp_path, run_script):
    script = _probe_dir(tmp_path, "from remote_probes.agent.protocol import run_probe, ProbeFailure\n"
                                  "def main(args):\n    raise ProbeFailure('nope', 'it failed', where='here')\n"
                                  "run_probe(main)\n")
    run = run_script(script, {})
    assert run.outcome.error is not None and run.outcome.error.kind == "nope"
    assert run.outcome.error.details["where"] == "here" and run.outcome.error.details["exit_status"] == 3
    (tmp_path / "bad.json").write_text("{not json")
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "bad.json")], capture_output=True, text=True,
                          env={"ORCH_PROBE_NONCE": NONCE, "PATH": "/usr/bin:/bin"})
    outcome = parse_probe_output(proc.stdout, NONCE, exit_status=proc.returncode)
    assert outcome.error is not None and outcome.error.kind == "bad_args"


def test_a_probe_killed_by_its_timeout_leaves_no_result(tmp_path, run_script):
    script = _probe_dir(tmp_path, "import time\nfrom remote_probes.agent.protocol import run_probe\nprint('started', flush=True)\n"
                                  "def main(args):\n    time.sleep(30)\n    return {}\nrun_probe(main)\n")
    with pytest.raises(subprocess.TimeoutExpired) as info:
        run_script(script, {}, timeout=1.5)
    out = info.value.stdout or b""
    outcome = parse_probe_output(out.decode() if isinstance(out, bytes) else out, NONCE, exit_status=None)
    assert outcome.error is not None and outcome.error.kind == "missing_markers"


@pytest.mark.parametrize("stdout, kind", [
    ("", "no_output"),
    ("Traceback (most recent call last):\nSyntaxError: invalid syntax\n", "missing_markers"),
    (f"{BEGIN}\n{{\"ok\": true, \"result\": {{\"a\"", "truncated"),
    (f"{BEGIN}\nnot json at all\n{END}\n", "not_json"),
    (f"{BEGIN}\n[1, 2]\n{END}\n", "bad_document"),
    (f"{BEGIN}\n{{\"ok\": true}}\n{END}\n", "bad_document"),
    (f"{BEGIN}\n{{\"ok\": false, \"error\": 3}}\n{END}\n", "bad_document"),
    (f"{BEGIN}\n{{\"ok\": true, \"result\": {{}}}}\n{END}\n{BEGIN}\n{{}}\n{END}\n", "multiple_results"),
    ("@@ORCH-RESULT-BEGIN other@@\n{\"ok\": true, \"result\": {}}\n@@ORCH-RESULT-END other@@\n", "missing_markers"),
])
def test_parser_reports_broken_output_clearly(stdout, kind):
    outcome = parse_probe_output(stdout, NONCE, exit_status=1, stderr="python3: boom\n")
    assert not outcome.ok and outcome.result is None
    assert outcome.error is not None and outcome.error.kind == kind, outcome.error
    assert outcome.error.message and outcome.error.details["exit_status"] == 1
    with pytest.raises(ProbeError, match=kind):
        outcome.unwrap("x")


def test_parser_accepts_a_result_between_stray_output():
    outcome = parse_probe_output(f"hello\n{BEGIN}\n{{\"ok\": true, \"result\": {{\"a\": 1}}}}\n{END}\ntrailer\n",
                                 NONCE)
    assert outcome.ok and outcome.result == {"a": 1}
    assert outcome.stray_output == "hello\n\ntrailer"
    assert parse_progress_line("@@ORCH-PROGRESS@@ {\"message\": \"m\"}") == {"message": "m"}
    assert parse_progress_line("ordinary stderr") is None


def test_args_are_validated_before_anything_is_pushed():
    assert validate_args("sglang_source", {"reads": [{"file": "a.py", "lines": "1,2"}]})["package"] == "sglang"
    with pytest.raises(ProbeError, match="reads.0"):
        validate_args("sglang_source", {"reads": [{"file": "a.py", "lines": "1", "symbol": "X"}]})
    with pytest.raises(ProbeError, match="needs a 'file'"):
        validate_args("sglang_source", {"reads": [{"lines": "1"}]})
    with pytest.raises(ProbeError, match="unknown probe"):
        validate_args("nope", {})
    with pytest.raises(ProbeError, match="Extra inputs"):
        validate_args("draft_inspect", {"path": "/x", "colour": "red"})
    with pytest.raises(ProbeError, match="wrong shape"):
        parse_result("env_info", parse_probe_output(f"{BEGIN}\n{{\"ok\": true, \"result\": {{}}}}\n{END}\n", NONCE))


def test_every_pushed_script_is_checked():
    assert {"engine/server_client.py", "agent/protocol.py", "agent/agent.py", "engine/sglang_source.py",
            "agent/env_info.py", "checks/draft_inspect.py"} <= set(PROBE_FILES)
    assert TORCH_FILES <= set(PROBE_FILES) and set(ENGINE_PLUGIN_FILES) <= set(PROBE_FILES)


@pytest.mark.parametrize("name", PROBE_FILES)
def test_probe_sources_are_python39_stdlib_only(name):
    """The remote may run Python 3.9 without any third-party package: check syntax and imports statically
    (the draft_test family may import torch + transformers, and only those)."""
    source = (probes_dir() / name).read_text()
    tree = ast.parse(source, feature_version=(3, 9))
    siblings = {"remote_probes"}
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    allowed = {"torch", "transformers", "safetensors"} if name in TORCH_FILES else ENGINE_PLUGIN_FILES.get(name, set())
    foreign = {m for m in imported if m not in sys.stdlib_module_names and m not in siblings and m not in allowed}
    assert not foreign, f"{name} imports non-stdlib modules {foreign}"
    assert "from __future__ import annotations" in source  # so PEP 604/585 annotations stay strings on 3.9


def test_parser_and_models_import_without_torch():
    code = ("import sys, orchestrator.probes, orchestrator.probes.models; "
            "assert 'torch' not in sys.modules and 'asyncssh' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
