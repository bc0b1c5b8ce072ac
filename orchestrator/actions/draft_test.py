"""`draft_test`: measure an EAGLE-3 draft OUTSIDE the server, for several candidate hidden-state
wirings, on the host (torch + transformers there; GPU when available).

```yaml
- draft_test: {target: "{{ target }}", draft: "{{ draft }}", wirings: auto, engine: sglang, steps: 5}
  register: dt       # dt.best.wiring, dt.best.tau_serving, dt.server_wiring, dt.server.tau_serving, dt.verdict
```
Every figure has a 95% interval over prompts (``dt.best.tau_serving_ci`` = [lo, hi], ``acc_ci``, ``alpha_ci``);
wirings whose intervals overlap share a ``tier`` (1 = tied with the best); ``vs_server`` is each wiring's paired
gain over the served wiring; ``dt.decision`` is mismatch | fine | no_signal | inconclusive, with
``dt.prompts_to_decide`` when the sample cannot decide (remote_probes/evaluation/draft_test.py documents the rules).
Figures are scored with the parts SGLang serves (``dt.parts``: embedding, head, d2t, fc and why); where those
differ from the draft's own (``dt.parts.swapped``), each row also has ``as_trained`` and the table shows it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from orchestrator.actions.base import Action, ActionArgs, ActionContext
from orchestrator.actions.probe import run_probe_step
from orchestrator.probes.models import StatesFrom, ceiling_line, no_states_source, states_source_line


class DraftTestArgs(ActionArgs):
    target: str = Field(description="target model directory on the host (HF format)")
    draft: str = Field(description="EAGLE-3 draft checkpoint directory on the host")
    wirings: Literal["auto", "served"] | list[list[int]] | dict[str, list[int]] = Field(
        default="auto", description='"served": only the wiring the engine feeds (the reconcile\'s prediction)')
    engine: Literal["sglang", "vllm"] = "sglang"
    algorithm: Literal["EAGLE3", "EAGLE"] = Field(default="EAGLE3", description="the --speculative-algorithm served: "
                                                  "it decides which embedding, head and d2t are scored")
    steps: int = Field(default=5, ge=1, le=32, description="draft steps K per cycle")
    num_prompts: int | None = Field(default=None, ge=1)
    max_new_tokens: int | None = Field(default=None, ge=2)
    prompts_file: str | None = None
    prompts: list[str] | None = Field(default=None, description="the prompts themselves (a benchmark's), instead of "
                                      "prompts_file")
    chat_template: bool | Literal["auto"] = "auto"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    margin: float = Field(default=0.2, gt=0, lt=10, description="smallest gain over the served wiring called a fault")
    confidence: float = Field(default=0.95, gt=0.5, lt=0.999)
    batch_size: int | None = Field(default=None, ge=1, le=1024, description="prompts generated at once (default 16)")
    counterfactual: bool = Field(default=False, description="score only the served wiring, then with each served part "
                                 "(embedding, head, final norm, d2t, RoPE, attention layout) swapped for the other "
                                 "source (remote_probes/evaluation/counterfactual.py)")
    engine_site: list[str] | None = Field(default=None, description="directories holding the engine's package, "
                                          "searched first for the code that decides each part")
    states_from: StatesFrom | None = Field(default=None, description="take the target's hidden states from a "
                                           "server started with capture: (its states_from) instead of loading the "
                                           "target here: the path for targets that do not fit one process")
    python: str | None = None

    @field_validator("states_from", mode="before")
    @classmethod
    def _no_states(cls, value: Any) -> Any:
        return no_states_source(value)


class DraftTestAction(Action[DraftTestArgs]):
    kind = "draft_test"
    Args = DraftTestArgs
    warm_probes = ("draft_test",)
    summary = "Standalone draft test: acceptance (tau) per candidate wiring, the best one vs what the engine feeds."

    async def run(self, args: DraftTestArgs, ctx: ActionContext) -> dict[str, Any]:
        probe_args = args.model_dump(exclude_none=True, exclude={"python"})
        result = await run_probe_step(ctx, "draft_test", probe_args, python=args.python)
        line = states_source_line(result.get("states"))
        if line:
            ctx.output(line + "\n", "stdout")
        rows = result.get("wirings", [])
        swapped = (result.get("parts") or {}).get("swapped") or []
        for swap in swapped:
            ctx.output(f"served {swap['part']}: {swap['served']} (trained: {swap['trained']}): {swap['why']}\n",
                       "stdout")
        if rows:
            trained_col = f" {'as trained':>10}" if swapped else ""
            ctx.output(f"{'tier':>4} {'wiring':<30} {'tau(served)':>12} {'95% CI':>14} {'vs served':>10}"
                       f"{trained_col}  acc\n", "stdout")
            for row in rows:
                ctx.output(_row(row, bool(swapped)), "stdout")
        if result.get("verdict"):
            ctx.output(f"decision: {result.get('decision')}: {result['verdict']}\n", "stdout")
        bound = ceiling_line(result.get("ceiling"), (result.get("server") or {}).get("tau_serving"))
        if bound:
            ctx.output(bound + "\n", "stdout")
        cf = result.get("counterfactual")
        if cf:
            ctx.output(f"{'part':<10} {'served -> swapped':<64} {'tau':>6} {'95% CI':>12} {'vs served':>10}  "
                       "recovers\n", "stdout")
            for row in cf.get("swaps", []):
                ctx.output(_swap_row(row), "stdout")
            ctx.output(f"counterfactual: {cf.get('verdict')}\n", "stdout")
        return result


def _swap_row(row: dict[str, Any]) -> str:
    """One counterfactual line: the part, what the engine serves and what it was swapped for, with its interval."""
    ci, vs = row.get("tau_serving_ci"), (row.get("vs_served") or {}).get("ratio")
    change = f"{row.get('served')} -> {row.get('swapped')}"[:64]
    tau = row.get("tau_serving")
    return (f"{row.get('part', ''):<10} {change:<64} {f'{tau:.2f}' if tau is not None else '-':>6} "
            f"{f'{ci[0]:.2f}-{ci[1]:.2f}' if ci else 'n/a':>12} {f'{vs:.2f}x' if vs is not None else '':>10}  "
            f"{'yes' if row.get('recovers') else row.get('error') or 'no'}\n")


def _row(row: dict[str, Any], with_trained: bool) -> str:
    """One table line; the "as trained" column only when the served parts differ from the draft's own."""
    acc = " ".join(f"{a:.2f}" for a in (row.get("acc") or [])[:6] if a is not None)
    ci = row.get("tau_serving_ci")
    vs = (row.get("vs_server") or {}).get("ratio")
    own = (row.get("as_trained") or {}).get("tau_serving")
    trained = f" {f'{own:.2f}' if own is not None else '-':>10}" if with_trained else ""
    return (f"{row.get('tier', ''):>4} {row.get('name', '')[:18]:<18} {str(row.get('wiring')):<12}"
            f"{row.get('tau_serving') or 0:>12.2f} {f'{ci[0]:.2f}-{ci[1]:.2f}' if ci else 'n/a':>14} "
            f"{f'{vs:.2f}x' if vs is not None else '':>10}{trained}  {acc}\n")
