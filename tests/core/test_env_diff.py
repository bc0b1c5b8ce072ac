"""env_diff's table from recorded env_info results: what differs is shown, what agrees is not."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from orchestrator.actions.base import ActionContext, StepFailed
from orchestrator.actions.env_diff import EnvDiffAction, EnvDiffArgs, difference_table


def env(driver: str | None, gpus: int, sglang: str | None, cuda: str = "12.4") -> dict[str, Any]:
    return {"status": "ok", "gpus": [{"name": "H200", "driver_version": driver}] * gpus,
            "nvidia_smi": {"driver_version": driver, "cuda_version": cuda}, "cuda": {"driver_cuda_version": cuda},
            "torch": {"version": "2.5.1"}, "python": {"version": "3.11.7"}, "packages": {"sglang": sglang}}


def run(registered: dict[str, Any], *, fail: bool = False) -> tuple[dict[str, Any], str]:
    said: list[str] = []
    ctx = ActionContext(step_id="s1", step_name="diff", host="controller", host_spec=None, transport=None,
                        variables={"env": registered}, session_id="t", session_dir=Path("."),
                        emit_output=lambda _stream, text: said.append(text), services=None)  # type: ignore[arg-type]
    result = asyncio.run(EnvDiffAction().run(EnvDiffArgs(source="env", fail_on_difference=fail), ctx))
    return result, "".join(said)


def test_differences_are_tabled_by_field_and_host() -> None:
    hosts = {"n1": env("550.54", 8, "0.5.23"), "n2": env("550.54", 8, "0.5.23"), "n3": env("535.1", 7, None)}
    result, said = run({"hosts": hosts, "status": "ok"})
    assert result["differences"] == {
        "driver": {"n1": "550.54", "n2": "550.54", "n3": "535.1"},
        "gpu count": {"n1": "8", "n2": "8", "n3": "7"},
        "pkg sglang": {"n1": "0.5.23", "n2": "0.5.23", "n3": "-"},
    }
    assert result["same"]["cuda (driver)"] == "12.4"
    lines = said.splitlines()
    assert lines[0] == "3 field(s) differ across 3 hosts:"
    assert lines[1].split() == ["field", "n1", "n2", "n3"]
    assert lines[2].split() == ["driver", "550.54", "550.54", "535.1"]


def test_agreement_and_a_failed_host() -> None:
    result, said = run({"hosts": {"n1": env("550", 2, "0.5.23"), "n2": env("550", 2, "0.5.23")}})
    assert result["count"] == 0 and "all 2 hosts agree" in said and "driver 550, sglang 0.5.23" in said
    result, _ = run({"hosts": {"n1": env("550", 2, "x"), "n2": {"status": "unreachable"}}})
    assert result["differences"]["status"] == {"n1": "-", "n2": "unreachable"}
    with pytest.raises(StepFailed, match="differ across hosts: driver"):
        run({"hosts": {"n1": env("550", 2, "x"), "n2": env("535", 2, "x")}}, fail=True)


def test_table_columns_line_up() -> None:
    rows = difference_table({"driver": {"a": "1", "bb": "22"}}, ["a", "bb"])
    assert rows == ["field   a  bb", "driver  1  22"]
