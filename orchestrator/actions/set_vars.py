"""`set`: compute variables from other variables and registered results (runs once, on the controller).

```yaml
- set: {speedup: "{{ spec.tok_s / base.tok_s }}", fixed_flags: {speculative-num-steps: 7}}
```
"""

from __future__ import annotations

from typing import Any

from pydantic import RootModel, model_validator

from orchestrator.actions.base import Action, ActionContext


class SetArgs(RootModel[dict[str, Any]]):
    @model_validator(mode="after")
    def _identifiers(self) -> SetArgs:
        for name in self.root:
            if not str(name).isidentifier():
                raise ValueError(f"variable name {name!r} is not an identifier")
        return self


class SetAction(Action[Any]):
    kind = "set"
    Args = SetArgs
    per_host = False
    summary = "Compute variables (each value templated to its native type) for later steps."

    async def run(self, args: Any, ctx: ActionContext) -> dict[str, Any]:
        values = dict(args.root)
        ctx.variables.update(values)
        return values
