"""read_source in the engine: a read that finds nothing is evidence ("not found in <package> <version>: ..."),
recorded by the step's rules; a broken read fails the step. Runs the real probe on localhost against a tiny
package, so no sglang tree is needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.session.report import render_report


@pytest.fixture
def site(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    pkg = root / "tinypkg" / "spec"
    pkg.mkdir(parents=True)
    (root / "tinypkg" / "__init__.py").write_text("")
    (pkg / "worker.py").write_text("class Worker:\n    def init_lm_head(self):\n        return 'embed'\n")
    dist = root / "tinypkg-1.2.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.2.3\n")
    return root


def _playbook(site: Path, reads: str) -> str:
    return f"""name: reads
hosts: localhost
hypotheses:
  - {{id: sharing, title: the worker shares the head}}
steps:
  - name: read
    read_source:
      package: tinypkg
      sys_path: ["{site}"]
      reads:
{reads}
    register: src
    evidence:
      sharing:
        inconclusive_if: "not src.found"
        because: "{{{{ src.not_found | join('; ') }}}}"
  - name: after
    shell: "echo found={{{{ src.found }}}} alt={{{{ src.by_id.head.alternative }}}}"
"""


async def test_a_read_that_finds_nothing_is_evidence_not_a_failure(run_playbook, site: Path) -> None:
    run = await run_playbook(_playbook(site, """\
        - {id: head, under: spec, any_of: [{symbol: DraftWorker.init_lm_head}, {symbol: Worker.init_lm_head}]}
        - {id: gone, under: spec, symbol: EAGLEWorker.__init__}
"""))
    assert run.finished("s1").status == "ok" and run.outcome.status == "ok"
    assert run.stdout("s2") == "found=false alt=1\n"  # the second alternative found it; `gone` did not
    updates = run.of_type("hypothesis_updated")
    assert [(u.hypothesis_id, u.state) for u in updates] == [("sharing", "inconclusive")]
    assert updates[0].evidence == "gone: not found in tinypkg 1.2.3: no class or function 'EAGLEWorker.__init__' in spec/"
    shown = run.stdout("s1")
    assert "spec/worker.py:2-3  [Worker.init_lm_head]" in shown and "✗ gone: not found in tinypkg 1.2.3" in shown
    report = render_report(run.session_dir)  # the postmortem keeps the miss too, read back from the session log
    assert "✗ gone: not found in tinypkg 1.2.3: no class or function 'EAGLEWorker.__init__' in spec/" in report


async def test_found_code_records_no_evidence(run_playbook, site: Path) -> None:
    run = await run_playbook(_playbook(site, """\
        - {id: head, under: spec, any_of: [{symbol: Worker.init_lm_head}], expect: {contains: embed}}
"""))
    assert run.finished("s1").status == "ok" and run.stdout("s2") == "found=true alt=0\n"
    assert run.of_type("hypothesis_updated") == []


async def test_a_broken_read_fails_the_step(run_playbook, site: Path) -> None:
    run = await run_playbook(_playbook(site, """\
        - {id: head, under: spec, pattern: "([broken"}
"""))
    finished = run.finished("s1")
    assert finished.status == "failed" and "invalid regular expression" in (finished.error or "")
