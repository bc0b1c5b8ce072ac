"""`draft_test`: measure an EAGLE-3 draft OUTSIDE the server, for several candidate hidden-state
wirings, on the host (torch + transformers there; GPU when available).

```yaml
- draft_test: {target: "{{ target }}", draft: "{{ draft }}", wirings: auto, engine: sglang, steps: 5}
  register: dt       # dt.best.wiring, dt.best.tau_serving, dt.server_wiring, dt.server.tau_serving, dt.verdict
```
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from orchestrator.actions.base import Action, ActionArgs, ActionContext
from orchestrator.actions.probe import run_probe_step


class DraftTestArgs(ActionArgs):
    target: str = Field(description="target model directory on the host (HF format)")
    draft: str = Field(description="EAGLE-3 draft checkpoint directory on the host")
    wirings: Literal["auto"] | list[list[int]] | dict[str, list[int]] = "auto"
    engine: Literal["sglang", "vllm"] = "sglang"
    steps: int = Field(default=5, ge=1, le=32, description="draft steps K per cycle")
    num_prompts: int | None = Field(default=None, ge=1)
    max_new_tokens: int | None = Field(default=None, ge=2)
    prompts_file: str | None = None
    chat_template: bool | Literal["auto"] = "auto"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    python: str | None = None


class DraftTestAction(Action[DraftTestArgs]):
    kind = "draft_test"
    Args = DraftTestArgs
    summary = "Standalone draft test: acceptance (tau) per candidate wiring, the best one vs what the engine feeds."

    async def run(self, args: DraftTestArgs, ctx: ActionContext) -> dict[str, Any]:
        probe_args = args.model_dump(exclude_none=True, exclude={"python"})
        result = await run_probe_step(ctx, "draft_test", probe_args, python=args.python)
        rows = result.get("wirings", [])
        if rows:
            ctx.output(f"{'wiring':<26} {'tau(serving)':>12} {'tau':>6}  acc\n", "stdout")
            for row in rows:
                acc = " ".join(f"{a:.2f}" for a in row.get("acc", [])[:6])
                ctx.output(f"{row.get('name', '')[:18]:<18} {str(row.get('wiring')):<8}"
                           f"{row.get('tau_serving', 0):>12.2f} {row.get('tau', 0):>6.2f}  {acc}\n", "stdout")
        if result.get("verdict"):
            ctx.output(f"verdict: {result['verdict']}\n", "stdout")
        return result
