"""`reconcile`: the draft test's prediction for exactly the configuration a server served, beside what that server
measured, both with intervals.

```yaml
- reconcile: {target: "{{ target }}", engine: vllm, n: "{{ bench_n }}", max_new_tokens: "{{ bench_tokens }}",
              servers: [{name: spec, bench: "{{ spec }}", flags: "{{ spec_srv.flags }}",
                         effective: "{{ spec_srv.effective }}", decisions: "{{ spec_srv.decisions }}"}, ...]}
  register: rc   # rc.decision: discrepancy (any) | reconciled (all) | undecided; rc.verdict; rc.servers: one per
                 # server (decision, predicted, measured, per_position, by_length, draft, wiring, steps, verdict);
                 # rc.by_name.spec: the same by server name
```
The benchmarks of one investigation send the same prompts to the same target: one probe run
(remote_probes/evaluation/draft_reconcile.py) captures the target once and scores every server's configuration on it.
The prediction is the draft test (remote_probes/evaluation/draft_test.py) run on the served configuration only: the wiring
the engine feeds (``wiring: served``, or the one a flag forces), the embedding, head, d2t and fc the engine serves
for the algorithm (eagle3_served.served_parts), the served number of draft tokens per cycle (``steps``), and the
benchmark's own prompts, lengths and greedy sampling, without a chat template (the bench sends raw text). Its
figure is the serving accept length (tokens per verify cycle, the bonus token included) with its interval over
prompts; the measurement is the benchmark's accept length with its interval over requests.

Decision: ``discrepancy`` when the two 95% intervals are disjoint (the server serves something the offline model of
it does not), ``reconciled`` when they overlap (the model of serving is not contradicted: agreement is evidence
too), ``undecided`` when either side has no interval. Per draft position (where the engine exposes it: vLLM's
per-position counters, SGLang's accept histograms) and per prompt-length bucket the same comparison is shown; the
decision is taken on the accept length alone, so that several positions compared at once do not multiply the
chance of a false alarm.
"""

from __future__ import annotations

import statistics
from typing import Any, Literal

from pydantic import Field, field_validator

from orchestrator.actions.base import Action, ActionArgs, ActionContext, StepFailed
from orchestrator.actions.bench import load_prompts
from orchestrator.actions.probe import run_probe_step
from orchestrator.probes.models import StatesFrom, no_states_source, states_source_line
from orchestrator.traffic.acceptance import longer_than_best
from orchestrator.traffic.reconciled import reconcile_traffic, traffic_lines
from orchestrator.traffic.requests import load_traffic

Decision = Literal["reconciled", "discrepancy", "undecided"]


class ServedBench(ActionArgs):
    """One server's benchmark and what the server was asked for and resolved."""

    name: str = Field(default="server", description="the server's name (rc.by_name.<name>)")
    bench: dict[str, Any] = Field(description="the registered benchmark of that server")
    flags: dict[str, Any] = Field(default_factory=dict, description="the flags the server was started with")
    effective: dict[str, Any] = Field(default_factory=dict, description="the server's effective (resolved) args")
    decisions: dict[str, Any] | None = Field(default=None, description="what the server said at start-up "
                                             "(vLLM: the aux layers it captures)")
    draft: str | None = Field(default=None, description="the draft served (default: from flags)")
    algorithm: Literal["EAGLE3", "EAGLE"] | None = Field(default=None, description="default: effective, then flags")
    steps: int | None = Field(default=None, ge=1, le=32, description="draft tokens per verify cycle (default: the "
                              "effective number, then the flags')")
    wiring: Literal["served"] | list[int] | None = Field(default=None, description="the hidden states fed (HF "
                                                         "indices); default: a capture flag, what the server said, "
                                                         "else what the engine's rule reads from the draft")


class ReconcileArgs(ActionArgs):
    target: str = Field(description="target model directory on the host (HF format)")
    engine: Literal["sglang", "vllm"] = "sglang"
    servers: list[ServedBench] = Field(min_length=1, description="the speculative servers' benchmarks")
    prompts: str | None = Field(default=None, description="the benches' prompt file (default: the bundled set)")
    n: int | None = Field(default=None, ge=1, description="requests the bench sent (default: its n)")
    max_new_tokens: int = Field(default=64, ge=2, description="the bench's max_new_tokens")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    confidence: float = Field(default=0.95, gt=0.5, lt=0.999)
    states_from: StatesFrom | None = Field(default=None, description="the target's hidden states from a server "
                                           "started with capture: (its states_from), as draft_test takes them")
    traffic: str | None = Field(default=None, description="the traffic file the servers' benchmarks replayed (bench: "
                                "{traffic}): each greedy request replayed offline as the server serves it (its chat "
                                "template, its max_tokens, its penalties on the target's logits) and reconciled "
                                "per category and per sampling setting (orchestrator/traffic/reconciled.py)")
    traffic_sample: int | None = Field(default=None, ge=1, description="the benchmarks' traffic_sample")
    chat_template: str | None = Field(default=None, description="the chat template file the servers apply, on the "
                                      "host (default: the first server's --chat-template, else the tokenizer's)")
    python: str | None = None

    @field_validator("states_from", mode="before")
    @classmethod
    def _no_states(cls, value: Any) -> Any:
        return no_states_source(value)


def _get(mapping: dict[str, Any], *names: str) -> Any:
    """The first of ``names`` in ``mapping``, whatever the dashes and case of its keys."""
    from orchestrator.servers.flags import flag_key

    keyed = {flag_key(str(k)): v for k, v in mapping.items()}
    for name in names:
        if keyed.get(flag_key(name)) is not None:
            return keyed[flag_key(name)]
    return None


def served_config(args: ServedBench, engine: str) -> dict[str, Any]:
    """What the server served: draft, algorithm, draft tokens per cycle and wiring, from what it resolved first,
    then what it was asked for. :raises StepFailed: naming what is missing."""
    from orchestrator.servers.vllm import speculative_config

    flags, eff = args.flags, args.effective
    if engine == "vllm":
        spec = speculative_config(_get(flags, "speculative-config")) or {}
        draft = args.draft or spec.get("model")
        method = _get(eff, "speculative_config.method") or spec.get("method") or "eagle3"
        algorithm = str(args.algorithm or ("EAGLE" if str(method).lower() == "eagle" else "EAGLE3"))
        steps = args.steps or _get(eff, "speculative_config.num_speculative_tokens") or spec.get("num_speculative_tokens")
    else:
        draft = args.draft or _get(flags, "speculative-draft-model-path")
        algorithm = str(args.algorithm or _get(eff, "speculative_algorithm") or _get(flags, "speculative-algorithm")
                        or "EAGLE3").upper()
        steps = args.steps or _get(eff, "speculative_num_steps") or _get(flags, "speculative-num-steps")
    tree: dict[str, int] = {}
    verify: dict[str, Any] = {}
    if engine != "vllm":  # SGLang's tree drafting: topk > 1 with its draft-token budget (remote_probes/eagle3/tree.py)
        topk = _get(eff, "speculative_eagle_topk") or _get(flags, "speculative-eagle-topk")
        budget = _get(eff, "speculative_num_draft_tokens") or _get(flags, "speculative-num-draft-tokens")
        if topk is not None and int(topk) > 1:
            if budget is None:
                raise StepFailed("reconcile: the server drafts a tree (topk > 1) and names no "
                                 "speculative-num-draft-tokens")
            tree = {"topk": int(topk), "num_draft_tokens": int(budget)}
        # its sampled verify (remote_probes/evaluation/decoding.py): the acceptance thresholds, rejection sampling
        for key, name in (("single", "speculative_accept_threshold_single"),
                          ("acc", "speculative_accept_threshold_acc")):
            value = _get(eff, name)  # what the server resolved, else what it was asked
            value = _get(flags, name) if value is None else value
            if value is not None:
                verify.setdefault("accept_thresholds", {})[key] = float(value)
        if _get(eff, "speculative_use_rejection_sampling") or _get(flags, "speculative_use_rejection_sampling"):
            verify["rejection_sampling"] = True
    wiring: Any = args.wiring
    if wiring is None:
        forced = _get(flags, "lab-capture-layers")  # the lab's simulated engine change: it captures these
        said = ((args.decisions or {}).get("aux_layers") or {}).get("layers")
        wiring = ([int(x) for x in str(forced).split(",")] if forced is not None else said) or "served"
    if not draft or not steps:
        raise StepFailed(f"reconcile: the server's flags name no {'draft' if not draft else 'number of draft tokens'}")
    if algorithm not in ("EAGLE3", "EAGLE"):
        raise StepFailed(f"reconcile: the draft test scores EAGLE3 or EAGLE, the server ran {algorithm}")
    return {"draft": str(draft), "algorithm": algorithm, "steps": int(steps), "wiring": wiring, **tree, **verify}


def unpredicted(error: str) -> str:
    """Why a server stays undecided: its draft cannot be built offline, or its tree cannot be served there."""
    if error.startswith("tree_offline: "):
        return f"the draft test cannot serve this server's tree offline ({error.removeprefix('tree_offline: ')})"
    return f"the draft test cannot build this server's draft ({error})"


def _tree_of(cfg: dict[str, Any]) -> dict[str, int]:
    """The tree a served configuration drafts (topk, num_draft_tokens), empty for a chain."""
    return {k: cfg[k] for k in ("topk", "num_draft_tokens") if k in cfg}


def _sampled_verify(cfg: dict[str, Any]) -> dict[str, Any]:
    """How a served SGLang configuration verifies a sampled request (``accept_thresholds``, ``rejection_sampling``),
    empty where it gives neither (vLLM, or SGLang's defaults)."""
    return {k: cfg[k] for k in ("accept_thresholds", "rejection_sampling") if cfg.get(k)}


def disjoint(a: list[float] | None, b: list[float] | None) -> bool | None:
    """True/False for two intervals; None when either is missing (nothing can be told apart)."""
    if not a or not b:
        return None
    return a[1] < b[0] or b[1] < a[0]


def _fmt(value: float | None, ci: list[float] | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else f"{value:.2f} [no interval]"


def measured_by_length(rows: list[dict[str, Any]], buckets: list[dict[str, Any]], confidence: float) -> list[Any]:
    """The bench's per-request accept lengths in the prediction's prompt-length buckets (prompt tokens as the
    server counted them), each with its interval over requests."""
    from remote_probes.evaluation.interval_stats import mean_interval

    out = []
    for b in buckets:
        lo, hi = b["bucket"]
        values = [float(r["accept_length"]) for r in rows if r.get("accept_length") is not None
                  and r.get("prompt_tokens") is not None and r["prompt_tokens"] >= lo
                  and (hi is None or r["prompt_tokens"] < hi)]
        iv = mean_interval(values, confidence, low=1.0) if values else None  # an accept length is at least 1
        out.append({"bucket": [lo, hi], "requests": len(values),
                    "accept_length": round(statistics.mean(values), 4) if values else None,
                    "accept_length_ci": iv.as_list() if iv is not None else None})
    return out


def compare(predicted: dict[str, Any], bench: dict[str, Any], confidence: float = 0.95) -> dict[str, Any]:
    """The reconcile of one benchmark with the draft test's served row (pure: tests call it directly)."""
    # the bench's accept length is the mean of per-request accept lengths: the prediction is the same mean over the
    # same prompts (the pooled ratio weighs long generations more, and differs by a few percent)
    p_tau = predicted.get("tau_request", predicted.get("tau_serving"))
    p_ci = predicted.get("tau_request_ci", predicted.get("tau_serving_ci"))
    m_tau, m_ci = bench.get("accept_length"), bench.get("accept_length_ci")
    apart = disjoint(p_ci, m_ci)
    decision: Decision = "undecided" if apart is None else ("discrepancy" if apart else "reconciled")
    stats = bench.get("spec_decode") or {}
    m_pos, m_pos_ci = stats.get("per_position_request") or [], stats.get("per_position_ci") or []
    p_pos, p_pos_ci = predicted.get("per_position") or [], predicted.get("per_position_ci") or []
    positions = []
    for k in range(max(len(p_pos), len(m_pos))):
        row: dict[str, Any] = {"k": k, "predicted": p_pos[k] if k < len(p_pos) else None,
               "predicted_ci": p_pos_ci[k] if k < len(p_pos_ci) else None,
               "measured": m_pos[k] if k < len(m_pos) else None,
               "measured_ci": m_pos_ci[k] if k < len(m_pos_ci) else None}
        row["disjoint"] = disjoint(row["predicted_ci"], row["measured_ci"])
        positions.append(row)
    buckets = predicted.get("by_length") or []
    # the context ladder's rungs (bench_ladder.py) count here only: the headline is the benchmark's own prompts
    rows = [*(bench.get("per_request") or []), *((bench.get("ladder") or {}).get("per_request") or [])]
    measured = measured_by_length(rows, buckets, confidence)
    by_length = [{"bucket": b["bucket"], "prompts": b["prompts"], "predicted": b.get("tau_request", b["tau_serving"]),
                  "predicted_ci": b.get("tau_request_ci", b["tau_serving_ci"]), "measured": m["accept_length"],
                  "measured_ci": m["accept_length_ci"], "requests": m["requests"],
                  "disjoint": disjoint(b.get("tau_request_ci", b["tau_serving_ci"]), m["accept_length_ci"])}
                 for b, m in zip(buckets, measured, strict=True)]
    pct = int(round(confidence * 100))
    head = (f"offline prediction for the served configuration {_fmt(p_tau, p_ci)}, server measured "
            f"{_fmt(m_tau, m_ci)} (accept length, {pct}% intervals)")
    if decision == "discrepancy":
        verdict = (f"{head}: disjoint — the server serves something the offline model of it does not "
                   f"(the draft test's parts, wiring or steps are not what the server runs)")
    elif decision == "reconciled":
        verdict = f"{head}: the intervals overlap — the server measures what the offline model of it predicts"
    else:
        verdict = f"{head}: no interval on one side, nothing can be told apart"
    off = [str(r["k"]) for r in positions if r["disjoint"]]
    if off:
        verdict += f"; per-position acceptance disjoint at position(s) {', '.join(off)}"
    return {"decision": decision, "predicted": {"accept_length": p_tau, "accept_length_ci": p_ci,
                                                "prompts": predicted.get("prompts")},
            "measured": {"accept_length": m_tau, "accept_length_ci": m_ci,
                         "requests": bench.get("accept_length_n") or bench.get("completed")},
            "per_position": positions, "by_length": by_length, "verdict": verdict}


class ReconcileAction(Action[ReconcileArgs]):
    kind = "reconcile"
    Args = ReconcileArgs
    warm_probes = ("draft_reconcile",)
    summary = "The draft test's prediction for the served configuration beside the server's measurement."

    async def run(self, args: ReconcileArgs, ctx: ActionContext) -> dict[str, Any]:
        if args.traffic:
            return await self._traffic(args, ctx)
        try:
            prompts = load_prompts(args.prompts)
        except Exception as exc:  # UserInputError names the file
            raise StepFailed(f"reconcile: {exc}") from None
        cfgs = [served_config(server, args.engine) for server in args.servers]
        measured = [i for i, server in enumerate(args.servers) if server.bench.get("accept_length") is not None]
        outs: list[dict[str, Any]] = [{"decision": "undecided", **cfg, "name": server.name, "per_position": [],
                                       "by_length": [], "predicted": {}, "measured": {},
                                       "verdict": "the server measured no accept length: nothing to reconcile"}
                                      for server, cfg in zip(args.servers, cfgs, strict=True)]
        states = None
        if measured:
            n = args.n or int(args.servers[measured[0]].bench.get("n") or len(prompts))
            sent = prompts[:min(n, len(prompts))]  # request i used prompt i % len(prompts): the distinct ones
            configs = [{"draft": cfgs[i]["draft"], "algorithm": cfgs[i]["algorithm"], "steps": cfgs[i]["steps"],
                        "wiring": cfgs[i]["wiring"], **_tree_of(cfgs[i]),
                        # SGLang's accept length is completion tokens / verify forwards (the prefill's token
                        # counted); vLLM's is 1 + accepted / drafts
                        "count_first_token": args.engine == "sglang",
                        "ladder": bool((args.servers[i].bench.get("ladder") or {}).get("prompts"))} for i in measured]
            # every measured server's ladder prompts, once each (the servers' rungs come out the same where their
            # tokenizers count the same; the buckets compare them either way)
            ladders = list(dict.fromkeys(p for i in measured for p in
                                         (args.servers[i].bench.get("ladder") or {}).get("prompts") or []))
            ladder_tokens = next((int(lad["max_new_tokens"]) for i in measured
                                  if (lad := args.servers[i].bench.get("ladder") or {}).get("max_new_tokens")), None)
            result = await run_probe_step(ctx, "draft_reconcile", {
                "target": args.target, "engine": args.engine, "configs": configs, "prompts": sent,
                **({"extra_prompts": ladders, "extra_max_new_tokens": ladder_tokens or args.max_new_tokens}
                   if ladders else {}),
                "num_prompts": len(sent), "max_new_tokens": args.max_new_tokens, "device": args.device,
                "dtype": args.dtype, "confidence": args.confidence,
                **({"states_from": args.states_from.model_dump(exclude_none=True)} if args.states_from else {})},
                python=args.python)
            states = result.get("states")
            line = states_source_line(states)
            if line:
                ctx.output(line + "\n", "stdout")
            for i, scored in zip(measured, result.get("configs") or [], strict=True):
                if scored.get("error"):  # this server's draft cannot be built offline: it stays undecided
                    outs[i]["verdict"] = unpredicted(scored["error"])
                    continue
                out = compare(scored["row"], args.servers[i].bench, args.confidence)
                outs[i] = {**out, **cfgs[i], "wiring": scored["wiring"], "parts": scored.get("parts"),
                           "name": args.servers[i].name}
        for out in outs:
            for line in profile_lines(out):
                ctx.output(line + "\n", "stdout")
        decisions = {o["decision"] for o in outs}
        overall = ("discrepancy" if "discrepancy" in decisions else
                   "reconciled" if decisions == {"reconciled"} else "undecided")
        return {"decision": overall, "servers": outs, "by_name": {o["name"]: o for o in outs},
                "states": states,
                "verdict": "; ".join(f"{o['name']}: {o['verdict']}" for o in outs)}


    async def _traffic(self, args: ReconcileArgs, ctx: ActionContext) -> dict[str, Any]:
        """Each server's traffic replay against the same requests replayed offline (one capture for all)."""
        try:
            requests = load_traffic(str(args.traffic), sample=args.traffic_sample)
        except Exception as exc:  # UserInputError names file:line:col
            raise StepFailed(f"reconcile: {exc}") from None
        cfgs = [served_config(server, args.engine) for server in args.servers]
        measured = [i for i, server in enumerate(args.servers) if (server.bench.get("traffic") or {}).get("by_category")
                    and not (server.bench.get("traffic") or {}).get("unmeasured")]
        outs: list[dict[str, Any]] = [{"decision": "undecided", **cfg, "name": server.name, "by_category": [],
                                       "by_sampling": [], "draft_penalised": [],
                                       "verdict": "the server measured no accept length per request: nothing to "
                                                  "reconcile"}
                                      for server, cfg in zip(args.servers, cfgs, strict=True)]
        if measured:
            template = args.chat_template or next((str(t) for i in measured
                                                   if (t := _get(args.servers[i].flags, "chat-template"))), None)
            configs = [{"draft": cfgs[i]["draft"], "algorithm": cfgs[i]["algorithm"], "steps": cfgs[i]["steps"],
                        "wiring": cfgs[i]["wiring"], "count_first_token": args.engine == "sglang",
                        **_tree_of(cfgs[i]), **_sampled_verify(cfgs[i])} for i in measured]
            # a category below the best whose prompts are longer: its requests replayed again cut to the best's
            # length (the latest measured replay decides, as the verdict reads it: the fix's, else the candidate's)
            cuts = {e["category"]: e["keep_last"] for i in measured
                    for e in longer_than_best((args.servers[i].bench.get("traffic") or {}).get("below_best_category"))}
            # a category below the best: its chat requests replayed again without their chat template, and with its
            # thinking switched off (where the template has a switch)
            below = {str(e["category"]) for i in measured
                     for e in (((args.servers[i].bench.get("traffic") or {}).get("below_best_category") or {})
                               .get("below") or [])}
            result = await run_probe_step(ctx, "draft_reconcile", {
                "target": args.target, "engine": args.engine, "configs": configs,
                "requests": [{"body": r.sent(None, args.max_new_tokens),
                              **({"keep_last": cuts[r.category]} if r.category in cuts else {}),
                              **({"without_template": True, "thinking_off": True}
                                 if r.category in below and r.kind == "chat" else {})}
                             for r in requests],
                **({"chat_template_path": template} if template else {}),
                "max_new_tokens": args.max_new_tokens, "device": args.device, "dtype": args.dtype,
                "confidence": args.confidence}, python=args.python)
            skipped = result.get("skipped") or []
            for i, scored in zip(measured, result.get("configs") or [], strict=True):
                if scored.get("error"):
                    outs[i]["verdict"] = unpredicted(scored["error"])
                    continue
                per_request = (scored.get("row") or {}).get("per_request") or []
                out = reconcile_traffic(per_request, skipped, requests, args.servers[i].bench, args.confidence)
                outs[i] = {**out, **cfgs[i], "wiring": scored["wiring"], "name": args.servers[i].name}
        for out in outs:
            for line in traffic_lines(out["name"], out):
                ctx.output(line + "\n", "stdout")
        decisions = {o["decision"] for o in outs}
        overall = ("discrepancy" if "discrepancy" in decisions else
                   "reconciled" if decisions == {"reconciled"} else "undecided")
        return {"decision": overall, "servers": outs, "by_name": {o["name"]: o for o in outs}, "traffic": True,
                "verdict": "; ".join(f"{o['name']}: {o['verdict']}" for o in outs)}


def profile_lines(rc: dict[str, Any]) -> list[str]:
    """The console's view of a reconcile (the TUI and MCP show the same lines as the step's output)."""
    shape = (f"a tree of {rc['num_draft_tokens']} tokens ({rc.get('steps')} steps, topk {rc['topk']})"
             if rc.get("topk") else f"{rc.get('steps')} draft tokens")
    lines = [f"reconcile {rc.get('name') or ''} wiring {rc.get('wiring')}, {shape}: {rc['decision']}: "
             f"{rc['verdict']}"]
    pos = rc.get("per_position") or []
    if pos:
        lines.append(f"{'position':>8} {'predicted':>20} {'measured':>20}")
        for r in pos:
            lines.append(f"{r['k']:>8} {_fmt(r['predicted'], r['predicted_ci']):>20} "
                         f"{_fmt(r['measured'], r['measured_ci']):>20}{'  disjoint' if r['disjoint'] else ''}")
    for b in rc.get("by_length") or []:
        lo, hi = b["bucket"]
        lines.append(f"prompt tokens {lo}-{hi if hi is not None else '…'}: predicted {_fmt(b['predicted'], b['predicted_ci'])}"
                     f" ({b['prompts']} prompts), measured {_fmt(b['measured'], b['measured_ci'])}"
                     f" ({b['requests']} requests)")
    return lines
