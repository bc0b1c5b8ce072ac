# orchestrator-agent: preload torch transformers.models.llama.modeling_llama transformers.models.qwen3.modeling_qwen3?
"""Probe: the draft test's prediction for several SERVED configurations at once (the reconcile's offline side).

Args (JSON): {"target": dir, "engine": "sglang" | "vllm", "prompts": [str, ..] (the benchmark's), "max_new_tokens": 64,
"configs": [{"draft": dir, "algorithm": "EAGLE3" | "EAGLE", "steps": K, "wiring": "served" | [HF indices],
"count_first_token": bool, "ladder"?: bool, "topk"?: N, "num_draft_tokens"?: N, "accept_thresholds"?: {"single",
"acc"} (SGLang's, for its sampled verify), "rejection_sampling"?: bool}, ..],
"requests"?: [{"body": {...}, "keep_last"?: N, "without_template"?: bool, "thinking_off"?: bool}, ..] (a traffic
replay's bodies, as sent, instead of prompts: traffic_offline.py), "chat_template_path"?: the server's --chat-template file,
"extra_prompts"?: [str, ..] (the benchmarks' context ladders,
scored into ``by_length`` only, for the configurations with ``ladder``), "extra_max_new_tokens"?: their new tokens
(default max_new_tokens), "device"?, "dtype"?, "confidence"?: 0.95, "batch_size"?: 16, "states_from"?: the capture server (draft_test.py)}.

The benchmarks of one investigation send the same prompts to the same target, so the target generates and is
captured ONCE (the hidden states every configuration's wiring needs), and each configuration's draft is scored on
that capture with the parts its engine serves (eagle3_served), its own draft tokens per cycle and its own wiring
("served": what the engine's rule reads from that draft's config). Result: ``configs``, one per configuration, each
the draft test's figures for its one wiring (tau_serving, tau_request, per_position, by_length, with intervals),
``parts`` and ``wiring``. Greedy, no chat template: the benchmark sends raw text. With ``requests`` (a traffic
replay), the requests are tokenised and generated as the server serves them (traffic_offline.py), and each
configuration's row also carries ``per_request`` (``index``: the request's place in ``requests``,
``accept_length``, and for a penalised request ``draft_penalised``: the same with the draft's logits penalised as
the target's, the engine change that would mend a penalty's cost; for a request item with ``keep_last``,
``cut_accept_length`` and ``cut_prompt_tokens``: the same request replayed with its prompt cut to its last
``keep_last`` tokens; for a chat request item with ``without_template``, ``untemplated_accept_length`` and
``untemplated_prompt_tokens``: the same without its chat template; with ``thinking_off``, where its template has a
thinking switch, ``thinking_switch`` and ``thinking_off_accept_length``/``_prompt_tokens``: the same with thinking
off; for an unpenalised greedy request,
``first_step``: the draft's first proposal right or wrong by the target's probability of each token,
confidence_match.py); ``skipped`` lists the requests not reproduced.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List

from remote_probes.agent.protocol import ProbeFailure, progress, run_probe
from remote_probes.eagle3.checkpoint import DraftLoadError
from remote_probes.eagle3.wiring import validate_wiring
from remote_probes.engine.served_wiring import server_wiring
from remote_probes.evaluation.draft_test import (
    capture_runs,
    check_runnable,
    load_drafts,
    load_target_for,
    parse_args,
    run_tally,
    score_wiring,
    states_source,
)
from remote_probes.evaluation.traffic_offline import capture_traffic, parse_requests


def parse(args: Dict[str, Any]) -> Dict[str, Any]:
    configs = args.get("configs")
    if not isinstance(configs, list) or not configs:
        raise ProbeFailure("bad_args", "configs must be a non-empty list", field="configs")
    first = configs[0] if isinstance(configs[0], dict) else {}
    # the shared arguments are checked by draft_test's own parser (one configuration stands in for the draft)
    common = {k: v for k, v in args.items() if k not in ("configs", "extra_prompts", "extra_max_new_tokens",
                                                         "requests", "chat_template_path")}
    a = parse_args(dict(common, draft=first.get("draft"), chat_template=False))
    out = []
    for i, c in enumerate(configs):
        if not isinstance(c, dict):
            raise ProbeFailure("bad_args", "configs[%d] must be a mapping" % i, field="configs")
        one = parse_args(dict(common, draft=c.get("draft"), algorithm=c.get("algorithm", "EAGLE3"),
                              steps=c.get("steps", 5), chat_template=False))
        wiring = c.get("wiring", "served")
        if wiring != "served" and not (isinstance(wiring, list) and all(isinstance(x, int) for x in wiring)):
            raise ProbeFailure("bad_args", "configs[%d].wiring must be \"served\" or a list of indices" % i,
                               field="configs")
        topk, budget = c.get("topk", 1), c.get("num_draft_tokens")
        if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
            raise ProbeFailure("bad_args", "configs[%d].topk must be a positive integer" % i, field="configs")
        if topk > 1 and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
            raise ProbeFailure("bad_args", "configs[%d]: a tree (topk > 1) needs num_draft_tokens" % i,
                               field="configs")
        # SGLang's --speculative-accept-threshold-single/-acc for its sampled verify (decoding.py), 1.0 each unset
        thresholds = c.get("accept_thresholds") or {}
        if not isinstance(thresholds, dict) or set(thresholds) - {"single", "acc"} or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < float("inf")
                for v in thresholds.values()):
            raise ProbeFailure("bad_args", "configs[%d].accept_thresholds must map single and acc to non-negative "
                               "numbers" % i, field="configs")
        out.append(dict(one, wiring=wiring, count_first_token=bool(c.get("count_first_token", False)),
                        ladder=bool(c.get("ladder", False)), topk=topk,
                        num_draft_tokens=budget if topk > 1 else one["steps"] + 1,
                        accept_thresholds=dict(thresholds), rejection_sampling=bool(c.get("rejection_sampling"))))
    a["configs"] = out
    extra = args.get("extra_prompts") or []
    if not isinstance(extra, list) or not all(isinstance(x, str) and x for x in extra):
        raise ProbeFailure("bad_args", "extra_prompts must be a list of non-empty strings", field="extra_prompts")
    a["extra_prompts"] = extra
    tokens = args.get("extra_max_new_tokens", a["max_new_tokens"])
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ProbeFailure("bad_args", "extra_max_new_tokens must be a positive integer", field="extra_max_new_tokens")
    a["extra_max_new_tokens"] = tokens
    a["requests"] = parse_requests(args["requests"]) if args.get("requests") is not None else None
    template = args.get("chat_template_path")
    if template is not None and not isinstance(template, str):
        raise ProbeFailure("bad_args", "chat_template_path must be a file path", field="chat_template_path")
    a["chat_template_path"] = template
    return a


def main(args: Dict[str, Any]) -> Dict[str, Any]:
    a = parse(args)
    started = time.monotonic()
    check_runnable(a)
    torch, tokenizer, model, device = load_target_for(a)
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    n_layers, hidden = cfg.num_hidden_layers, cfg.hidden_size
    loaded: List[Dict[str, Any]] = []
    unloadable: Dict[int, str] = {}  # config index -> why the test cannot build that server's draft
    for index, c in enumerate(a["configs"]):
        try:
            draft, _trained, parts = load_drafts(c, model, hidden, device)
        except (ProbeFailure, DraftLoadError) as exc:
            # one server's draft the test cannot build (a d2t of target ids, say) leaves that server unpredicted,
            # not the others: the fix's prediction is what verifies a checkpoint finding
            unloadable[index] = "%s: %s" % (getattr(exc, "kind", "draft_load"), getattr(exc, "message", str(exc)))
            progress("%s: cannot build it offline (%s)" % (c["draft"], unloadable[index]))
            continue
        if c["wiring"] == "served":
            wiring = [n_layers] if parts["served"]["feed"] == "last_hidden" else \
                server_wiring(draft.cfg.raw, n_layers, c["engine"])
        else:
            try:
                wiring = validate_wiring(c["wiring"], n_layers)
            except ValueError as exc:
                raise ProbeFailure("bad_wiring", "wiring %s: %s" % (c["wiring"], exc), field="configs") from None
        if wiring is None:
            raise ProbeFailure("bad_wiring", "%s would feed %s hidden states outside the target" % (c["engine"],
                                                                                                c["draft"]))
        loaded.append({"config": c, "draft": draft, "parts": parts, "wiring": wiring, "index": index})
    needed = sorted({i for item in loaded for i in item["wiring"]})
    order: List[int] = []
    skipped: List[Dict[str, Any]] = []
    simulated: List[int] = []
    if a["requests"] is not None:
        runs, order, skipped = capture_traffic(torch, tokenizer, model, a["requests"], a, needed)
        simulated = [i for i, r in enumerate(a["requests"]) if r.get("simulate")]
        if not runs and not simulated:
            raise ProbeFailure("bad_args", "no request of the traffic can be replayed offline: %s"
                               % skipped[0]["reason"], field="requests")
    else:
        prompts = a["prompts"][:a["num_prompts"]] if a["prompts"] else []
        if not prompts:
            raise ProbeFailure("bad_args", "prompts (the benchmark's) are required", field="prompts")
        runs = capture_runs(torch, tokenizer, model, prompts, a, needed, n_layers)
    # the benchmarks' context ladders (bench_ladder.py): captured apart (one batch would pad every short prompt to
    # the longest), scored only into by_length; the headline figures stay the benchmark's own prompts'. A rung the
    # capture server refuses (its context may be shorter than the benchmarked server's) is skipped and said
    ladder = (capture_runs(torch, tokenizer, model, a["extra_prompts"],
                           dict(a, max_new_tokens=a["extra_max_new_tokens"]), needed, n_layers, skip_refused=True)
              if a["extra_prompts"] else [])
    captured = time.monotonic()
    rows: Dict[int, Dict[str, Any]] = {}
    for i, why in unloadable.items():
        c = a["configs"][i]
        rows[i] = {"draft": c["draft"], "algorithm": c["algorithm"], "steps": c["steps"], "error": why}
    for item in loaded:
        c = item["config"]
        if c["topk"] > 1:
            rows[item["index"]] = tree_row(torch, model, tokenizer, item, c, a, runs, order, simulated)
            continue
        mine = ladder if c["ladder"] else []
        stats: Dict[str, Any] = score_wiring(torch, item["draft"], runs, item["wiring"], c["steps"],
                                             a["confidence"], c["count_first_token"], length_runs=mine) \
            if runs else {"tau_serving": None}
        units = stats.pop("_units", None)
        if a["requests"] is not None:
            rows_of = per_request(torch, item["draft"], runs, order, a["requests"], item["wiring"], c,
                                  units) if units is not None else []
            rows_of += simulated_rows(torch, model, tokenizer, item, c, a, simulated)
            stats["per_request"] = sorted(rows_of, key=lambda r: r["index"])
        stats["ladder_prompts"] = len(mine)
        progress("%s %s: tau %s" % (c["draft"], item["wiring"], stats["tau_serving"]))
        rows[item["index"]] = {"draft": c["draft"], "algorithm": c["algorithm"], "steps": c["steps"],
                               "wiring": item["wiring"], "parts": item["parts"], "row": dict(stats, wiring=item["wiring"])}
    out = [rows[i] for i in range(len(a["configs"]))]  # the configs' order, one row each
    return {"configs": out, "prompts": len(runs), "ladder_prompts": len(ladder), "engine": a["engine"],
            **({"skipped": skipped} if a["requests"] is not None else {}),
            "states": states_source(a["states_from"], needed, n_layers, [], round(captured - started, 2)),
            "seconds": round(time.monotonic() - started, 2)}


def tree_row(torch: Any, model: Any, tokenizer: Any, item: Dict[str, Any], c: Dict[str, Any], a: Dict[str, Any],
             runs: List[Any], order: List[int], simulated: List[int]) -> Dict[str, Any]:
    """A server that drafts SGLang's tree: each benchmark prompt served again offline, cycle by cycle, by the tree
    (spec_simulation.simulate_tree: one target forward per cycle, so the target's own copy runs; engine-captured
    states hold one generation, which a tree's cycles cannot be read from). The row's figures are the requests'
    accept lengths with their interval; no per-position acceptance (the engine reports none for a tree). A traffic
    replay (``order``: each captured run's request, ``simulated``: the requests served again cycle by cycle) gives
    ``per_request`` too, each greedy request with its own max_tokens; the paired counterfactuals (a cut, no
    template, thinking off) and the match by confidence score a chain and are not given for a tree."""
    from remote_probes.evaluation.decoding import GREEDY
    from remote_probes.evaluation.interval_stats import mean_interval
    from remote_probes.evaluation.spec_simulation import simulate

    head = {"draft": c["draft"], "algorithm": c["algorithm"], "steps": c["steps"], "topk": c["topk"],
            "num_draft_tokens": c["num_draft_tokens"]}
    if a["states_from"] is not None:
        return dict(head, error="tree_offline: the target's hidden states come from the serving engine, one "
                                "generation per prompt; a tree is verified by a target forward per cycle")
    values, total_tokens, total_cycles = [], 0, 0
    per_run: List[Dict[str, Any]] = []
    for i, (seq, prompt_len, _states) in enumerate(runs):
        prompt_ids = [int(t) for t in seq.reshape(-1)[:prompt_len].tolist()]
        limit = a["requests"][order[i]]["max_tokens"] if requests_of(a) else a["max_new_tokens"]
        tokens, cycles = simulate(torch, model, item["draft"], prompt_ids, item["wiring"], c["steps"],
                                  limit, GREEDY, tokenizer.eos_token_id, c["count_first_token"],
                                  topk=c["topk"], num_draft_tokens=c["num_draft_tokens"])
        if requests_of(a):
            per_run.append({"index": order[i], "accept_length": round(tokens / cycles, 4) if cycles else None})
        if cycles:
            values.append(tokens / cycles)
            total_tokens, total_cycles = total_tokens + tokens, total_cycles + cycles
    iv = mean_interval(values, a["confidence"], low=1.0) if values else None
    row = {"tau_serving": round(total_tokens / total_cycles, 4) if total_cycles else None, "tau_serving_ci": None,
           "tau_request": round(sum(values) / len(values), 4) if values else None,
           "tau_request_ci": iv.as_list() if iv is not None else None, "prompts": len(values),
           "per_position": [], "by_length": [], "simulated": "tree", "wiring": item["wiring"],
           "accepts": [round(v, 4) for v in values]}
    if requests_of(a):
        rows = per_run + simulated_rows(torch, model, tokenizer, item, c, a, simulated)
        row["per_request"] = sorted(rows, key=lambda r: r["index"])
    progress("%s %s: a tree of %d (topk %d), tau %s" % (c["draft"], item["wiring"], c["num_draft_tokens"],
                                                        c["topk"], row["tau_request"]))
    return dict(head, wiring=item["wiring"], parts=item["parts"], row=row)


def requests_of(a: Dict[str, Any]) -> bool:
    return a["requests"] is not None


def per_request(torch: Any, draft: Any, runs: List[Any], order: List[int], requests: List[Dict[str, Any]],
                wiring: List[int], c: Dict[str, Any], units: Any) -> List[Dict[str, Any]]:
    """Each replayed request's accept length (tokens / verify cycles, as the server counts it) and, for a
    penalised one, the same with the draft penalised as the target (run_tally's counterfactual)."""
    rows = []
    for run, index, tokens, cycles in zip(runs, order, units[0], units[1]):  # noqa: B905 (py3.9 hosts)
        row: Dict[str, Any] = {"index": index, "accept_length": round(tokens / cycles, 4) if cycles else None}
        penalties = requests[index]["penalties"]
        if not penalties.neutral:
            tally = run_tally(torch, draft, run, wiring, c["steps"], c["count_first_token"], penalties)
            row["draft_penalised"] = round(tally.tokens / tally.cycles, 4) if tally.cycles else None
        probabilities = requests[index].get("token_probabilities")
        if probabilities is not None:  # the draft's first proposal by the target's confidence (confidence_match.py)
            from remote_probes.evaluation.confidence_match import first_step_by_confidence

            row["first_step"] = first_step_by_confidence(torch, draft, run, wiring, probabilities)
        if requests[index].get("thinking_switch"):
            row["thinking_switch"] = requests[index]["thinking_switch"]
        for key, name in (("cut_run", "cut"), ("untemplated_run", "untemplated"), ("thinking_off_run", "thinking_off")):
            other = requests[index].get(key)
            if other is None:
                continue
            # the same request at a shorter context, or without its chat template: served as the original is (the
            # draft unpenalised)
            tally = run_tally(torch, draft, other, wiring, c["steps"], c["count_first_token"])
            row[name + "_accept_length"] = round(tally.tokens / tally.cycles, 4) if tally.cycles else None
            row[name + "_prompt_tokens"] = int(other[1])
        rows.append(row)
    return rows


def simulated_rows(torch: Any, model: Any, tokenizer: Any, item: Dict[str, Any], c: Dict[str, Any],
                   a: Dict[str, Any], simulated: List[int]) -> List[Dict[str, Any]]:
    """The requests one generation cannot predict, served again offline by this configuration's draft, cycle by
    cycle, by the engine's rule (spec_simulation.py): one draw each, seeded by its ``seed``, else its index."""
    from remote_probes.evaluation.spec_simulation import simulate
    from remote_probes.evaluation.traffic_offline import generation_defaults, sampling_of

    rows = []
    defaults = generation_defaults(a["target"])
    for index in simulated:
        req = a["requests"][index]
        decoding = sampling_of(req, defaults, index, c["engine"], c.get("accept_thresholds"))
        tokens, cycles = simulate(torch, model, item["draft"], req["prompt_ids"], item["wiring"], c["steps"],
                                  req["max_tokens"], decoding, tokenizer.eos_token_id, c["count_first_token"],
                                  topk=c["topk"], num_draft_tokens=c["num_draft_tokens"])
        rows.append({"index": index, "accept_length": round(tokens / cycles, 4) if cycles else None,
                     "simulated": True})
        progress("request %d simulated offline (%s)" % (index + 1, "sampled" if req["sampled"] else "penalised"))
    return rows


if __name__ == "__main__":
    run_probe(main)
