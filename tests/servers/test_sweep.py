"""`sweep` on the lab: >= 4 flag sets + the no-spec baseline, an invalid combination skipped, table and chart
saved in the session, best config named, nothing left running."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from orchestrator.actions.sweep import SweepArgs, expand
from orchestrator.inventory import Inventory
from tests.servers.conftest import processes_with, run_playbook


def test_matrix_expansion_and_validation() -> None:
    args = SweepArgs.model_validate({"base_flags": {"speculative-algorithm": "EAGLE3"},
                                     "matrix": {"speculative-num-steps": [1, 3], "speculative-eagle-topk": [1, 2]}})
    sets = expand(args)
    assert len(sets) == 4 and all(s["speculative-algorithm"] == "EAGLE3" for s in sets)
    assert {(s["speculative-num-steps"], s["speculative-eagle-topk"]) for s in sets} == {(1, 1), (1, 2), (3, 1), (3, 2)}
    with pytest.raises(ValueError, match="give 'matrix' or 'configs', not both"):
        SweepArgs.model_validate({"matrix": {"a": [1]}, "configs": [{}]})
    with pytest.raises(ValueError, match="needs at least one value"):
        SweepArgs.model_validate({"matrix": {"a": []}})


@pytest.mark.lab
@pytest.mark.slow
def test_lab_sweep_table_and_chart(lab_inventory: Inventory, tmp_path: Path, marker: str) -> None:
    ran = run_playbook(f"""
name: lab sweep
steps:
  - name: sweep the chain length
    sweep:
      model: "{{{{ target }}}}"
      env: {{MARK: {marker}}}
      flags: {{speculative-algorithm: EAGLE3, speculative-draft-model-path: "{{{{ draft }}}}", speculative-eagle-topk: 1,
              lab-capture-layers: "0,6,11"}}
      configs:
        - {{speculative-num-steps: 1, speculative-num-draft-tokens: 16}}
        - {{speculative-num-steps: 1, speculative-num-draft-tokens: 2}}
        - {{speculative-num-steps: 3, speculative-num-draft-tokens: 4}}
        - {{speculative-num-steps: 5, speculative-num-draft-tokens: 6}}
        - {{speculative-num-steps: 7, speculative-num-draft-tokens: 8}}
      bench: {{n: 4, max_new_tokens: 48}}
    register: sw
""", lab_inventory, tmp_path / "sessions")
    assert ran.status == "ok", ran.step("s1")["error"]
    result = ran.result("s1")["result"]
    rows = result["rows"]
    assert [r["status"] for r in rows] == ["ok", "skipped", "ok", "ok", "ok", "ok"]
    assert rows[0]["baseline"] and rows[0]["accept_length"] is None  # no speculation, no accept length
    assert "steps*topk+1 = 2 < num_draft_tokens = 16" in rows[1]["reason"]
    spec_rows = [r for r in rows if r["status"] == "ok" and not r["baseline"]]
    assert len(spec_rows) >= 4
    for row in spec_rows:
        assert row["tok_s"] > 0 and row["accept_length"] >= 1.0 and row["overrides"] == []
        assert row["speedup"] == pytest.approx(row["tok_s"] / rows[0]["tok_s"], rel=1e-2)
    # longer chains with the trained wiring accept more tokens per verify (measured, not assumed exact)
    assert max(r["accept_length"] for r in spec_rows[1:]) > spec_rows[0]["accept_length"]
    best = result["best"]
    assert best["label"] == max(spec_rows, key=lambda r: r["tok_s"])["label"]

    art = ran.directory / "artifacts"
    table = json.loads((art / "s1-localhost-sweep.json").read_text())
    assert table["best"]["label"] == best["label"] and len(table["rows"]) == 6
    with (art / "s1-localhost-sweep.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == 6
    svg = (art / "s1-localhost-sweep.svg").read_text()
    assert svg.startswith("<svg") and "[baseline]" in svg and "baseline " in svg and "accept length" in svg
    saved = {e["path"] for e in ran.of_type("artifact_saved")}
    assert saved == {f"artifacts/s1-localhost-sweep.{x}" for x in ("json", "csv", "md", "svg")}
    assert len(ran.of_type("server_started")) == len(ran.of_type("server_stopped")) == 5
    assert processes_with(marker) == []
    print("\n" + result["table"])
