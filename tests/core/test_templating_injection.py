"""Templating: variables reach a shell as literal text (no injection), `{{ expr }}` keeps native types,
and the sandbox refuses Python internals. Shell steps really run through LocalTransport and the engine."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from orchestrator.errors import TemplateError
from orchestrator.templating import evaluate, render, render_shell
from orchestrator.transport.local import LocalTransport

HOSTILE = [
    "; rm -rf {canary}; echo pwned",
    "$(touch {canary})",
    "`touch {canary}`",
    "line1\ntouch {canary}\nline3",
    "it's \"quoted\" 'twice'",
    "$HOME and ${{HOME}} and $((1+1))",
    "* .* ?",
    "a && touch {canary} || touch {canary}",
    "| tee {canary}",
    "> {canary}",
    "\\$(touch {canary})\\",
    "--help",
    "",
    "tab\there\r\nunicode ✓ é",
]


@pytest.mark.parametrize("template", HOSTILE, ids=range(len(HOSTILE)))
async def test_var_arrives_literally_through_local_transport(tmp_path: Path, template: str) -> None:
    canary = tmp_path / "canary"
    value = template.format(canary=canary)
    command = render_shell("printf '%s' {{ v }}", {"v": value})
    result = await LocalTransport("localhost").run(command, cwd=str(tmp_path))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == value
    assert not canary.exists(), f"the variable ran a command: {value!r}"


@pytest.mark.parametrize("template", HOSTILE[:11], ids=range(11))
async def test_var_arrives_literally_through_the_engine(run_playbook, tmp_path: Path, template: str) -> None:
    canary = tmp_path / "canary"
    value = template.format(canary=canary)
    run = await run_playbook(
        "name: injection\nhosts: localhost\nsteps:\n"
        "  - name: print\n    shell: \"printf '%s' {{ v }}\"\n    register: out\n"
        "  - name: twice inside a larger command\n    shell: \"cd /tmp && printf '[%s]' {{ v }} {{ v }} | cat\"\n",
        extra_vars={"v": value},
    )
    assert run.outcome.status == "ok", [e.error for e in run.of_type("step_finished")]
    assert run.stdout("s1") == value
    assert run.engine.vars.shared["out"]["stdout"] == value
    assert run.stdout("s2") == f"[{value}][{value}]"
    assert not canary.exists()
    # the session records the command that ran, rendered by the same rules (quoted), not another rendering of it
    started = {e.step_id: e.args for e in run.of_type("step_started")}
    assert started["s1"]["command"] == "printf '%s' " + shlex.quote(value)


async def test_playbook_var_with_newline_and_subshell(run_playbook, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    run = await run_playbook(
        "name: yaml vars\nhosts: localhost\n"
        f"vars:\n  evil: \"x\\n$(touch {canary})\\n`touch {canary}`; touch {canary}\"\n"
        "  star: '*'\n"
        "steps:\n  - shell: \"printf '%s' {{ evil }}\"\n  - shell: {argv: [printf, '%s', '{{ star }}'], cwd: /}\n"
        "  - shell:\n      command: printf '%s' \"$VALUE\"\n      env: {VALUE: '{{ evil }}'}\n",
    )
    expected = f"x\n$(touch {canary})\n`touch {canary}`; touch {canary}"
    assert run.outcome.status == "ok"
    assert run.stdout("s1") == expected
    assert run.stdout("s2") == "*"  # argv: no shell, no glob
    assert run.stdout("s3") == expected  # env values are data too
    assert not canary.exists()


def test_native_types_from_single_expression() -> None:
    variables = {"n": 41, "xs": [1, 2, 3], "d": {"a": 1}, "f": 1.5}
    assert render("{{ n + 1 }}", variables) == 42
    assert isinstance(render("{{ n + 1 }}", variables), int)
    assert render("{{ xs | length }}", variables) == 3
    assert render("{{ xs }}", variables) == [1, 2, 3]
    assert render("{{ d }}", variables) == {"a": 1}
    assert render("{{ f * 2 }}", variables) == 3.0
    assert render("{{ n > 40 }}", variables) is True
    assert render("n={{ n + 1 }}", variables) == "n=42"  # mixed text stays text
    assert render({"k": ["{{ n }}", "x{{ n }}"]}, variables) == {"k": [41, "x41"]}


async def test_native_types_flow_through_set(run_playbook) -> None:
    run = await run_playbook(
        "name: native\nhosts: localhost\nvars: {n: 41, xs: [1, 2]}\nsteps:\n"
        "  - set: {m: '{{ n + 1 }}', ys: '{{ xs + [3] }}', half: '{{ n / 2 }}'}\n"
        "  - shell: \"echo {{ m + 1 }} {{ ys | length }} {{ half }}\"\n"
        "    when: m == 42 and ys[2] == 3\n",
    )
    assert run.engine.vars.shared["m"] == 42
    assert run.engine.vars.shared["ys"] == [1, 2, 3]
    assert run.finished("s2").status == "ok"
    assert run.stdout("s2") == "43 3 20.5\n"


def test_lists_and_dicts_reach_the_shell_as_json_quoted() -> None:
    command = render_shell("echo {{ xs }} {{ flag }}", {"xs": ["a b", "$(x)"], "flag": True})
    assert command == "echo " + "'" + json.dumps(["a b", "$(x)"]) + "'" + " true"


SANDBOX_ESCAPES = [
    "{{ ''.__class__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ x.__init__.__globals__ }}",
    "{{ cycler.__init__.__globals__.os.popen('touch CANARY').read() }}",
    "{{ range.__self__ }}",
    "{{ len.__self__.__import__('os').system('touch CANARY') }}",
    "{{ lipsum.__globals__ }}",
    "{{ ().__class__.__base__.__subclasses__() }}",
]


@pytest.mark.parametrize("template", SANDBOX_ESCAPES)
def test_sandbox_blocks_python_internals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, template: str) -> None:
    monkeypatch.chdir(tmp_path)
    for fn in (render, render_shell):
        with pytest.raises(TemplateError):
            fn(template, {"x": "value"})
    with pytest.raises(TemplateError):
        evaluate(template.strip("{} "), {"x": "value"})
    assert not (tmp_path / "CANARY").exists()


async def test_sandbox_escape_in_a_step_fails_the_step(run_playbook, tmp_path: Path) -> None:
    run = await run_playbook(
        "name: escape\nhosts: localhost\nsteps:\n  - shell: \"echo {{ ''.__class__.__mro__ }}\"\n"
        "always:\n  - shell: echo cleanup\n",
    )
    step = run.finished("s1")
    assert step.status == "failed"
    assert "pb" in (step.error or "") and ":4:" in (step.error or "")  # located at the step
    assert run.stdout("s1") == ""
    assert run.finished("a1").status == "ok"
    assert run.outcome.exit_code == 1


def test_undefined_is_an_error_not_empty() -> None:
    with pytest.raises(TemplateError, match="undefined variable 'nope'"):
        render("{{ nope }}", {})
    with pytest.raises(TemplateError, match="undefined variable 'nope'"):
        render_shell("rm -rf /tmp/x/{{ nope }}", {})
    with pytest.raises(TemplateError, match="undefined variable 'nope'"):
        evaluate("nope == 1", {})
