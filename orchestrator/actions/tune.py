"""`tune`: the fastest chain speculative configuration for this draft on this host, predicted, then verified.

```yaml
- tune:
    flags: {speculative-algorithm: EAGLE3, speculative-draft-model-path: "{{ draft }}"}  # or vLLM's speculative-config
    candidates: [1, 2, 3, 4, 5, 6, 7, 8]     # draft tokens per cycle k (SGLang steps k, draft tokens k + 1, topk 1)
    verify: 2                                # best predictions to check (the probe among them: no restart)
    baseline: "{{ base }}"                   # optional: a registered no-speculation bench (saves a restart)
    bench: {n: 12, max_new_tokens: 64, concurrency: 1}
  register: tuned   # tuned.recommended (k, flags, tok_s, speedup), tuned.rows, tuned.cost, tuned.restarts
```

Three kinds of server start, instead of the grid's one per point: the no-speculation baseline (unless given), one
probe at the largest candidate (its accept length, and per-position acceptance where the engine counts it, give the
acceptance profile of every shorter chain too; with the baseline it fits the cost model:
orchestrator/tuning/cost_model.py), and a restart for each of the ``verify`` best predicted configurations that is
not the probe (the probe is a measured point already, so it is verified without a restart). The recommendation is the fastest MEASURED configuration;
whether it beats the baseline is decided on intervals (disjoint: yes; overlapping: inconclusive), and predicted
and measured are compared on intervals for every measured point.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pydantic import Field, model_validator

from orchestrator.actions.base import Action, ActionContext, StepFailed
from orchestrator.actions.bench import BenchSettings
from orchestrator.actions.server import ServerLaunchArgs, launch_parts
from orchestrator.errors import OrchestratorError


class TuneArgs(ServerLaunchArgs):
    candidates: list[int] = Field(default_factory=lambda: list(range(1, 9)),
                                  description="draft tokens per cycle to consider (chain, topk 1)")
    probe: int | None = Field(default=None, ge=1, description="the k benchmarked to fit the model (default: the "
                                                              "largest candidate, so every position is measured)")
    verify: int = Field(default=2, ge=0, le=64, description="best predicted configurations to measure; each one "
                        "not the probe is a restart (all of them: the brute-force grid, for comparison)")
    baseline: dict[str, Any] | None = Field(default=None, description="a registered no-speculation bench result "
                                            "(with per_request), instead of a baseline restart")
    bench: BenchSettings = Field(default_factory=lambda: BenchSettings(n=12))

    @model_validator(mode="after")
    def _shape(self) -> TuneArgs:
        if not self.candidates or any(k < 1 for k in self.candidates):
            raise ValueError("candidates: a non-empty list of draft token counts >= 1")
        if len(set(self.candidates)) > 64:
            raise ValueError("candidates: at most 64 configurations")
        return self


def chain_flags(flags: dict[str, Any], k: int) -> dict[str, Any]:
    """The base flags with a chain of ``k`` draft tokens: vLLM's ``num_speculative_tokens`` inside
    ``speculative-config`` when the flags carry one, else SGLang's steps / draft tokens with topk 1."""
    from orchestrator.servers.flags import flag_key
    from orchestrator.servers.vllm import speculative_config

    for name, value in flags.items():
        if flag_key(str(name)) == "speculative_config":
            return {**flags, name: {**(speculative_config(value) or {}), "num_speculative_tokens": k}}
    return {**flags, "speculative-num-steps": k, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": k + 1}


def requests_of(result: dict[str, Any], *, speculative: bool) -> list[Any]:
    """The bench result's completed requests as cost-model requests."""
    from orchestrator.tuning.cost_model import Request

    out = []
    for row in result.get("per_request") or []:
        tokens, seconds = row.get("completion_tokens"), row.get("latency")
        if not tokens or not seconds:
            continue
        accept = row.get("accept_length") if speculative else None
        if speculative and accept is None:
            accept = result.get("accept_length")
        counts = row.get("spec_counts") if speculative else None
        drafts, accepted = None, None
        if isinstance(counts, dict) and isinstance(counts.get("accepted"), list) and counts.get("drafts"):
            drafts, accepted = int(counts["drafts"]), tuple(int(a) for a in counts["accepted"])
        out.append(Request(tokens=int(tokens), seconds=float(seconds),
                           accept_length=float(accept) if accept is not None else None,
                           drafts=drafts, accepted_per_position=accepted))
    return out


def served_profile(result: dict[str, Any]) -> list[float] | None:
    """Per-position acceptance r_j the engine counted (vLLM's spec_decode counters), when the bench has it."""
    stats = result.get("spec_decode") or {}
    rates = stats.get("per_position_rates") or stats.get("per_position")
    if isinstance(rates, list) and rates and all(isinstance(r, (int, float)) for r in rates):
        return [float(r) for r in rates]
    return None


def _overlap(a: list[float] | None, b: list[float] | None) -> bool | None:
    if not a or not b:
        return None
    return a[0] <= b[1] and b[0] <= a[1]


class TuneAction(Action[TuneArgs]):
    kind = "tune"
    Args = TuneArgs
    summary = "Predict the fastest chain speculative configuration from a baseline and one probe, then verify a few."

    async def run(self, args: TuneArgs, ctx: ActionContext) -> dict[str, Any]:
        from orchestrator.tuning.cost_model import fit, per_request_rate, predict

        try:
            adapter, base_spec, client_python, auto = launch_parts(args, ctx)
        except OrchestratorError as exc:
            raise StepFailed(exc.message) from None
        ks = sorted(set(args.candidates))
        k_probe = args.probe or ks[-1]
        restarts = 0
        if args.baseline is not None:
            base_result, base_source = args.baseline, "given"
        else:
            base_result = await self._measure(args, ctx, adapter, base_spec, client_python, auto, "baseline",
                                              adapter.baseline_flags(args.flags))
            restarts, base_source = restarts + 1, "measured"
        baseline = requests_of(base_result, speculative=False)
        if not baseline:
            raise StepFailed("tune: the baseline benchmark has no completed request with tokens and latency")
        probe_result = await self._measure(args, ctx, adapter, base_spec, client_python, auto, f"k={k_probe}",
                                           chain_flags(args.flags, k_probe))
        restarts += 1
        probe = requests_of(probe_result, speculative=True)
        try:
            model = fit(baseline, probe, k_probe, served_profile(probe_result))
        except ValueError as exc:
            raise StepFailed(f"tune: {exc}") from None
        grid = sorted(set(ks + [k_probe]))
        predictions = {p.k: p for p in predict(model, grid)}
        measured: dict[int, dict[str, Any]] = {k_probe: probe_result}
        # Up to `verify` restarts, one at a time: the best predicted configuration not measured yet among the model's
        # current top `verify` (the probe is measured already: it is one of them when it ranks there). Each
        # measurement refits the per-cycle and per-token costs (cost_model: a second chain length tells them
        # apart), so the next pick is the better model's; each verified point keeps the prediction made BEFORE it
        # was measured, the only one its measurement tests.
        top = sorted(predictions, key=lambda k: -predictions[k].tok_s)[:args.verify]
        verified: list[int] = []
        before: dict[int, Any] = {}
        rankings: list[list[int]] = []  # the model's ranking at each pick (bench/tune_vs_grid.py --replay reads it)
        while len(verified) < args.verify:
            ranking = sorted(predictions, key=lambda k: -predictions[k].tok_s)
            rankings.append(ranking)
            pending = [k for k in ranking[:args.verify] if k not in measured]
            if not pending:
                break
            k = pending[0]
            before[k] = predictions[k]
            measured[k] = await self._measure(args, ctx, adapter, base_spec, client_python, auto, f"k={k}",
                                              chain_flags(args.flags, k), tolerate=True)
            verified.append(k)
            restarts += 1
            points = {m: requests_of(r, speculative=True) for m, r in measured.items()
                      if m != k_probe and r.get("status") == "ok"}
            try:
                model = fit(baseline, probe, k_probe, served_profile(probe_result), points=points)
            except ValueError as exc:  # a verify point without usable requests: say so, keep the last model
                ctx.output(f"tune [k={k}]: not used to refit the costs ({exc})\n")
            predictions = {p.k: p for p in predict(model, grid)}
        final = dict(predictions)
        predictions.update(before)
        base_rate, base_ci = per_request_rate(baseline)
        result = self._summary(args, model, predictions, measured, base_rate, base_ci, k_probe)
        for row in result["rows"]:  # the curve of the last model (every measurement in it), beside the prediction
            row.update(model_tok_s=final[row["k"]].tok_s, model_tok_s_ci=final[row["k"]].tok_s_ci)  # made before
        result.update(restarts=restarts, baseline={"tok_s": base_rate, "tok_s_ci": base_ci, "source": base_source},
                      restarts_counted={"baseline": int(base_source == "measured"), "probe": 1,
                                        "verify": verified, "top_predicted": top, "rankings": rankings,
                                        "what": "server starts of this step: the no-speculation baseline (unless "
                                                "given), the probe at k_probe, and each top prediction not "
                                                "already measured, one at a time, the costs refitted after each"})
        # before the recommendation, which stays the last line (the playbooks' `because`)
        result["lines"].insert(len(result["lines"]) - 1 if result["recommended"] else len(result["lines"]),
                               f"tune: {restarts} server starts (baseline {base_source}; the probe k={k_probe}; "
                               f"verify restarts {verified or 'none'} for the top predicted {top}); the grid of "
                               f"these candidates is {len(set(ks) | {k_probe}) + 1} (one per k plus the baseline)")
        self._write(ctx, result)
        for line in result["lines"]:
            ctx.output(line + "\n")
        return result

    async def _measure(self, args: TuneArgs, ctx: ActionContext, adapter: Any, base_spec: Any, client_python: str,
                       auto: bool, label: str, flags: dict[str, Any], *, tolerate: bool = False) -> dict[str, Any]:
        """Start -> bench -> stop. A verify point that fails is a row with its reason (``tolerate``); the baseline
        or the probe failing fails the step, since nothing can be predicted without them."""
        from orchestrator.actions.sweep import start_bench_stop

        ctx.output(f"tune [{label}]: starting\n")
        try:
            _record, result = await start_bench_stop(args, ctx, adapter, replace(base_spec, flags=dict(flags)),
                                                     client_python, auto, name=f"tune-{ctx.step_id}-"
                                                     f"{label.replace('=', '')}")
        except (StepFailed, OrchestratorError) as exc:
            reason = exc.message.splitlines()[0]
            if tolerate:
                ctx.output(f"tune [{label}]: failed ({reason})\n")
                return {"status": "failed", "reason": reason, "flags": flags}
            raise StepFailed(f"tune [{label}]: {reason}") from None
        ctx.output(f"tune [{label}]: {result.get('tok_s')} tok/s, accept length {result.get('accept_length')}\n")
        return {**result, "status": "ok", "flags": flags}

    @staticmethod
    def _summary(args: TuneArgs, model: Any, predictions: dict[int, Any], measured: dict[int, dict[str, Any]],
                 base_rate: float, base_ci: list[float], k_probe: int) -> dict[str, Any]:
        from orchestrator.tuning.cost_model import per_request_rate

        rows = []
        for k, p in sorted(predictions.items()):
            row: dict[str, Any] = {"k": k, "flags": chain_flags(args.flags, k), "predicted_accept_length": p.accept_length,
                                   "predicted_accept_length_ci": p.accept_length_ci, "predicted_tok_s": p.tok_s,
                                   "predicted_tok_s_ci": p.tok_s_ci, "extrapolated": p.extrapolated,
                                   "probe": k == k_probe}
            got = measured.get(k)
            if got is not None and got.get("status") == "ok":
                rate, ci = per_request_rate(requests_of(got, speculative=True))
                row.update(measured_tok_s=rate, measured_tok_s_ci=ci, measured_accept_length=got.get("accept_length"),
                           measured_accept_length_ci=got.get("accept_length_ci"))
                row["agrees"] = _overlap(ci, p.tok_s_ci)
            elif got is not None:
                row.update(measured_status="failed", reason=got.get("reason"))
            rows.append(row)
        done = [r for r in rows if r.get("measured_tok_s") is not None]
        best = max(done, key=lambda r: r["measured_tok_s"]) if done else None
        per_cycle = (f"speculation adds {model.c0 * 1000:.1f} ms [{model.c0_ci[0] * 1000:.1f}, "
                     f"{model.c0_ci[1] * 1000:.1f}] per cycle and " if len(model.ks_fitted) > 1 else
                     "(one chain length measured: no per-cycle cost can be told apart, assumed 0) ")
        lines = [f"tune: cost per plain step {model.t1 * 1000:.1f} ms [{model.t1_ci[0] * 1000:.1f}, "
                 f"{model.t1_ci[1] * 1000:.1f}], {per_cycle}each draft token adds {model.c * 1000:.1f} ms "
                 f"[{model.c_ci[0] * 1000:.1f}, {model.c_ci[1] * 1000:.1f}] (fitted on k={model.ks_fitted}); "
                 f"acceptance profile: {model.profile_source}"]
        for r in rows:
            measured_text = (f"measured {r['measured_tok_s']:.1f} [{r['measured_tok_s_ci'][0]:.1f}, "
                             f"{r['measured_tok_s_ci'][1]:.1f}] ({'agrees' if r['agrees'] else 'DISAGREES'})"
                             if r.get("measured_tok_s") is not None else "not measured")
            lines.append(f"tune k={r['k']}: predicted {r['predicted_tok_s']:.1f} [{r['predicted_tok_s_ci'][0]:.1f}, "
                         f"{r['predicted_tok_s_ci'][1]:.1f}] tok/s, accept {r['predicted_accept_length']:.2f}"
                         f"{' (extrapolated)' if r['extrapolated'] else ''}; {measured_text}")
        recommended = None
        if best is not None:
            best["recommended"] = True
            lo, hi = best["measured_tok_s_ci"]
            beats = "yes" if lo > base_ci[1] else "no" if hi < base_ci[0] else "inconclusive"
            speedup = round(best["measured_tok_s"] / base_rate, 3) if base_rate else None
            tied = [r["k"] for r in done if r is not best and _overlap(r["measured_tok_s_ci"], best["measured_tok_s_ci"])]
            recommended = {"k": best["k"], "flags": best["flags"], "tok_s": best["measured_tok_s"],
                           "tok_s_ci": best["measured_tok_s_ci"], "predicted_tok_s": best["predicted_tok_s"],
                           "speedup": speedup, "beats_baseline": beats, "tied_with": tied}
            if beats == "no":
                lines.append(f"tune: no configuration beats the baseline ({base_rate:.1f} tok/s [{base_ci[0]:.1f}, "
                             f"{base_ci[1]:.1f}]): the best, k={best['k']}, measured {best['measured_tok_s']:.1f}; "
                             f"speculating costs {model.c0 / model.t1:.2f} plain steps per cycle and each draft token "
                             f"{model.c / model.t1:.2f} more, and the draft's acceptance "
                             f"({', '.join(f'{x:.2f}' for x in model.profile)}) does not repay it")
            else:
                lines.append(f"tune: recommended k={best['k']}: {best['measured_tok_s']:.1f} tok/s measured "
                             f"({speedup}x the baseline {base_rate:.1f}; beats it on intervals: {beats}), "
                             f"{best['predicted_tok_s']:.1f} predicted"
                             + (f"; tied on intervals with k={tied}" if tied else ""))
        return {"rows": rows, "recommended": recommended, "lines": lines,
                "cost": {"t1_s": round(model.t1, 6), "t1_ci": model.t1_ci, "c_s": round(model.c, 6), "c_ci": model.c_ci,
                         "c0_s": round(model.c0, 6), "c0_ci": model.c0_ci, "ks_fitted": model.ks_fitted,
                         "k_probe": k_probe},
                "profile": {"rates": [round(x, 4) for x in model.profile], "source": model.profile_source},
                # the probe's prediction is fitted to its own benchmark, so only the other points test the model
                "agreement": {"measured": len(done), "agree": sum(1 for r in done if r.get("agrees")),
                              "independent": sum(1 for r in done if not r["probe"]),
                              "independent_agree": sum(1 for r in done if not r["probe"] and r.get("agrees"))}}

    @staticmethod
    def _write(ctx: ActionContext, result: dict[str, Any]) -> None:
        import json

        from orchestrator.tuning.chart import svg_curve

        if ctx.session_dir is None:
            return
        directory = ctx.session_dir / "artifacts"
        directory.mkdir(parents=True, exist_ok=True)
        stem = f"{ctx.step_id}-{ctx.host}-tune".replace("/", "_")
        paths = {"chart": directory / f"{stem}.svg", "table": directory / f"{stem}.json"}
        paths["chart"].write_text(svg_curve(result["rows"], result.get("baseline"),
                                            title=f"tune {ctx.step_name} on {ctx.host}"), encoding="utf-8")
        paths["table"].write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
        result["artifacts"] = []
        for kind, path in paths.items():
            rel = str(path.relative_to(ctx.session_dir))
            result["artifacts"].append(rel)
            if ctx.emit is not None:
                from orchestrator.events import ArtifactSaved

                ctx.emit(ArtifactSaved(path=rel, kind=f"tune_{kind}", step_id=ctx.step_id,
                                       description=f"tuner: predicted vs measured ({kind})"))
