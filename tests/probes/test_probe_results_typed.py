"""Every probe's result is typed: each script under remote_probes/ that runs as a probe (``run_probe(main)``) has a
pydantic result model the orchestrator validates (``orchestrator.probes.PROBES``), or one per call (server_client).
The draft test's model holds its evidence: a result of the wrong shape is a clear ``bad_result``, not a KeyError."""

from __future__ import annotations

import re
from typing import Any

import pytest

from orchestrator.errors import ProbeError
from orchestrator.probes import PROBES, TYPED_PER_CALL, check_result, probes_dir


def _probe_scripts() -> list[str]:
    runs = re.compile(r"^if __name__ == .__main__.:\s*\n\s+run_probe\(", re.M)
    return sorted(p.stem for p in probes_dir().rglob("*.py") if runs.search(p.read_text()))


def test_every_probe_script_has_a_result_model() -> None:
    scripts = _probe_scripts()
    assert "draft_test" in scripts and "env_info" in scripts  # the scan finds probes
    untyped = [s for s in scripts if s not in PROBES and s not in TYPED_PER_CALL]
    assert untyped == []


def _row(wiring: list[int], tau: float) -> dict[str, Any]:
    return {"name": str(wiring), "wiring": wiring, "tau_serving": tau, "tau_serving_ci": [tau - 0.1, tau + 0.1],
            "acc": [0.5, None], "tier": 1}


def _result(**changes: Any) -> dict[str, Any]:
    best = _row([0, 2, 3], 2.5)
    result = {"wirings": [best, _row([1, 2, 3], 1.2)], "best": best, "server_wiring": [1, 2, 3], "server": None,
              "engine": "sglang", "algorithm": "EAGLE3", "parts": {"swapped": []}, "verdict": "v",
              "decision": "mismatch", "margin": 0.2, "confidence": 0.95, "steps": 5, "target": {}, "draft": {},
              "prompts": 8, "newer_field": "a newer probe's extra key is kept"}
    result.update(changes)
    return result


def test_the_draft_test_result_is_validated() -> None:
    model = PROBES["draft_test"][1]
    typed = check_result("draft_test", model, _result())
    assert typed.model_dump()["newer_field"].startswith("a newer")
    with pytest.raises(ProbeError, match="bad_result.*decision"):
        check_result("draft_test", model, _result(decision="maybe"))
    with pytest.raises(ProbeError, match="bad_result.*wirings"):
        check_result("draft_test", model, {k: v for k, v in _result().items() if k != "wirings"})


def test_the_lab_calibration_validates_the_draft_test_it_runs(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """The calibration starts draft_test itself (not through the probe runner): its result is checked against the
    same model, so a draft test of the wrong shape stops the build with a bad_result, never a KeyError later."""
    import json

    from orchestrator.lab.building import calibrate

    answers: list[dict[str, Any]] = [_result(), {k: v for k, v in _result().items() if k != "wirings"}]

    class FakeProbe:  # subprocess.Popen as DraftTestRun starts it: the answer written to its stdout file
        returncode = 0

        def __init__(self, argv: list[str], *, env: dict[str, str], stdout: Any, **_: Any) -> None:
            assert argv[-2:] == ["-m", "remote_probes.evaluation.draft_test"]
            nonce = env["ORCH_PROBE_NONCE"]
            document = json.dumps({"ok": True, "result": answers.pop(0)})
            stdout.write(f"@@ORCH-RESULT-BEGIN {nonce}@@\n{document}\n@@ORCH-RESULT-END {nonce}@@\n")

        def wait(self, timeout: float | None = None) -> int:
            return 0

        def poll(self) -> int:
            return 0

    monkeypatch.setattr(calibrate.subprocess, "Popen", FakeProbe)
    sample = calibrate.FlagshipSample()
    assert calibrate.run_draft_test(tmp_path, tmp_path, sample)["decision"] == "mismatch"
    with pytest.raises(ProbeError, match="bad_result.*wirings"):
        calibrate.run_draft_test(tmp_path, tmp_path, sample)
