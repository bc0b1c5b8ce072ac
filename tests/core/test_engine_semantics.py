"""PlaybookRunner semantics with real shell steps on this machine: when, until/retries/delay, timeout (the whole
process group dies), ignore_errors, failure stops the play but `always:` runs, cancel, set/register."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from orchestrator.inventory import Inventory
from tests.core.conftest import make_runner, marker_pids, wait_for_pids
from tests.waiting import wait_until_async

HEAD = "name: semantics\nhosts: localhost\n"


async def test_when_true_false_and_from_a_registered_result(run_playbook) -> None:
    run = await run_playbook(HEAD + """vars: {go: true}
steps:
  - {name: yes, shell: echo yes, when: go}
  - {name: no, shell: echo no, when: "not go"}
  - {name: probe, shell: {command: "exit 3", expect_exit: [3]}, register: p}
  - {name: after, shell: "echo rc={{ p.rc }}", when: "p.rc == 3 and p.stdout == ''"}
  - {name: literal false, shell: echo never, when: false}
""")
    assert [run.finished(s).status for s in ("s1", "s2", "s3", "s4", "s5")] == ["ok", "skipped", "ok", "ok", "skipped"]
    assert run.stdout("s1") == "yes\n" and run.stdout("s2") == "" and run.stdout("s5") == ""
    assert run.stdout("s4") == "rc=3\n"
    assert run.outcome.status == "ok" and run.outcome.exit_code == 0


async def test_when_is_decided_per_host(run_playbook) -> None:
    inventory = Inventory.model_validate({
        "hosts": {"h1": {"transport": "local", "vars": {"role": "target"}},
                  "h2": {"transport": "local", "vars": {"role": "draft"}}},
        "groups": {"pair": {"hosts": ["h1", "h2"]}},
    })
    run = await run_playbook(
        "name: per host\nhosts: pair\nsteps:\n"
        "  - {shell: 'echo {{ inventory_hostname }} {{ role }}', when: \"role == 'target'\", register: r}\n"
        "  - {shell: 'echo all {{ role }}'}\n",
        inventory=inventory, extra_names=("role",),
    )
    s1 = run.finished("s1")
    assert {r.host: r.status for r in s1.results} == {"h1": "ok", "h2": "skipped"}
    assert s1.status == "ok"
    assert run.stdout("s1", "h1") == "h1 target\n" and run.stdout("s1", "h2") == ""
    assert run.stdout("s2", "h1") == "all target\n" and run.stdout("s2", "h2") == "all draft\n"
    # The registered result is kept per host: h2's says it was skipped.
    assert run.engine.vars.per_host["h2"]["r"]["skipped"] is True


async def test_until_retries_and_delay_count_attempts(run_playbook, tmp_path: Path) -> None:
    counter = tmp_path / "count"
    started = time.monotonic()
    run = await run_playbook(HEAD + f"""steps:
  - name: poll
    shell: "n=$(( $(cat {counter} 2>/dev/null || echo 0) + 1 )); echo $n > {counter}; echo $n"
    register: poll
    until: "poll.stdout | trim | int >= 3"
    retries: 5
    delay: 0.2
  - name: never true
    shell: "echo nope"
    until: "result.stdout == 'yes'"
    retries: 2
    delay: 0
""")
    elapsed = time.monotonic() - started
    poll = run.finished("s1")
    assert poll.status == "ok" and poll.attempts == 3
    assert counter.read_text().strip() == "3"
    assert elapsed >= 0.4  # two delays of 0.2 s between three attempts
    assert run.engine.vars.shared["poll"]["stdout"] == "3\n"
    never = run.finished("s2")
    assert never.status == "failed" and never.attempts == 3
    assert "until condition still false after 3 attempts" in (never.error or "")
    assert run.outcome.status == "failed" and run.outcome.exit_code == 1


async def test_retries_without_until_retry_only_failures(run_playbook, tmp_path: Path) -> None:
    counter = tmp_path / "count"
    bump = f"n=$(( $(cat {counter} 2>/dev/null || echo 0) + 1 )); echo $n > {counter}"
    run = await run_playbook(HEAD + f"""steps:
  - {{name: flaky, shell: "{bump}; [ $n -ge 2 ]", retries: 4, delay: 0}}
  - {{name: fine, shell: "echo fine", retries: 4, delay: 0}}
  - {{name: hopeless, shell: "exit 7", retries: 2, delay: 0}}
""")
    assert (run.finished("s1").status, run.finished("s1").attempts) == ("ok", 2)
    assert (run.finished("s2").status, run.finished("s2").attempts) == ("ok", 1)
    hopeless = run.finished("s3")
    assert (hopeless.status, hopeless.attempts) == ("failed", 3)
    assert "exit code 7" in (hopeless.error or "")


async def test_timeout_kills_the_whole_process_group(run_playbook, marker: str) -> None:
    started = time.monotonic()
    run = await run_playbook(HEAD + f"""steps:
  - name: hangs
    shell: "sleep {marker} & sleep {marker} & echo started; wait"
    timeout: 1
  - name: not reached
    shell: echo no
always:
  - name: cleanup
    shell: echo cleanup
""")
    took = time.monotonic() - started
    step = run.finished("s1")
    assert step.status == "timeout"
    assert "timed out after 1s" in (step.error or "")
    assert run.stdout("s1") == "started\n"
    assert not [e for e in run.of_type("step_started") if e.step_id == "s2"]
    assert run.finished("a1").status == "ok"
    assert took < 10
    assert wait_for_pids(marker, present=False, timeout=3) == []
    assert run.outcome.status == "failed"


async def test_ignore_errors_lets_the_play_go_on(run_playbook) -> None:
    run = await run_playbook(HEAD + """steps:
  - {name: bad, shell: "echo oops >&2; exit 4", ignore_errors: true, register: bad}
  - {name: next, shell: "echo rc was {{ bad.rc }} failed={{ bad.failed }}"}
""")
    bad = run.finished("s1")
    assert bad.status == "failed" and bad.ignored
    assert "oops" in (bad.error or "")
    assert run.stdout("s2") == "rc was 4 failed=true\n"
    assert run.outcome.status == "ok" and run.outcome.exit_code == 0


async def test_failure_stops_the_rest_and_always_runs(run_playbook, tmp_path: Path) -> None:
    run = await run_playbook(HEAD + f"""steps:
  - {{name: one, shell: echo one}}
  - {{name: two, shell: "exit 1"}}
  - {{name: three, shell: "touch {tmp_path}/three"}}
always:
  - {{name: first cleanup, shell: "exit 2"}}
  - {{name: second cleanup, shell: "touch {tmp_path}/cleaned"}}
""")
    assert run.finished("s1").status == "ok" and run.finished("s2").status == "failed"
    assert "s3" not in {e.step_id for e in run.events if hasattr(e, "step_id")}
    assert not (tmp_path / "three").exists()
    # Every always step runs, even after one of them fails.
    assert run.finished("a1").status == "failed" and run.finished("a2").status == "ok"
    assert (tmp_path / "cleaned").exists()
    assert run.outcome.status == "failed" and run.outcome.exit_code == 1
    assert run.of_type("session_finished")[0].counts == {"ok": 2, "failed": 2}


async def test_failing_always_fails_an_ok_session(run_playbook) -> None:
    run = await run_playbook(HEAD + "steps:\n  - shell: 'true'\nalways:\n  - shell: 'false'\n")
    assert run.outcome.status == "failed"


async def test_cancel_mid_step(tmp_path: Path, write_playbook, marker: str) -> None:
    path = write_playbook(HEAD + f"""steps:
  - name: long
    shell: "sleep {marker} & sleep {marker}; echo never"
  - name: after
    shell: "touch {tmp_path}/after"
always:
  - name: cleanup
    shell: "touch {tmp_path}/cleaned"
""")
    engine, sink = make_runner(path, tmp_path / "session")
    task = asyncio.create_task(engine.run())
    assert await wait_until_async(lambda: len(marker_pids(marker)) >= 2, 10), "the step never started its children"
    engine.cancel()
    outcome = await asyncio.wait_for(task, 15)
    assert outcome.status == "cancelled" and outcome.exit_code == 130
    by_id = {e.step_id: e for e in sink.events if e.type == "step_finished"}
    assert by_id["s1"].status == "cancelled"
    assert "s2" not in by_id and not (tmp_path / "after").exists()
    assert by_id["a1"].status == "ok" and (tmp_path / "cleaned").exists()
    assert sink.events[-1].type == "session_finished" and sink.events[-1].status == "cancelled"
    assert wait_for_pids(marker, present=False, timeout=3) == []


async def test_set_values_and_register_fields_are_usable_later(run_playbook) -> None:
    run = await run_playbook(HEAD + """vars: {base: 10}
steps:
  - {name: measure, shell: "echo 32; echo warn >&2", register: m}
  - {name: compute, set: {speedup: "{{ (m.stdout | trim | int) / base }}", label: "run-{{ m.rc }}"}}
  - {name: use, shell: "echo {{ speedup }} {{ label }} {{ m.stderr | trim }} {{ m.stdout_lines | length }}"}
""")
    assert run.outcome.status == "ok"
    m = run.engine.vars.shared["m"]
    assert (m["rc"], m["stdout"], m["stderr"], m["status"], m["failed"]) == (0, "32\n", "warn\n", "ok", False)
    assert run.engine.vars.shared["speedup"] == 3.2
    assert run.stdout("s3") == "3.2 run-0 warn 1\n"
    assert run.finished("s1").registered_as == "m"


async def test_runtime_template_error_is_located_and_fails_the_step(run_playbook) -> None:
    run = await run_playbook(HEAD + """steps:
  - {name: get, shell: "echo hi", register: r}
  - {name: bad attr, shell: "echo {{ r.nope.deeper }}"}
""")
    step = run.finished("s2")
    assert step.status == "failed"
    assert ":5:" in (step.error or "")  # file:line:col of the step
    assert run.outcome.exit_code == 1


async def test_second_cancel_aborts_always_too(tmp_path: Path, write_playbook, marker: str) -> None:
    path = write_playbook(HEAD + f"""steps:
  - {{name: long, shell: "sleep {marker}"}}
always:
  - {{name: slow cleanup, shell: "sleep {marker}"}}
  - {{name: never, shell: "touch {tmp_path}/never"}}
""")
    engine, sink = make_runner(path, tmp_path / "session")
    task = asyncio.create_task(engine.run())
    for expected_step in ("s1", "a1"):
        await wait_until_async(lambda step=expected_step: step in {e.step_id for e in sink.events
                                                                   if e.type == "step_started"}
                               and bool(marker_pids(marker)), 10)
        engine.cancel()
    outcome = await asyncio.wait_for(task, 15)
    assert outcome.status == "cancelled"
    by_id = {e.step_id: e.status for e in sink.events if e.type == "step_finished"}
    assert by_id == {"s1": "cancelled", "a1": "cancelled"}
    assert not (tmp_path / "never").exists()
    assert wait_for_pids(marker, present=False, timeout=3) == []
