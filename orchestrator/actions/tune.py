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
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from orchestrator.actions.base import Action, ActionContext, StepFailed
from orchestrator.actions.bench import BenchSettings
from orchestrator.actions.server import ServerLaunchArgs, launch_parts
from orchestrator.errors import OrchestratorError
from orchestrator.tuning.cost_model import per_request_rate


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
    topk: list[int] = Field(default_factory=lambda: [1], description="SGLang's --speculative-eagle-topk values; "
                            "above 1 adds trees of each candidate's steps (orchestrator/tuning/tree_space.py)")
    draft_tokens: list[int] = Field(default_factory=lambda: [8, 16], description="the trees' "
                                    "--speculative-num-draft-tokens budgets (those SGLang serves for the steps and "
                                    "topk)")
    concurrency: list[int] = Field(default_factory=list, description="the concurrency profile: every server start "
                                   "is benchmarked at each (one start, one bench per concurrency), and the costs are "
                                   "fitted, predicted, verified and recommended per concurrency, with the crossover "
                                   "where speculation stops paying (default: the bench's one concurrency)")
    concurrency_mix: dict[int, float] = Field(default_factory=dict, description="your traffic's share at each "
                                              "concurrency (e.g. {1: 0.2, 4: 0.5, 16: 0.3}; its keys are the "
                                              "profile when concurrency is not given): the one configuration to "
                                              "deploy for that mix (default: equal shares of the profile)")
    warm_up: bool = Field(default=True, description="one untimed batch of short requests at each concurrency "
                          "before its measured benchmark, as bench_speculative.py warms up each batch size: a fresh "
                          "server's first batch of a shape pays one-time costs")

    def profile(self) -> list[int]:
        """The concurrencies to tune for, ascending (the bench's own when no profile is given)."""
        return sorted(set(self.concurrency) or set(self.concurrency_mix)) or [self.bench.concurrency]

    @model_validator(mode="after")
    def _shape(self) -> TuneArgs:
        if not self.candidates or any(k < 1 for k in self.candidates):
            raise ValueError("candidates: a non-empty list of draft token counts >= 1")
        if len(set(self.candidates)) > 64:
            raise ValueError("candidates: at most 64 configurations")
        if not self.topk or any(t < 1 for t in self.topk) or any(b < 2 for b in self.draft_tokens):
            raise ValueError("topk: values >= 1; draft_tokens: budgets >= 2")
        if any(c < 1 or c > 1024 for c in self.concurrency) or len(set(self.concurrency)) > 8:
            raise ValueError("concurrency: at most 8 values, each 1..1024")
        if self.concurrency_mix:
            if any(w < 0 for w in self.concurrency_mix.values()) or sum(self.concurrency_mix.values()) <= 0:
                raise ValueError("concurrency_mix: shares >= 0, not all 0")
            if any(c < 1 or c > 1024 for c in self.concurrency_mix) or len(self.concurrency_mix) > 8:
                raise ValueError("concurrency_mix: at most 8 concurrencies, each 1..1024")
            if self.concurrency and set(self.concurrency) != set(self.concurrency_mix):
                raise ValueError(f"concurrency_mix: its concurrencies {sorted(self.concurrency_mix)} are not the "
                                 f"profile's {sorted(set(self.concurrency))}")
        if self.baseline is not None and len(self.profile()) > 1:
            raise ValueError("baseline: a registered bench holds one concurrency; with a concurrency profile the "
                             "tuner measures its own baseline at each")
        if any(t > 1 for t in self.topk) and not self.draft_tokens:
            raise ValueError("draft_tokens: a tree (topk > 1) needs at least one budget")
        if any(t > 1 for t in self.topk) and isinstance(self.flags, dict):
            from orchestrator.servers.flags import flag_key

            if any(flag_key(str(name)) == "speculative_config" for name in self.flags):
                raise ValueError("topk: a topk above 1 asks for trees, which the installed vLLM does not draft "
                                 "(vLLM 0.32 and 0.33 have num_speculative_tokens only; 0.11's "
                                 "speculative_token_tree needs its GPU tree_attn backend): tune vLLM's chains with "
                                 "topk [1]")
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


def paste_flags(flags: dict[str, Any]) -> str:
    """The recommended configuration's speculative flags as a shell-quoted command-line fragment, ready to paste
    after the engine's launch command (servers/flags.py ``flags_to_argv``: a vLLM speculative-config as one JSON
    word)."""
    import shlex

    from orchestrator.servers.flags import flag_key, flags_to_argv

    spec = {k: v for k, v in flags.items() if flag_key(str(k)).startswith("speculative_")}
    return " ".join(shlex.quote(word) for word in flags_to_argv(spec))


def requests_of(result: dict[str, Any], *, speculative: bool) -> list[Any]:
    """The bench result's completed requests as cost-model requests."""
    from orchestrator.tuning.cost_model import Request

    out = []
    for row in result.get("per_request") or []:
        tokens, seconds = row.get("completion_tokens"), row.get("latency")
        if not tokens or not seconds:
            continue
        accept = row.get("accept_length") if speculative else None
        if speculative and accept is None:  # the run's mean; vLLM above concurrency 1: its counters over the run
            accept = result.get("accept_length") or result.get("server_accept_length") or \
                (result.get("spec_decode") or {}).get("accept_length")
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


def _ranked(predictions: dict[int, Any]) -> list[int]:
    return sorted(predictions, key=lambda k: -predictions[k].tok_s)


def _pending(rankings: list[list[Any]], verify: int, measured: Any) -> list[Any]:
    """The configurations to verify next, best first: rank by rank over the concurrencies' rankings, each one in
    some concurrency's top ``verify`` and not measured yet (one concurrency: its top ``verify`` not measured)."""
    out: list[Any] = []
    for rank in range(verify):
        for ranking in rankings:
            if rank < len(ranking) and ranking[rank] not in measured and ranking[rank] not in out:
                out.append(ranking[rank])
    return out


class _Run:
    """One tune step's server starts: each configuration started once, benchmarked at every concurrency of the
    profile, stopped."""

    def __init__(self, args: TuneArgs, ctx: ActionContext, adapter: Any, base_spec: Any, client_python: str,
                 auto: bool) -> None:
        self.args, self.ctx, self.adapter = args, ctx, adapter
        self.base_spec, self.client_python, self.auto = base_spec, client_python, auto
        self.profile = args.profile()

    def at(self, c: int) -> str:
        return f" at concurrency {c}" if len(self.profile) > 1 else ""

    async def measure(self, label: str, flags: dict[str, Any], *, tolerate: bool = False) -> dict[int, dict[str, Any]]:
        """Start -> bench at each concurrency -> stop. A verify point that fails is a row with its reason at every
        concurrency (``tolerate``); the baseline or the probe failing fails the step, since nothing can be
        predicted without them."""
        from orchestrator.actions.sweep import start_bench_each
        from orchestrator.tuning import server_name

        ctx, args = self.ctx, self.args
        ctx.output(f"tune [{label}]: starting\n")
        try:
            results = await start_bench_each(
                args, ctx, self.adapter, replace(self.base_spec, flags=dict(flags)), self.client_python, self.auto,
                name=server_name(ctx.step_id, label), concurrencies=self.profile,
                warm_up=args.warm_up)
        except (StepFailed, OrchestratorError) as exc:
            reason = exc.message.splitlines()[0]
            if tolerate:
                ctx.output(f"tune [{label}]: failed ({reason})\n")
                return {c: {"status": "failed", "reason": reason, "flags": flags} for c in self.profile}
            raise StepFailed(f"tune [{label}]: {reason}") from None
        for c, result in results.items():
            ctx.output(f"tune [{label}]{self.at(c)}: {result.get('tok_s')} tok/s, accept length "
                       f"{result.get('accept_length')}\n")
        return {c: {**result, "status": "ok", "flags": flags} for c, result in results.items()}


class TuneAction(Action[TuneArgs]):
    kind = "tune"
    Args = TuneArgs
    summary = "Predict the fastest chain speculative configuration from a baseline and one probe, then verify a few."

    async def run(self, args: TuneArgs, ctx: ActionContext) -> dict[str, Any]:
        from orchestrator.tuning.cost_model import fit, predict

        try:
            adapter, base_spec, client_python, auto = launch_parts(args, ctx)
        except OrchestratorError as exc:
            raise StepFailed(exc.message) from None
        run = _Run(args, ctx, adapter, base_spec, client_python, auto)
        profile = run.profile
        ks = sorted(set(args.candidates))
        k_probe = args.probe or ks[-1]
        if args.baseline is not None:
            base_results, base_source = {profile[0]: args.baseline}, "given"
        else:
            base_results = await run.measure("baseline", adapter.baseline_flags(args.flags))
            base_source = "measured"
        baseline = {c: requests_of(base_results[c], speculative=False) for c in profile}
        if not all(baseline.values()):
            raise StepFailed("tune: the baseline benchmark has no completed request with tokens and latency"
                             + (f" at concurrency {[c for c in profile if not baseline[c]]}" if len(profile) > 1
                                else ""))
        probe_results = await run.measure(f"k={k_probe}", chain_flags(args.flags, k_probe))
        probe = {c: requests_of(probe_results[c], speculative=True) for c in profile}
        measured: dict[int, dict[int, dict[str, Any]]] = {k_probe: probe_results}

        def fit_at(c: int) -> Any:
            points = {m: requests_of(r[c], speculative=True) for m, r in measured.items()
                      if m != k_probe and r[c].get("status") == "ok"}
            return fit(baseline[c], probe[c], k_probe, served_profile(probe_results[c]), points=points)

        try:
            models = {c: fit_at(c) for c in profile}
        except ValueError as exc:
            raise StepFailed(f"tune: {exc}") from None
        grid = sorted(set(ks + [k_probe]))
        predictions = {c: {p.k: p for p in predict(models[c], grid)} for c in profile}
        # Up to `verify` restarts per concurrency, one at a time: the best predicted configuration not measured yet
        # among the model's current top `verify` at any concurrency (rank by rank; the probe is measured already:
        # it is one of them when it ranks there). Every restart is benchmarked at every concurrency, and each
        # refits the per-cycle and per-token costs there (cost_model: a second chain length tells them apart), so
        # the next pick is the better models'; each verified point keeps the prediction made BEFORE it was
        # measured, the only one its measurement tests.
        top = {c: _ranked(predictions[c])[:args.verify] for c in profile}
        verified: list[int] = []
        before: dict[int, dict[int, Any]] = {c: {} for c in profile}
        rankings: dict[int, list[list[int]]] = {c: [] for c in profile}  # bench/tune_vs_grid.py --replay reads them
        while len(verified) < args.verify * len(profile):
            ranked = {c: _ranked(predictions[c]) for c in profile}
            for c in profile:
                rankings[c].append(ranked[c])
            pending = _pending([ranked[c] for c in profile], args.verify, measured)
            if not pending:
                break
            k = pending[0]
            for c in profile:
                before[c][k] = predictions[c][k]
            measured[k] = await run.measure(f"k={k}", chain_flags(args.flags, k), tolerate=True)
            verified.append(k)
            for c in profile:
                try:
                    models[c] = fit_at(c)
                except ValueError as exc:  # a verify point without usable requests: say so, keep the last model
                    ctx.output(f"tune [k={k}]{run.at(c)}: not used to refit the costs ({exc})\n")
                predictions[c] = {p.k: p for p in predict(models[c], grid)}
        by_c: dict[int, dict[str, Any]] = {}
        for c in profile:
            final = dict(predictions[c])
            predictions[c].update(before[c])
            base_rate, base_ci = per_request_rate(baseline[c])
            result = self._summary(args, models[c], predictions[c], {m: r[c] for m, r in measured.items()},
                                   base_rate, base_ci, k_probe)
            for row in result["rows"]:  # the curve of the last model (every measurement in it), beside the
                row.update(model_tok_s=final[row["k"]].tok_s, model_tok_s_ci=final[row["k"]].tok_s_ci)  # prediction
            result["baseline"] = {"tok_s": base_rate, "tok_s_ci": base_ci, "source": base_source,
                                  "throughput_tok_s": base_results[c].get("tok_s")}
            by_c[c] = result
        trees: dict[str, Any] = {}
        if any(t > 1 for t in args.topk):
            trees = await self._trees(run, models, {c: {p.k: p for p in predict(models[c], grid)} for c in profile},
                                      by_c)
        restarts = int(base_source == "measured") + 1 + len(verified) + trees.get("restarts", 0)
        counted = {"baseline": int(base_source == "measured"), "probe": 1, "verify": verified,
                   "top_predicted": top[profile[0]], "rankings": rankings[profile[0]],
                   **({"top_predicted_by_concurrency": top, "rankings_by_concurrency": rankings}
                      if len(profile) > 1 else {}),
                   **({"tree_probe": trees.get("probe"), "tree_verify": trees.get("verify", [])} if trees else {}),
                   "what": "server starts of this step: the no-speculation baseline (unless given), the probe at "
                           "k_probe, and each top prediction not already measured, one at a time, the costs "
                           "refitted after each" + (f"; each start benchmarked at every concurrency {profile}"
                                                   if len(profile) > 1 else "")}
        started = (f"tune: {restarts} server starts (baseline {base_source}; the probe k={k_probe}; verify restarts "
                   f"{verified or 'none'} for the top predicted "
                   f"{top[profile[0]] if len(profile) == 1 else {c: top[c] for c in profile}}); the grid of these "
                   f"candidates is {len(set(ks) | {k_probe}) + 1 + trees.get('count', 0)} (one per "
                   f"k{' and per tree' if trees else ''} plus the baseline)"
                   + (f"; trees: the probe {trees['probe']}, verify restarts {trees['verify'] or 'none'}"
                      if trees.get("probe") else "")
                   + (f"; each start benchmarked at concurrency {', '.join(map(str, profile))}"
                      if len(profile) > 1 else ""))
        if len(profile) > 1 and str(getattr(adapter, "name", "")).startswith("lab"):
            started += ("; the lab serves one request at a time (batch 1): above concurrency 1 its requests queue "
                        "rather than batch, so its answer per concurrency is a batch-1 server's, not a GPU engine's")
        result = self._combine(profile, by_c, started, args.concurrency_mix or None)
        result.update(restarts=restarts, restarts_counted=counted)
        self._write(ctx, result)
        for line in result["lines"]:
            ctx.output(line + "\n")
        return result

    @staticmethod
    def _combine(profile: list[int], by_c: dict[int, dict[str, Any]], started: str,
                 mix: dict[int, float] | None = None) -> dict[str, Any]:
        """The step's result: the first concurrency's rows, model and recommendation at the top (one concurrency:
        all of it), every concurrency's in ``by_concurrency``, and, for a profile, the answer per concurrency and
        the crossover (orchestrator/tuning/concurrency.py) as the last line (the playbooks' `because`)."""
        from orchestrator.tuning.concurrency import ConcurrencyAnswer, answer, for_mix

        first = by_c[profile[0]]
        result = {**first, "concurrency": profile[0], "lines": list(first["lines"])}
        # the restarts line before the recommendation, which stays the last line
        result["lines"].insert(len(result["lines"]) - 1 if first["recommended"] else len(result["lines"]), started)
        result["by_concurrency"] = [{"concurrency": c, **{key: by_c[c].get(key) for key in (
            "rows", "recommended", "cost", "profile", "baseline", "agreement", "tree_cost", "lines")}}
            for c in profile]
        if len(profile) == 1:
            return result
        points = []
        summary = []
        for entry in result["by_concurrency"]:
            c, rec, base = entry["concurrency"], entry["recommended"], entry["baseline"]
            if not rec:
                summary.append(f"tune at concurrency {c}: no configuration measured")
                continue
            name = rec.get("label") or f"k={rec['k']}"
            points.append(ConcurrencyAnswer(c, name, float(rec.get("speedup") or 0.0), rec["beats_baseline"]))
            summary.append(f"tune at concurrency {c}: {name} {rec['tok_s']:.1f} [{rec['tok_s_ci'][0]:.1f}, "
                           f"{rec['tok_s_ci'][1]:.1f}] tok/s per request, {rec.get('speedup')}x the baseline "
                           f"{base['tok_s']:.1f} [{base['tok_s_ci'][0]:.1f}, {base['tok_s_ci'][1]:.1f}] (pays: "
                           f"{rec['beats_baseline']}); flags: {rec['paste']}")
        crossing = answer(points)
        result["crossover"] = crossing
        lines = [started]
        for entry in result["by_concurrency"]:
            lines += [line.replace("tune", f"tune c={entry['concurrency']}", 1) for line in entry["lines"] or []]
        deploy = for_mix(result["by_concurrency"], mix)
        if deploy is not None:
            deploy["recommended"]["paste"] = paste_flags(deploy["recommended"]["flags"] or {})
            summary.append(f"tune: {deploy['line']}; flags: {deploy['recommended']['paste']}")
        result["mix"] = deploy
        result["lines"] = lines + summary + [f"tune: {crossing['line']}"]
        return result

    async def _trees(self, run: _Run, models: dict[int, Any], chains: dict[int, dict[int, Any]],
                     by_c: dict[int, dict[str, Any]]) -> dict[str, Any]:
        """SGLang's trees beside the chains (orchestrator/tuning/tree_space.py): every tree's acceptance from the draft
        test offline, one tree probe (the widest) for the cost of verifying more tokens, then a restart for each of
        the ``verify`` best predictions overall (at any concurrency) that is a tree not yet measured; the
        recommendation is recomputed over every measured point. Adds the tree rows and lines to each concurrency's
        result in ``by_c``; returns what it counted."""
        from orchestrator.actions.probe import run_probe_step
        from orchestrator.servers.prompts import load_prompts
        from orchestrator.tuning.tree_space import (
            TreeConfig,
            fit_trees,
            predict_tree,
            tree_configs,
            tree_flags,
        )

        args, ctx, profile = run.args, run.ctx, run.profile

        def said(c: int, line: str) -> None:  # before the chains' recommendation, which stays the last line
            lines = by_c[c]["lines"]
            lines.insert(len(lines) - (1 if by_c[c].get("recommended") else 0), line)

        configs = tree_configs(sorted(set(args.candidates)), args.topk, args.draft_tokens)
        if not configs:
            for c in profile:
                said(c, f"tune: no tree of topk {args.topk} and draft tokens {args.draft_tokens} is served at steps "
                        f"{sorted(set(args.candidates))}")
            return {"count": 0, "restarts": 0}
        probe = max(configs, key=lambda c: (c.extra_verified, c.topk, c.steps))
        flags = args.flags
        forced = flags.get("lab-capture-layers")  # the lab's simulated engine change: its server captures these
        wiring: Any = [int(x) for x in str(forced).split(",")] if forced is not None else "served"
        sent = load_prompts(args.bench.prompts)
        sent = sent[:min(args.bench.n, len(sent))]  # request i sends prompt i % len(prompts): the distinct ones
        offline = await run_probe_step(ctx, "draft_reconcile", {
            "target": run.base_spec.model, "engine": "sglang", "prompts": sent, "num_prompts": len(sent),
            "max_new_tokens": args.bench.max_new_tokens,
            "configs": [{"draft": str(flags.get("speculative-draft-model-path")),
                         "algorithm": str(flags.get("speculative-algorithm", "EAGLE3")).upper(), "steps": c.steps,
                         "topk": c.topk, "num_draft_tokens": c.draft_tokens, "wiring": wiring,
                         "count_first_token": True} for c in configs]})
        accepts = {c: ((row.get("row") or {}).get("accepts") or []) for c, row in
                   zip(configs, offline.get("configs") or [], strict=True)}
        missing = [c.label for c, a in accepts.items() if not a]
        if missing:
            raise StepFailed(f"tune: the draft test predicts no accept length for {missing}: "
                             + "; ".join(str(r.get("error")) for r in offline.get("configs") or [] if r.get("error")))
        measured: dict[TreeConfig, dict[int, dict[str, Any]]] = {
            probe: await run.measure(probe.label, tree_flags(flags, probe), tolerate=True)}
        restarts = 1

        def points(c: int) -> dict[TreeConfig, list[Any]]:
            return {cfg: requests_of(r[c], speculative=True) for cfg, r in measured.items()
                    if r[c].get("status") == "ok"}

        try:
            fitted = {c: fit_trees(models[c], points(c)) for c in profile}
        except ValueError as exc:
            for c in profile:
                said(c, f"tune: trees not predicted: the tree probe {probe.label} "
                        f"{measured[probe][c].get('reason') or exc}")
            return {"count": len(configs), "restarts": restarts, "probe": probe.label, "verify": []}
        predictions = {c: {cfg: predict_tree(models[c], fitted[c], cfg, accepts[cfg]) for cfg in configs}
                       for c in profile}
        # up to `verify` restarts per concurrency, one at a time, as the chains': the best predicted configuration
        # overall (chains with their last model) when it is a tree not measured yet; each refits w and v, each
        # verified tree keeps the prediction made BEFORE it was measured
        verify: list[TreeConfig] = []
        before: dict[int, dict[TreeConfig, Any]] = {c: {} for c in profile}
        while len(verify) < args.verify * len(profile):
            joint = [[cfg for _rate, cfg in sorted(
                [(p.tok_s, None) for p in chains[c].values()] + [(p.tok_s, cfg) for cfg, p in predictions[c].items()],
                key=lambda x: -x[0])] for c in profile]
            pending = [cfg for cfg in _pending(joint, args.verify, measured) if cfg is not None]
            if not pending:
                break
            config = pending[0]
            for c in profile:
                before[c][config] = predictions[c][config]
            measured[config] = await run.measure(config.label, tree_flags(flags, config), tolerate=True)
            verify.append(config)
            restarts += 1
            for c in profile:
                try:
                    fitted[c] = fit_trees(models[c], points(c))
                except ValueError as exc:
                    ctx.output(f"tune [{config.label}]{run.at(c)}: not used to refit the tree costs ({exc})\n")
                predictions[c] = {cfg: predict_tree(models[c], fitted[c], cfg, accepts[cfg]) for cfg in configs}
        for c in profile:
            predictions[c].update(before[c])
            self._tree_rows(by_c[c], {cfg: r[c] for cfg, r in measured.items()}, predictions[c], fitted[c], probe,
                            flags, len(sent), models[c])
        return {"count": len(configs), "restarts": restarts, "probe": probe.label, "verify": [c.label for c in verify]}

    def _tree_rows(self, result: dict[str, Any], measured: dict[Any, dict[str, Any]], predictions: dict[Any, Any],
                   fitted: Any, probe: Any, flags: dict[str, Any], prompts: int, model: Any) -> None:
        """One concurrency's tree rows, lines, recommendation (over chains and trees), agreement and tree cost."""
        from orchestrator.tuning.tree_space import tree_flags

        rows = []
        for config, p in predictions.items():
            row: dict[str, Any] = {"k": config.steps, "topk": config.topk, "draft_tokens": config.draft_tokens,
                                   "label": config.label, "flags": tree_flags(flags, config),
                                   "predicted_accept_length": p.accept_length,
                                   "predicted_accept_length_ci": p.accept_length_ci, "predicted_tok_s": p.tok_s,
                                   "predicted_tok_s_ci": p.tok_s_ci, "extrapolated": False, "probe": config == probe,
                                   "accept_source": "the draft test offline (the tree served cycle by cycle)"}
            got = measured.get(config)
            if got is not None and got.get("status") == "ok":
                rate, ci = per_request_rate(requests_of(got, speculative=True))
                row.update(measured_tok_s=rate, measured_tok_s_ci=ci, measured_accept_length=got.get("accept_length"),
                           measured_accept_length_ci=got.get("accept_length_ci"), agrees=_overlap(ci, p.tok_s_ci),
                           accept_agrees=_overlap(got.get("accept_length_ci"), p.accept_length_ci),
                           throughput_tok_s=got.get("tok_s"))
            elif got is not None:
                row.update(measured_status="failed", reason=got.get("reason"))
            rows.append(row)
        lines = [f"tune trees: a draft step over the rows adds {fitted.w * 1000:.2f} ms [{fitted.w_ci[0] * 1000:.2f}, "
                 f"{fitted.w_ci[1] * 1000:.2f}] over a chain's, each verified token beyond a chain's "
                 f"{fitted.v * 1000:.2f} ms [{fitted.v_ci[0] * 1000:.2f}, {fitted.v_ci[1] * 1000:.2f}] (fitted on "
                 f"{[c.label for c in fitted.points]}{'; ' + fitted.assumption if fitted.assumption else ''}); "
                 f"acceptance: the draft test offline, {prompts} prompts"]
        for r in rows:
            measured_text = (f"measured {r['measured_tok_s']:.1f} [{r['measured_tok_s_ci'][0]:.1f}, "
                             f"{r['measured_tok_s_ci'][1]:.1f}] ({'agrees' if r['agrees'] else 'DISAGREES'}), "
                             f"accept {r['measured_accept_length']} "
                             f"({'agrees' if r['accept_agrees'] else 'DISAGREES'} with offline)"
                             if r.get("measured_tok_s") is not None else "not measured")
            lines.append(f"tune {r['label']}: predicted {r['predicted_tok_s']:.1f} [{r['predicted_tok_s_ci'][0]:.1f}, "
                         f"{r['predicted_tok_s_ci'][1]:.1f}] tok/s, accept {r['predicted_accept_length']:.2f} "
                         f"[{r['predicted_accept_length_ci'][0]:.2f}, {r['predicted_accept_length_ci'][1]:.2f}] "
                         f"offline; {measured_text}")
        if result.get("recommended"):
            result["lines"].pop()  # the chains' recommendation: recomputed over chains and trees
        result["lines"].extend(lines)
        result["rows"].extend(rows)
        base = result["baseline"]
        recommended, line = self._recommend(result["rows"], model, base["tok_s"], base["tok_s_ci"])
        result["recommended"] = recommended
        if line:
            result["lines"].append(line)
        done = [r for r in rows if r.get("measured_tok_s") is not None]
        result["agreement"].update(trees_measured=len(done), trees_agree=sum(1 for r in done if r.get("agrees")),
                                   trees_accept_agree=sum(1 for r in done if r.get("accept_agrees")))
        result["tree_cost"] = {"w_s": round(fitted.w, 6), "w_ci": fitted.w_ci, "v_s": round(fitted.v, 6),
                               "v_ci": fitted.v_ci, "probe": probe.label, "fitted_on": [c.label for c in fitted.points],
                               "assumption": fitted.assumption}

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
        recommended, line = TuneAction._recommend(rows, model, base_rate, base_ci)
        if line:
            lines.append(line)
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
    def _recommend(rows: list[dict[str, Any]], model: Any, base_rate: float, base_ci: list[float]
                   ) -> tuple[dict[str, Any] | None, str | None]:
        """The fastest MEASURED configuration (chain or tree), whether it beats the baseline on intervals, and the
        line that says so (None without a measured point)."""
        done = [r for r in rows if r.get("measured_tok_s") is not None]
        for r in rows:
            r.pop("recommended", None)
        best = max(done, key=lambda r: r["measured_tok_s"]) if done else None
        if best is None:
            return None, None
        best["recommended"] = True
        name = best.get("label") or f"k={best['k']}"
        lo, hi = best["measured_tok_s_ci"]
        beats = "yes" if lo > base_ci[1] else "no" if hi < base_ci[0] else "inconclusive"
        speedup = round(best["measured_tok_s"] / base_rate, 3) if base_rate else None
        tied = [r.get("label") or r["k"] for r in done
                if r is not best and _overlap(r["measured_tok_s_ci"], best["measured_tok_s_ci"])]
        recommended = {"k": best["k"], "flags": best["flags"], "paste": paste_flags(best["flags"]),
                       "tok_s": best["measured_tok_s"],
                       "tok_s_ci": best["measured_tok_s_ci"], "predicted_tok_s": best["predicted_tok_s"],
                       "speedup": speedup, "beats_baseline": beats, "tied_with": tied,
                       **({"topk": best["topk"], "draft_tokens": best["draft_tokens"], "label": best["label"]}
                          if best.get("topk") else {})}
        if beats == "no":
            return recommended, (
                f"tune: no configuration beats the baseline ({base_rate:.1f} tok/s [{base_ci[0]:.1f}, "
                f"{base_ci[1]:.1f}]): the best, {name}, measured {best['measured_tok_s']:.1f}; "
                f"speculating costs {model.c0 / model.t1:.2f} plain steps per cycle and each draft token "
                f"{model.c / model.t1:.2f} more, and the draft's acceptance "
                f"({', '.join(f'{x:.2f}' for x in model.profile)}) does not repay it")
        return recommended, (
            f"tune: recommended {name}: {best['measured_tok_s']:.1f} tok/s measured "
            f"({speedup}x the baseline {base_rate:.1f}; beats it on intervals: {beats}), "
            f"{best['predicted_tok_s']:.1f} predicted"
            + (f"; tied on intervals with {'k=' if all(isinstance(t, int) for t in tied) else ''}{tied}" if tied else "")
            + f"; flags: {recommended['paste']}")

    @staticmethod
    def _write(ctx: ActionContext, result: dict[str, Any]) -> None:
        """The table (JSON) and the charts into the session's artifacts: the predicted curve with the measured points
        (one per concurrency of a profile) and, for a profile, the speedup per concurrency with the crossover."""
        import json

        from orchestrator.tuning.chart import svg_concurrency, svg_curve

        if ctx.session_dir is None:
            return
        directory = ctx.session_dir / "artifacts"
        directory.mkdir(parents=True, exist_ok=True)
        stem = f"{ctx.step_id}-{ctx.host}-tune".replace("/", "_")
        entries = result["by_concurrency"]
        charts: list[tuple[Path, str, str]] = []  # path, kind, description
        if len(entries) == 1:
            path = directory / f"{stem}.svg"
            path.write_text(svg_curve(result["rows"], result.get("baseline"),
                                      title=f"tune {ctx.step_name} on {ctx.host}"), encoding="utf-8")
            charts.append((path, "tune_chart", "tuner: predicted vs measured (chart)"))
        else:
            for entry in entries:
                c = entry["concurrency"]
                path = directory / f"{stem}-c{c}.svg"
                path.write_text(svg_curve(entry["rows"], entry["baseline"],
                                          title=f"tune {ctx.step_name} on {ctx.host}, concurrency {c}"),
                                encoding="utf-8")
                entry["chart"] = str(path.relative_to(ctx.session_dir))
                charts.append((path, "tune_chart", f"tuner at concurrency {c}: predicted vs measured (chart)"))
            path = directory / f"{stem}-concurrency.svg"
            path.write_text(svg_concurrency(entries, result.get("crossover"),
                                            title=f"speculation by concurrency on {ctx.host}"), encoding="utf-8")
            result["concurrency_chart"] = str(path.relative_to(ctx.session_dir))
            charts.append((path, "tune_concurrency", "tuner: speedup per concurrency and the crossover (chart)"))
        table = directory / f"{stem}.json"
        result["artifacts"] = [str(path.relative_to(ctx.session_dir)) for path, _, _ in charts] + [
            str(table.relative_to(ctx.session_dir))]
        table.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
        for path, kind, description in [*charts, (table, "tune_table", "tuner: predicted vs measured (table)")]:
            if ctx.emit is not None:
                from orchestrator.events import ArtifactSaved

                ctx.emit(ArtifactSaved(path=str(path.relative_to(ctx.session_dir)), kind=kind, step_id=ctx.step_id,
                                       description=description))
