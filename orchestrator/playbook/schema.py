"""JSON Schema for playbooks, built from the same pydantic models the loader uses.

A step is ``StepOptions`` plus exactly one action key; the schema says so with ``oneOf`` over the
registered kinds, so editors complete action names and their arguments.
"""

from __future__ import annotations

from typing import Any

from orchestrator.actions import registry
from orchestrator.playbook.models import Hypothesis, StepOptions


def _defs_merge(target: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    target.update(schema.pop("$defs", {}))
    return schema


def playbook_schema() -> dict[str, Any]:
    defs: dict[str, Any] = {}
    options = _defs_merge(defs, StepOptions.model_json_schema(by_alias=True, ref_template="#/$defs/{model}"))
    option_props = options.get("properties", {})
    variants = []
    for kind, action in sorted(registry().items()):
        args = _defs_merge(defs, action.Args.model_json_schema(ref_template="#/$defs/{model}"))
        args.setdefault("title", f"{kind} arguments")
        args["description"] = action.summary or args.get("description", "")
        if action.shorthand:
            args = {"anyOf": [args, {"type": "string", "description": f"shorthand for {{{action.shorthand}: ...}}"}]}
        defs[f"action_{kind}"] = args
        variants.append({
            "type": "object",
            "title": kind,
            "properties": {**option_props, kind: {"$ref": f"#/$defs/action_{kind}"}},
            "required": [kind],
            "additionalProperties": False,
        })
    step = {"oneOf": variants, "description": "A step: options plus exactly one action key."}
    hypothesis = _defs_merge(defs, Hypothesis.model_json_schema(ref_template="#/$defs/{model}"))
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "orchestrator playbook",
        "type": "object",
        "required": ["name"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string"},
            "description": {"type": "string"},
            "hosts": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
            "vars": {"type": "object"},
            "hypotheses": {"type": "array", "items": hypothesis},
            "steps": {"type": "array", "items": {"$ref": "#/$defs/step"}},
            "always": {"type": "array", "items": {"$ref": "#/$defs/step"}},
        },
        "$defs": {**defs, "step": step},
    }
