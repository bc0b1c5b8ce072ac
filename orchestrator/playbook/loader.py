"""Load a playbook file: YAML -> located, validated models. Every mistake is collected with its
file:line:col and reported together (PlaybookErrors), so a user fixes them in one pass."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.actions import get_action, registry
from orchestrator.errors import PlaybookError, PlaybookErrors, UserInputError
from orchestrator.events import StepSection
from orchestrator.playbook.bundled import resolve_playbook
from orchestrator.playbook.models import (
    VERDICT_KEYS,
    Playbook,
    PlaybookHeader,
    SecretVar,
    Step,
    StepOptions,
)
from orchestrator.playbook.yamlio import Locator, load_yaml, load_yaml_text, validation_errors
from orchestrator.templating import called_facts, check_syntax, has_template, iter_strings, referenced_names
from orchestrator.verdicts.registry import fact_named, rule_named

OPTION_KEYS = tuple(f.alias or name for name, f in StepOptions.model_fields.items())
# Names every template may use without declaring them.
RUNTIME_NAMES = frozenset(
    {"inventory_hostname", "host", "hostvars", "env", "session", "playbook", "result", "vars", "hosts", "fact"}
)
#: names only evidence rules see (hypotheses/board.py): the board's states, and the hypothesis a rule decides
EVIDENCE_NAMES = frozenset({"hypothesis_state", "hypothesis"})


def _suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _value_at(data: Any, path: tuple[Any, ...]) -> Any:
    node = data
    for part in path:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
    return node


def _path_is_templated(data: Any, path: tuple[Any, ...]) -> bool:
    """True when a validation error sits on (or inside) a templated string: checked at run time."""
    for cut in range(len(path), -1, -1):
        if has_template(_value_at(data, path[:cut])):
            return True
    return False


class _Loader:
    def __init__(self, locate: Locator, file: str, extra_names: Iterable[str]) -> None:
        self.locate = locate
        self.file = file
        self.errors: list[PlaybookError] = []
        self.extra_names = set(extra_names)

    def error(self, message: str, path: tuple[Any, ...], *, key: bool = False) -> None:
        self.errors.append(PlaybookError(message, self.locate(path, key)))

    def parse_step(self, raw: Any, section: StepSection, index: int) -> Step | None:
        path = (section, index)
        if not isinstance(raw, dict):
            self.error(f"a step must be a mapping with one action key (got {type(raw).__name__})", path)
            return None
        kinds = registry()
        action_keys = [k for k in raw if k in kinds]
        unknown = [k for k in raw if k not in kinds and k not in OPTION_KEYS]
        for key in unknown:
            self.error(
                f"unknown key {key!r}: not a step option or action kind{_suggest(str(key), [*kinds, *OPTION_KEYS])}",
                (*path, key),
                key=True,
            )
        # Options first, so their mistakes are reported even when the action key is missing or misspelt.
        options = {k: v for k, v in raw.items() if k in OPTION_KEYS}
        ok = True
        try:
            StepOptions.model_validate(options)
        except ValidationError as exc:
            self.errors.extend(validation_errors(exc, self.locate, self.file, prefix=path).errors)
            ok = False
        if not action_keys:
            if not unknown:
                self.error(f"step has no action; expected one of: {', '.join(sorted(kinds))}", path)
            return None
        if len(action_keys) > 1:
            self.error(f"step has more than one action ({', '.join(action_keys)}); split it into steps", (*path, action_keys[1]))
            return None
        kind = action_keys[0]
        action_cls = get_action(kind)
        assert action_cls is not None
        args = action_cls.normalize(raw[kind])
        self._check_args(action_cls, args, raw[kind], (*path, kind))
        if not ok:
            return None
        step = Step.model_validate({**options, "action": kind, "args": args})
        step.section = section
        step.step_id = f"{'s' if section == 'steps' else 'a'}{index + 1}"
        step.location = self.locate(path)
        return step

    def _check_args(self, action_cls: Any, args: Any, original: Any, path: tuple[Any, ...]) -> None:
        if has_template(args) and not isinstance(original, dict):
            return  # a whole-args template is validated when it renders
        try:
            action_cls.Args.model_validate(args)
        except ValidationError as exc:
            for err in exc.errors():
                loc = tuple(p for p in err.get("loc", ()) if p != "root")
                if _path_is_templated(args, loc) or (isinstance(original, str) and has_template(original)):
                    continue
                from orchestrator.playbook.yamlio import clean_loc, describe_pydantic_error

                loc = clean_loc(loc)
                target = path if not isinstance(original, dict) else (*path, *loc)
                message = describe_pydantic_error({**err, "loc": loc})
                self.errors.append(PlaybookError(message, self.locate(target, err.get("type") == "extra_forbidden")))

    def check_hypotheses(self, playbook: Playbook) -> None:
        """``case_of`` names another declared hypothesis."""
        ids = [h.id for h in playbook.hypotheses]
        for index, hypothesis in enumerate(playbook.hypotheses):
            if hypothesis.case_of is not None and (hypothesis.case_of not in ids or hypothesis.case_of == hypothesis.id):
                what = "itself" if hypothesis.case_of == hypothesis.id else \
                    f"unknown hypothesis {hypothesis.case_of!r}{_suggest(hypothesis.case_of, ids)}"
                self.error(f"case_of names {what}", ("hypotheses", index, "case_of"))

    def check_templates(self, playbook: Playbook, raw_steps: dict[str, list[Any]]) -> None:
        known = set(playbook.vars) | set(playbook.secret_vars) | RUNTIME_NAMES | self.extra_names
        for step in playbook.all_steps():
            if step.register_as:
                known.add(step.register_as)
            if step.action == "set" and isinstance(step.args, dict):
                known.update(step.args)
        for section, steps in (("steps", playbook.steps), ("always", playbook.always)):
            for step in steps:
                index = int(step.step_id[1:]) - 1
                base: tuple[Any, ...] = (section, index)
                raw = raw_steps[section][index]
                for key in ("when", "until"):
                    value = raw.get(key)
                    if isinstance(value, str):
                        self._check_one(value, (*base, key), known, expression=True)
                for sub_path, text in iter_strings(raw.get(step.action)):
                    self._check_one(text, (*base, step.action, *sub_path), known, expression=False)
                for hid, rule in (raw.get("evidence") or {}).items():
                    if playbook.hypothesis(str(hid)) is None:
                        ids = [h.id for h in playbook.hypotheses]
                        self.error(f"evidence for unknown hypothesis {hid!r}{_suggest(str(hid), ids)}", (*base, "evidence", hid))
                        continue
                    if not isinstance(rule, dict):
                        continue
                    if rule.get("rule") is not None:
                        self._check_rule_name(rule, str(hid), (*base, "evidence", hid))
                        continue
                    if not any(rule.get(k) for k in VERDICT_KEYS):
                        self.error(f"evidence for {hid!r} needs a registered 'rule' or one of: "
                                   f"{', '.join(VERDICT_KEYS)}", (*base, "evidence", hid))
                    for key in (*VERDICT_KEYS, "because"):
                        if isinstance(rule.get(key), str):
                            self._check_one(rule[key], (*base, "evidence", hid, key), known | EVIDENCE_NAMES,
                                            expression=key != "because")
                name = raw.get("name")
                if isinstance(name, str):
                    self._check_one(name, (*base, "name"), known, expression=False)

    def _check_rule_name(self, rule: dict[str, Any], hid: str, path: tuple[Any, ...]) -> None:
        """``{rule: NAME}``: a registered rule that may decide ``hid``, and no expressions beside it."""
        others = [k for k in (*VERDICT_KEYS, "because") if rule.get(k) is not None]
        if others:
            self.error(f"evidence for {hid!r}: give a registered 'rule' or expressions, not both ({', '.join(others)})",
                       (*path, others[0]))
        name = rule["rule"]
        if not isinstance(name, str):
            return  # the model's own validation says what it should be
        try:
            registered = rule_named(name)
        except UserInputError as exc:
            self.error(exc.message, (*path, "rule"))
            return
        if registered.decides and hid not in registered.decides:
            self.error(f"verdict rule {name!r} decides {', '.join(registered.decides)}, not {hid!r}", (*path, "rule"))

    def _check_one(self, text: str, path: tuple[Any, ...], known: set[str], *, expression: bool) -> None:
        if not expression and not has_template(text):
            return
        problem = check_syntax(text.strip().removeprefix("{{").removesuffix("}}") if expression and text.strip().startswith("{{") else text, expression=expression)
        if problem:
            self.error(f"{'bad expression' if expression else 'bad template'}: {problem}", path)
            return
        source = text.strip()
        if expression and source.startswith("{{") and source.endswith("}}"):
            source = source[2:-2]
        for name in sorted(referenced_names(source, expression=expression) - known):
            self.error(f"undefined variable {name!r}{_suggest(name, known)}", path)
        for name in sorted(called_facts(source, expression=expression)):
            try:
                fact_named(name)
            except UserInputError as exc:
                self.error(exc.message, path)


def _finish(data: Any, locate: Locator, file: str, extra_names: Iterable[str]) -> Playbook:
    if not isinstance(data, dict):
        raise PlaybookError("a playbook must be a mapping with at least 'name' and 'steps'", locate(()))
    loader = _Loader(locate, file, extra_names)
    try:
        header = PlaybookHeader.model_validate(data)
    except ValidationError as exc:
        raise validation_errors(exc, locate, file) from None

    seen_h: dict[str, int] = {}
    for i, hyp in enumerate(header.hypotheses):
        if hyp.id in seen_h:
            loader.error(f"duplicate hypothesis id {hyp.id!r} (first at hypotheses[{seen_h[hyp.id]}])", ("hypotheses", i, "id"))
        seen_h.setdefault(hyp.id, i)

    plain_vars, secret_vars = {}, {}
    for name, value in header.vars.items():
        if isinstance(value, dict) and value.get("secret") is True:
            try:
                secret_vars[name] = SecretVar.model_validate(value)
            except ValidationError as exc:
                loader.errors.extend(validation_errors(exc, locate, file, prefix=("vars", name)).errors)
        else:
            plain_vars[name] = value

    steps = [s for i, raw in enumerate(header.steps) if (s := loader.parse_step(raw, "steps", i))]
    always = [s for i, raw in enumerate(header.always) if (s := loader.parse_step(raw, "always", i))]

    seen_names: dict[str, str] = {}
    for step in [*steps, *always]:
        if step.name:
            if step.name in seen_names:
                idx = int(step.step_id[1:]) - 1
                loader.error(f"duplicate step name {step.name!r} (also {seen_names[step.name]})", (step.section, idx, "name"))
            seen_names.setdefault(step.name, f"{step.section}[{int(step.step_id[1:]) - 1}]")
    registers: dict[str, str] = {}
    for step in [*steps, *always]:
        if step.register_as and step.register_as in plain_vars:
            idx = int(step.step_id[1:]) - 1
            loader.error(f"register {step.register_as!r} would overwrite the variable of the same name", (step.section, idx, "register"))
        if step.register_as:
            registers.setdefault(step.register_as, step.step_id)

    playbook = Playbook(
        name=header.name, description=header.description, hosts=header.hosts, vars=plain_vars,
        secret_vars=secret_vars, hypotheses=header.hypotheses, steps=steps, always=always, path=file,
    )
    loader.check_hypotheses(playbook)
    loader.check_templates(playbook, {"steps": header.steps, "always": header.always})
    if loader.errors:
        loader.errors.sort(key=lambda e: (e.location.line, e.location.col) if e.location else (0, 0))
        raise PlaybookErrors(loader.errors)
    return playbook


def load_playbook(path: str | Path, *, extra_names: Iterable[str] = ()) -> Playbook:
    """Load and validate a playbook. Raises PlaybookError/PlaybookErrors (exit code 2) for any mistake.

    ``extra_names`` are variables that will exist at run time (inventory and ``-e`` vars). ``path`` may name a
    bundled playbook (``eagle3``) where no such file exists.
    """
    path = resolve_playbook(path)
    data, locate = load_yaml(path)
    return _finish(data, locate, str(path), extra_names)


def load_playbook_text(text: str, *, file: str = "<playbook>", extra_names: Iterable[str] = ()) -> Playbook:
    data, locate = load_yaml_text(text, file)
    return _finish(data, locate, file, extra_names)
