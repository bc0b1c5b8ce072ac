"""Generated and mutated playbooks for the fuzz test and bench/reliability.py (issue 19).

A case is YAML text: a playbook built from a structure (names and values in odd unicode, huge strings,
templating in every field, deep nesting), written in block or flow style or with anchors and aliases, then
maybe mutated as text (a span cut, a line doubled or re-indented, junk inserted). ``judge`` loads it and, when
it is valid, runs it on localhost: the only acceptable ends are a located playbook error or a finished
session. Commands are only ever ``echo``/``true``/``exit N`` (templated values reach the shell quoted), so a
generated case cannot do harm; a run is cut after ``RUN_LIMIT_S`` (a mutated ``retries`` can be long).
"""

from __future__ import annotations

import asyncio
import json
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from orchestrator.errors import OrchestratorError, PlaybookError, PlaybookErrors
from orchestrator.inventory import Inventory
from orchestrator.playbook.loader import load_playbook_text
from orchestrator.runner import RunnerOptions
from orchestrator.runner.sinks import ListSink
from orchestrator.session.compose import compose_runner
from orchestrator.session.log import SessionLog

RUN_LIMIT_S = 8.0
FILE = "fuzz.yaml"

ODD = st.sampled_from(["\u202e", "\u200b", "\ufeff", "é", "ß", "中文", "🦀", "\u0000", "\t", "\r", "\\", "'", '"',
                       ":", "#", "- ", "{", "}", "[", "]", "&", "*", "!", "|", ">", "%", "@", "`", "\u2028"])
TEMPLATES = st.sampled_from([
    "{{ x }}", "{{ undefined_thing }}", "{{ x | upper }}", "{{ x | no_such_filter }}", "{% for i in x %}{{ i }}{% endfor %}",
    "{{", "}}", "{% if %}", "{{ x.__class__.__mro__ }}", "{{ range(10**9) | list }}", "{{ 'a' * 10 }}", "{# c #}",
    "{{ lookup('env', 'HOME') }}", "{{ x }}{{ x }}", "$(echo pwned)", "`id`", "; rm -rf /nonexistent-fuzz",
])
WORD = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
SCALAR = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=True),
    WORD, TEMPLATES, ODD, st.just("x" * 100_000), st.builds(lambda a, b: a + b, TEMPLATES, WORD),
)
VALUE = st.recursive(SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(WORD, inner, max_size=3)), max_leaves=40)
IDENT = st.one_of(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), WORD)
# The clean half: well-formed playbooks whose every field still holds odd unicode, huge strings or templating,
# so the run itself (rendering, quoting, logging, redaction of all that) is exercised, not only the loader.
GOOD_TEMPLATES = st.sampled_from(["{{ x }}", "{{ x | string | upper }}", "{{ x }}{{ x }}", "{{ x | length }}",
                                  "{% for c in x | string %}{{ c }}{% endfor %}", "{{ x | tojson }}"])
CLEAN_WORD = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=12)
CLEAN_SCALAR = st.one_of(st.booleans(), st.integers(-(2**40), 2**40), CLEAN_WORD, GOOD_TEMPLATES,
                         st.just("y" * 100_000), st.builds(lambda a, b: a + b, CLEAN_WORD, GOOD_TEMPLATES))
CLEAN_VALUE = st.recursive(CLEAN_SCALAR, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), inner, max_size=3)),
    max_leaves=30)
CLEAN_IDENT = st.from_regex(r"v_[a-z0-9_]{0,8}", fullmatch=True)
COMMAND = st.one_of(st.sampled_from(["echo hi", "true", "exit 3", "echo {{ x }}", "echo '{{ x }}'"]),
                    st.builds(lambda t: f"echo {t}", TEMPLATES))


@st.composite
def step(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["set", "shell", "shell_args", "read_source", "two_actions", "none", "junk"]))
    body: dict[str, Any] = {}
    if draw(st.booleans()):
        body["name"] = draw(st.one_of(WORD, TEMPLATES))
    if kind == "set":
        body["set"] = draw(st.dictionaries(IDENT, VALUE, max_size=3))
    elif kind == "shell":
        body["shell"] = draw(COMMAND)
    elif kind == "shell_args":
        body["shell"] = {"command": draw(COMMAND), "env": draw(st.dictionaries(IDENT, st.one_of(WORD, TEMPLATES), max_size=2))}
    elif kind == "read_source":
        body["read_source"] = {"package": draw(st.sampled_from(["json", "no_such_pkg", "{{ x }}"])),
                               "file": draw(st.sampled_from(["decoder.py", "../../etc/passwd", "{{ x }}", ""])),
                               "lines": draw(st.sampled_from(["1,3", "3,1", "x", "1,99999", "/def /"]))}
    elif kind == "two_actions":
        body.update({"set": {"a": 1}, "shell": "true"})
    elif kind == "junk":
        return draw(VALUE)
    options = draw(st.dictionaries(st.sampled_from(["register", "when", "ignore_errors", "timeout", "hosts",
                                                    "evidence", "until", "retries", "delay", "bogus"]),
                                   st.one_of(IDENT, TEMPLATES, st.integers(-3, 3), st.booleans(), VALUE), max_size=3))
    if "retries" in options or "until" in options:
        options["delay"] = 0  # keeps a valid retry loop short; a mutation may still undo it
    body.update(options)
    return body


@st.composite
def clean_step(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["set", "shell", "shell_env", "read_source"]))
    body: dict[str, Any] = {"name": draw(st.one_of(CLEAN_WORD, GOOD_TEMPLATES))}
    if kind == "set":
        body["set"] = draw(st.dictionaries(CLEAN_IDENT, CLEAN_VALUE, min_size=1, max_size=3))
    elif kind == "shell":
        body["shell"] = draw(st.one_of(st.sampled_from(["echo hi", "true", "exit 3"]),
                                       st.builds(lambda t: f"echo {t}", GOOD_TEMPLATES)))
    elif kind == "shell_env":
        body["shell"] = {"command": "echo \"$V\"", "env": {"V": draw(st.one_of(CLEAN_WORD, GOOD_TEMPLATES))}}
    else:
        body["read_source"] = {"package": "json", "file": "decoder.py",
                               "lines": draw(st.sampled_from(["1,3", "1,99999", "/def py_scanstring/"]))}
    if draw(st.booleans()):
        body["when"] = draw(st.sampled_from(["x is defined", "false", "x | string | length > 3", True]))
    if draw(st.booleans()):
        body["ignore_errors"] = True
    return body


@st.composite
def clean_playbook_data(draw: st.DrawFn) -> Any:
    steps = draw(st.lists(clean_step(), min_size=1, max_size=4))
    for n, body in enumerate(steps):
        body["name"] = f"{n} {body['name']}"  # step names are unique within a playbook
    return {"name": draw(CLEAN_WORD.filter(str.strip)) or "p", "hosts": "localhost",
            "vars": {"x": draw(CLEAN_VALUE)}, "steps": steps}


@st.composite
def playbook_data(draw: st.DrawFn) -> Any:
    if draw(st.booleans()):
        return draw(clean_playbook_data())
    if draw(st.integers(0, 20)) == 0:
        return draw(VALUE)  # not even a mapping
    data: dict[str, Any] = {"name": draw(st.one_of(WORD, TEMPLATES)), "hosts": draw(st.sampled_from(
        ["localhost", "localhost", "nowhere", "{{ x }}", "", "local*"]))}
    data["vars"] = {"x": draw(VALUE), **draw(st.dictionaries(IDENT, VALUE, max_size=3))}
    if draw(st.booleans()):
        data["hypotheses"] = draw(st.lists(st.fixed_dictionaries({"id": IDENT, "title": WORD}), max_size=2))
    data["steps"] = draw(st.lists(step(), max_size=4))
    if draw(st.booleans()):
        data["always"] = draw(st.lists(step(), max_size=1))
    if draw(st.integers(0, 5)) == 0:
        data[draw(WORD)] = draw(VALUE)  # an unknown top-level key
    return data


def _anchored(data: Any) -> str:
    """vars under an anchor, reused by alias and by merge key in steps."""
    body = yaml.safe_dump(data, allow_unicode=True, sort_keys=False) if isinstance(data, dict) else ""
    return ("defaults: &d {timeout: 5}\nvars: &v\n  x: 1\n  y: [1, 2]\nsteps:\n  - set: *v\n"
            "  - <<: *d\n    shell: echo hi\n  - {name: again, set: {<<: *v, z: 3}}\n" + body)


@st.composite
def playbook_text(draw: st.DrawFn) -> str:
    data = draw(playbook_data())
    style = draw(st.sampled_from(["block", "flow", "anchors"]))
    if style == "block":
        text = yaml.safe_dump(data, allow_unicode=True, sort_keys=False, width=80)
    elif style == "flow":
        text = json.dumps(data, ensure_ascii=draw(st.booleans()), allow_nan=True)
    else:
        text = _anchored(data)
    mutation = draw(st.sampled_from(["none", "none", "none", "none", "cut", "double", "indent", "insert", "truncate"]))
    lines = text.splitlines(keepends=True) or [""]
    if mutation == "cut" and len(text) > 1:
        start = draw(st.integers(0, len(text) - 1))
        text = text[:start] + text[start + draw(st.integers(1, 20)):]
    elif mutation == "double":
        i = draw(st.integers(0, len(lines) - 1))
        text = "".join(lines[: i + 1] + lines[i:])
    elif mutation == "indent":
        i = draw(st.integers(0, len(lines) - 1))
        lines[i] = draw(st.sampled_from([" ", "   ", "\t", ""])) + lines[i].lstrip(" ")
        text = "".join(lines)
    elif mutation == "insert":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.one_of(ODD, TEMPLATES, WORD)) + text[at:]
    elif mutation == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    return text


@dataclass
class Verdict:
    kind: str  # "located" | "run" | "cut" (valid, ran past RUN_LIMIT_S, cancelled cleanly) | "bad"
    detail: str = ""


def _located(exc: OrchestratorError) -> Verdict:
    errors = exc.errors if isinstance(exc, PlaybookErrors) else [exc] if isinstance(exc, PlaybookError) else []
    if not errors:
        return Verdict("bad", f"unlocated {type(exc).__name__}: {exc.message[:300]}")
    for error in errors:
        if error.location is None or error.location.file != FILE or error.location.line < 1:
            return Verdict("bad", f"error without a place in {FILE}: {error.message[:300]}")
    return Verdict("located", errors[0].message[:120])


async def judge(text: str, workdir: Path) -> Verdict:
    """Load ``text``; if valid, run it on localhost with a session log in ``workdir``. Never raises."""
    try:
        playbook = load_playbook_text(text, file=FILE)
    except OrchestratorError as exc:
        return _located(exc)
    except Exception:
        return Verdict("bad", "loading raised:\n" + traceback.format_exc(limit=-6))
    session_dir = workdir / uuid.uuid4().hex[:12]
    try:
        engine = compose_runner(playbook, inventory=Inventory(), sinks=[SessionLog(session_dir), ListSink()],
                        options=RunnerOptions(session_id=f"fuzz-{session_dir.name}", session_dir=session_dir,
                                              say=lambda _text: None))
        task = asyncio.ensure_future(engine.run())
        done, _ = await asyncio.wait({task}, timeout=RUN_LIMIT_S)
        if not done:
            engine.cancel()
            outcome = await asyncio.wait_for(task, 30)
            return Verdict("cut", outcome.status)
        outcome = task.result()
    except OrchestratorError as exc:  # the engine refusing a valid-looking playbook with a clear message
        return Verdict("run", f"refused: {exc.message[:120]}")
    except Exception:
        return Verdict("bad", "running raised:\n" + traceback.format_exc(limit=-6))
    from orchestrator.session.reader import read_session

    loaded = read_session(session_dir)
    if loaded.finished is None or loaded.torn_lines or loaded.malformed:
        return Verdict("bad", f"the session log is not whole: {loaded.problems}")
    return Verdict("run", outcome.status)
