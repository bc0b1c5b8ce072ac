"""Which parts SGLang actually serves an EAGLE-3 draft with: embedding, head, d2t, fc (standard library only).

One resolution shared by the draft test (remote_probes/draft_test.py scores "as served" and, where it differs,
"as trained"), the lab server (orchestrator/lab/stand_in/model_runner.py) and draft_inspect, so they cannot drift.
Rules, read in both cached trees (0.5.12.post1 = "12", 0.5.23 = "23"; paths under sglang/srt/):

- EAGLE3 branch (12 speculative/eagle_worker.py:177-194, 12 eagle_worker_v2.py:213-230,
  23 speculative/eagle_worker_v2.py:353-369): ``load_lm_head_from_target`` -> ``set_embed_and_head(target)``,
  else ``set_embed(target embed)``; the draft's ``hot_token_id`` (= d2t + arange) maps its ids.
- ``load_lm_head_from_target`` is set only when the draft is NOT tied and has no ``draft_vocab_size``; a tied
  draft's head IS its ``embed_tokens`` module (12 models/llama_eagle3.py:268-282, 23 :300-314).
- ``set_embed`` does nothing when the config has a ``target_hidden_size`` different from ``hidden_size``
  (12 models/llama.py:779-785, 23 :910-916); ``set_embed_and_head`` replaces both whatever the widths
  (12 llama.py:764-768, 23 :895-899).
- any other algorithm (EAGLE) takes the non-EAGLE3 branch (12 eagle_worker.py:196-204, 23 eagle_worker_v2.py:
  371-378): ``set_embed_and_head(target embed, target head)``; ``hot_token_id`` comes only from
  ``--speculative-token-map``, so the draft's d2t is ignored. The draft's logits processor keeps
  ``vocab_size = draft_vocab_size`` and cuts wider logits to it (12 layers/logits_processor.py:993-996,
  23 :1346-1347), so the target head serves target ids 0..draft_vocab_size-1 only.
- EAGLE feeds the target's last hidden state, not aux states (12 eagle_worker.py:212-220: aux only for EAGLE3 and
  ``eagle_config.use_aux_hidden_state``, default true); fc runs only when the fed width differs from the
  embedding's (12 llama_eagle3.py:218, 23 :238), so with equal widths fc is skipped.

Public API: ``served_parts(config, tensors, algorithm="EAGLE3", engine="sglang") -> dict`` (see its doc),
``ALGORITHMS``, ``HEADS``, ``EMBEDDINGS``.
"""

from __future__ import annotations

from typing import Any, Collection, Dict, List, Mapping, Optional, Sequence

from remote_probes.eagle3.config import variant_flags

ALGORITHMS = ("EAGLE3", "EAGLE")
EMBEDDINGS = ("target", "draft", "random")
HEADS = ("draft_head", "target_head", "target_embedding", "draft_embedding", "random")
SGLANG_REFS = {
    "eagle3_branch": "eagle_worker.py:177-194 (0.5.12.post1), eagle_worker_v2.py:353-369 (0.5.23)",
    "other_branch": "eagle_worker.py:196-204 (0.5.12.post1), eagle_worker_v2.py:371-378 (0.5.23)",
    "lm_head_choice": "llama_eagle3.py:268-282 (0.5.12.post1), :300-314 (0.5.23)",
    "set_embed": "llama.py:779-785 (0.5.12.post1), :910-916 (0.5.23)",
    "set_embed_and_head": "llama.py:764-768 (0.5.12.post1), :895-899 (0.5.23)",
    "logits_cut": "logits_processor.py:993-996 (0.5.12.post1), :1346-1347 (0.5.23)",
    "fc_condition": "llama_eagle3.py:218 (0.5.12.post1), :238 (0.5.23)",
    "aux_capture": "eagle_worker.py:212-220 (0.5.12.post1), eagle_utils.py:261-264 (0.5.23)",
    "hot_token_index": "eagle_worker.py:865,921 (0.5.12.post1), eagle_worker_v2.py:758,898 (0.5.23)",
}


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _canon(name: str) -> str:
    name = name[len("model."):] if name.startswith("model.") else name
    return name


def trained_parts(config: Dict[str, Any], tensors: Collection[str]) -> Dict[str, Any]:
    """What the draft was trained with, as far as the checkpoint says: its own embedding if it ships one (else the
    target's, which trainers freeze and do not save), its own lm_head (tied: its embedding; no head and no
    draft_vocab_size: the target's), d2t when present, fc over the aux states."""
    names = {_canon(n) for n in tensors}
    own_embed = "embed_tokens.weight" in names
    if "lm_head.weight" in names:
        head = "draft_head"
    elif config.get("tie_word_embeddings"):
        head = "draft_embedding" if own_embed else "target_embedding"
    elif config.get("draft_vocab_size") is None:
        head = "target_head"
    else:
        head = "random"  # declared a vocabulary but saved no head: what was trained is lost
    return {"embedding": "draft" if own_embed else "target", "head": head, "d2t": "d2t" in names,
            "fc": "applied", "feed": "aux", "flags": sorted(variant_flags(config))}


def served_parts(config: Dict[str, Any], tensors: Collection[str] | Mapping[str, Sequence[int]], algorithm: str = "EAGLE3",
                 engine: str = "sglang", target_hidden_size: Optional[int] = None,
                 vllm_rules: Optional[Dict[str, Any]] = None,
                 flags_read: Optional[Collection[str]] = None,
                 placement: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The parts the engine serves, the parts the draft was trained with, and why they differ.

    ``config``: the draft's config.json (flat keys, as SGLang's transformers config sees them); ``tensors``: the
    names in its checkpoint (a name -> shape mapping also checks d2t's length against the served head);
    ``target_hidden_size``: the target's real width (None: assume the draft's config).
    Result: ``{"algorithm", "engine", "served": {embedding, head, head_rows, d2t, fc, feed}, "trained": {...},
    "swapped": [{"part", "served", "trained", "why"}], "why": {part: sentence}, "fails": message | None}``.
    ``head_rows``: the served head is cut to its first rows (target ids 0..rows-1), None when not cut.
    ``flags``: the variant flags the draft's config sets (trained) and those the installed engine's EAGLE-3 class
    reads of them (served; ``flags_read``, from remote_probes/draft_reading/field_table.py: None reads them all).
    vLLM (method eagle3) follows ``vllm_rules`` (vllm_capture.capture_rules; None: the newest vLLM read, see
    ``_vllm_parts``); vLLM's method "eagle" with an EAGLE-3 draft is not modelled (parts as trained, with a note).
    ``placement``: draft_reading/tensor_placement.place of the checkpoint's names on the installed engine. Where its
    loader drops names (SGLang), the parts are served from the tensors it places and ``tensors`` lists the parameters
    left at their initial values (trained: the names renamed as the loader would place them, ``[]``); where it
    refuses one (vLLM), ``fails`` quotes the engine.
    """
    if algorithm not in ALGORITHMS:
        raise ValueError("algorithm must be one of %s, got %r" % (", ".join(ALGORITHMS), algorithm))
    if placement and (placement.get("dropped") or placement.get("refused")):
        return _unplaced(config, tensors, algorithm, engine, target_hidden_size, vllm_rules, flags_read, placement)
    trained = trained_parts(config, tensors)
    hidden = _int(config.get("hidden_size"))
    vocab = _int(config.get("vocab_size"))
    dvs = _int(config.get("draft_vocab_size"))
    tied = bool(config.get("tie_word_embeddings"))
    # SGLang tests hasattr(config, "target_hidden_size"); a JSON null is treated as absent here (draft_inspect
    # reports it separately: SGLang cannot even build fc from it).
    cfg_th = _int(config.get("target_hidden_size"))
    t_hidden = target_hidden_size or cfg_th or hidden
    why: Dict[str, str] = {}
    served = dict(trained, head_rows=None)
    if flags_read is not None:
        served["flags"] = [f for f in trained["flags"] if f in flags_read]
        ignored = [f for f in trained["flags"] if f not in flags_read]
        why["flags"] = ("%s's EAGLE-3 class never reads %s (its source, read field by field), so it builds the draft "
                        "without %s" % (engine, ", ".join(ignored), "it" if len(ignored) == 1 else "them")
                        if ignored else "the engine reads every flag the config sets")
    fails: Optional[str] = None
    if engine == "vllm" and algorithm == "EAGLE3":
        return _vllm_parts(config, tensors, trained, served, why, vllm_rules, t_hidden)
    if engine != "sglang":
        why["engine"] = ("%s's embedding/head sharing is not modelled for %s: parts reported as trained"
                         % (engine, algorithm))
        return _result(algorithm, engine, served, trained, why, fails)
    shareable = cfg_th is None or cfg_th == hidden
    if algorithm == "EAGLE":
        served.update(embedding="target", head="target_head", d2t=False, feed="last_hidden")
        why["embedding"] = why["head"] = ("--speculative-algorithm EAGLE takes the non-EAGLE3 branch, which calls "
                                          "set_embed_and_head with the target's embedding and head (%s)"
                                          % SGLANG_REFS["other_branch"])
        why["d2t"] = ("the non-EAGLE3 branch never reads the draft's hot_token_id (d2t); only "
                      "--speculative-token-map maps ids (%s)" % SGLANG_REFS["other_branch"])
        why["feed"] = ("EAGLE feeds the target's last hidden state; aux states only for EAGLE3 (%s)"
                       % SGLANG_REFS["aux_capture"])
        if dvs is not None and vocab is not None and dvs < vocab:
            served["head_rows"] = dvs
            why["head"] += ("; the draft's logits processor keeps vocab_size = draft_vocab_size = %d and cuts the "
                            "target's %d logits to target ids 0..%d (%s)" % (dvs, vocab, dvs - 1,
                                                                             SGLANG_REFS["logits_cut"]))
        if t_hidden == hidden:
            served["fc"] = "skipped"
            why["fc"] = ("EAGLE feeds the target's last hidden state (width %s) = the embedding width, so fc is "
                         "skipped (%s)" % (t_hidden, SGLANG_REFS["fc_condition"]))
        else:
            fails = ("EAGLE feeds the target's last hidden state of width %s into a draft layer of width %s "
                     "(fc skipped: the width equals the target embedding's, %s)" % (t_hidden, hidden,
                                                                                    SGLANG_REFS["fc_condition"]))
        if tied:
            fails = ("the draft ties lm_head to embed_tokens (one module), so set_embed_and_head deletes the same "
                     "weight twice and raises AttributeError at startup (%s)" % SGLANG_REFS["set_embed_and_head"])
        return _result(algorithm, engine, served, trained, why, fails)
    if tied:
        own = "draft" if trained["embedding"] == "draft" else "random"
        served["embedding"] = "target" if shareable else own
        served["head"] = "target_embedding" if shareable else ("draft_embedding" if own == "draft" else "random")
        why["embedding"] = why["head"] = (
            ("a tied draft's lm_head is its embed_tokens module and set_embed puts the target's embedding there, so "
             "the target's embedding is also the head (%s; %s)" % (SGLANG_REFS["lm_head_choice"], SGLANG_REFS["set_embed"]))
            if shareable else
            ("target_hidden_size %s != hidden_size %s: set_embed does nothing, so the draft's own embed_tokens "
             "(random when the checkpoint has none) is embedding and head (%s)" % (cfg_th, hidden, SGLANG_REFS["set_embed"])))
        if dvs is not None and vocab is not None and dvs < vocab:
            served["head_rows"] = dvs
    elif dvs is None:
        served.update(embedding="target", head="target_head")
        why["embedding"] = why["head"] = ("no draft_vocab_size: load_lm_head_from_target, so set_embed_and_head "
                                          "installs the target's embedding and head (%s; %s)"
                                          % (SGLANG_REFS["lm_head_choice"], SGLANG_REFS["eagle3_branch"]))
        if not shareable:
            fails = ("no draft_vocab_size makes set_embed_and_head install the target's embedding and head (width "
                     "%s) into a draft of hidden_size %s, whatever target_hidden_size says; the first draft "
                     "forward fails on the width (%s)" % (cfg_th, hidden, SGLANG_REFS["set_embed_and_head"]))
    else:
        own = "draft" if trained["embedding"] == "draft" else "random"
        served["embedding"] = "target" if shareable else own
        served["head"] = "draft_head" if trained["head"] == "draft_head" else "random"
        why["embedding"] = (("set_embed shares the target's embedding (%s)" % SGLANG_REFS["set_embed"]) if shareable
                            else ("target_hidden_size %s != hidden_size %s: set_embed does nothing, so the draft's "
                                  "own embed_tokens is used (random when the checkpoint has none) (%s)"
                                  % (cfg_th, hidden, SGLANG_REFS["set_embed"])))
        if served["head"] == "random":
            why["head"] = ("draft_vocab_size=%s is declared but the checkpoint has no lm_head.weight: SGLang keeps "
                           "the randomly initialised ParallelLMHead (sglang PR 27908)" % dvs)
    rows = served["head_rows"] or dvs or vocab
    d2t_len = _d2t_length(tensors)
    if served["d2t"] and d2t_len is not None and rows is not None and d2t_len < rows:
        fails = ("d2t has %d entries but the served head has %d rows, so hot_token_id[topk_index] indexes past "
                 "its end at the first draft step (%s)" % (d2t_len, rows, SGLANG_REFS["hot_token_index"]))
    nested = config.get("eagle_config")
    eagle: Dict[str, Any] = nested if isinstance(nested, dict) else {}
    if eagle.get("use_aux_hidden_state", True) is False:
        served["feed"] = "last_hidden"
        served["fc"] = "skipped" if t_hidden == hidden else "applied"
        why["fc"] = ("eagle_config.use_aux_hidden_state is false: SGLang feeds the last hidden state, so fc is "
                     "%s (%s)" % (served["fc"], SGLANG_REFS["fc_condition"]))
        why["feed"] = ("eagle_config.use_aux_hidden_state is false: no aux states are captured (%s)"
                       % SGLANG_REFS["aux_capture"])
    return _result(algorithm, engine, served, trained, why, fails)


VLLM_REFS = {
    "share_embed": "v1/spec_decode/llm_base_proposer.py _maybe_share_embeddings (0.33.0), v1/spec_decode/eagle.py:854-873 "
                   "(0.11.0)",
    "share_head": "llm_base_proposer.py _maybe_share_lm_head (0.33.0), eagle.py:883-898 (0.11.0)",
    "d2t": "model_executor/models/llama_eagle3.py Eagle3LlamaForCausalLM.compute_logits and load_weights",
    "fc": "llama_eagle3.py combine_hidden_states: fc on the concatenated aux states, no width test",
}


def _vllm_parts(config: Dict[str, Any], tensors: Any, trained: Dict[str, Any], served: Dict[str, Any],
                why: Dict[str, str], rules: Optional[Dict[str, Any]], t_hidden: Optional[int]) -> Dict[str, Any]:
    """vLLM's eagle3 loading (read in 0.11.0 and 0.33.0; vllm_capture.py says which rule a tree follows):

    - embedding: 0.33.0 shares the target's when the checkpoint has no embed_tokens (has_own_embed_tokens false) and
      the widths match, keeps the draft's own otherwise; 0.11.0 shares whenever the shapes match.
    - head: the draft's own lm_head (draft_vocab_size rows); without one, 0.33.0 shares the target's and its logits
      processor keeps the first draft_vocab_size rows; 0.11.0 shares only an equal-shaped head (draft_vocab_size
      absent or equal to the target's) and otherwise keeps the random one.
    - d2t: applied as offsets when draft_vocab_size differs from the target's vocabulary; a missing d2t stays zeros
      (identity); fc always runs on the aux states.
    """
    head_rule = (rules or {}).get("lm_head_missing", "target_head")
    version = (rules or {}).get("version") or "0.33.0"
    names = {_canon(n) for n in tensors}
    hidden, vocab = _int(config.get("hidden_size")), _int(config.get("vocab_size"))
    dvs = _int(config.get("draft_vocab_size")) or vocab
    same_width = t_hidden is None or hidden is None or t_hidden == hidden
    own_embed = "embed_tokens.weight" in names
    if head_rule == "target_head":  # 0.33.0: share only what the checkpoint lacks
        served["embedding"] = "draft" if own_embed else ("target" if same_width else "random")
    else:  # 0.11.0: share an equal-shaped embedding, own or not
        served["embedding"] = "target" if same_width else ("draft" if own_embed else "random")
    why["embedding"] = "vLLM %s: %s (%s)" % (version, "the target's embedding is shared" if served["embedding"] ==
                                              "target" else "the draft keeps its own embedding", VLLM_REFS["share_embed"])
    if "lm_head.weight" in names:
        served["head"] = "draft_head"
    elif head_rule == "target_head" or dvs == vocab:
        served["head"] = "target_head"
        served["head_rows"] = dvs if vocab is not None and dvs is not None and dvs < (vocab or 0) else None
    else:
        served["head"] = "random"
    why["head"] = ("vLLM %s: %s (%s)" % (version, {
        "draft_head": "the draft's own lm_head", "random": "no lm_head.weight and a draft_vocab_size head the "
        "target's cannot replace: the randomly initialised head stays", "target_head": "no lm_head.weight: the "
        "target's lm_head is shared, its logits cut to the first %s rows" % dvs}[served["head"]], VLLM_REFS["share_head"]))
    served["d2t"] = bool(trained["d2t"]) and dvs != vocab
    why["d2t"] = "vLLM maps draft ids with arange + d2t when draft_vocab_size != vocab_size (%s)" % VLLM_REFS["d2t"]
    served["fc"], served["feed"] = "applied", "aux"
    why["fc"] = why["feed"] = VLLM_REFS["fc"]
    return _result("EAGLE3", "vllm", served, trained, why, None)


def _unplaced(config: Dict[str, Any], tensors: Any, algorithm: str, engine: str, target_hidden_size: Optional[int],
              vllm_rules: Optional[Dict[str, Any]], flags_read: Optional[Collection[str]],
              placement: Dict[str, Any]) -> Dict[str, Any]:
    """served_parts of a checkpoint whose loader cannot place some names: served from what it places, trained from
    the names it would place (placement["renames"])."""
    from remote_probes.eagle3.names import canonical_name

    given = tensors if hasattr(tensors, "items") else {n: None for n in tensors}
    shapes = {canonical_name(k): v for k, v in given.items()}
    placed = {canon: shapes.get(canonical_name(name)) for name, canon in placement["placed"].items()}
    out = served_parts(config, placed, algorithm, engine, target_hidden_size, vllm_rules, flags_read)
    served_names = dict(placement["placed"])
    trained_names = dict(served_names, **placement["renames"])
    trained = trained_parts(config, [canonical_name(n) for n in trained_names.values()])
    trained["flags"] = out["trained"]["flags"]
    served = dict(out["served"], tensors=list(placement["left_at_init"]))
    trained["tensors"] = []
    unplaced = placement["dropped"] + sorted(placement["refused"])
    rule = (placement.get("rules") or {}).get("unplaced") or {}
    where = "%s:%s" % (rule.get("file"), rule.get("line")) if rule else "its load_weights"
    why = dict(out["why"])
    fails = out["fails"]
    if placement["refused"]:
        name, says = sorted(placement["refused"].items())[0]
        fails = ("the loader places no parameter under %d tensor name%s (e.g. %s), so it refuses the draft at start: "
                 "There is no module or parameter named %s (%s)" % (len(placement["refused"]),
                                                                    "s" if len(placement["refused"]) > 1 else "",
                                                                    name, says, where)
                 if not says.startswith("KeyError") else
                 "the loader places no parameter under %s: %s (%s)" % (name, says, where))
    why["tensors"] = ("%s's loader places no parameter under %d tensor name%s (e.g. %s) and drops %s without a word "
                      "(%s), so %s stay%s at %s initial value%s" % (
                          engine, len(unplaced), "s" if len(unplaced) > 1 else "", unplaced[0],
                          "it" if len(unplaced) == 1 else "them", where,
                          ", ".join(served["tensors"][:3]) + (" and %d more" % (len(served["tensors"]) - 3)
                                                              if len(served["tensors"]) > 3 else ""),
                          "s" if len(served["tensors"]) == 1 else "", "its" if len(served["tensors"]) == 1 else "their",
                          "" if len(served["tensors"]) == 1 else "s"))
    if placement["refused"]:
        why["tensors"] = fails
    # saved name -> the name each build takes it under (eagle3/names.apply_renames): served, what the loader places;
    # trained, that and the unplaced names under the names the loader would place
    renamed = {canonical_name(new): shapes.get(canonical_name(old)) for old, new in trained_names.items()}
    if_placed = served_parts(config, renamed, algorithm, engine, target_hidden_size, vllm_rules, flags_read)["served"]
    # if_placed: the parts the engine would serve from the renamed copy (the counterfactual's ``tensors`` swap)
    return dict(_result(algorithm, engine, served, trained, why, fails),
                renames={"served": served_names, "trained": trained_names}, if_placed=dict(if_placed, tensors=[]))


def _d2t_length(tensors: Any) -> Optional[int]:
    if not hasattr(tensors, "items"):
        return None
    shape = next((v for k, v in tensors.items() if _canon(k) == "d2t"), None)
    shape = getattr(shape, "shape", shape)  # a tensor or a shape list
    return int(shape[0]) if shape is not None and len(shape) == 1 else None


def _result(algorithm: str, engine: str, served: Dict[str, Any], trained: Dict[str, Any], why: Dict[str, str],
            fails: Optional[str]) -> Dict[str, Any]:
    swapped: List[Dict[str, Any]] = []
    for part in ("embedding", "head", "d2t", "fc", "feed", "flags", "tensors"):
        if served.get(part) != trained.get(part):
            swapped.append({"part": part, "served": served[part], "trained": trained[part],
                            "why": why.get(part, "")})
    return {"algorithm": algorithm, "engine": engine, "served": served, "trained": trained, "swapped": swapped,
            "why": why, "fails": fails}


def describe(parts: Dict[str, Any]) -> str:
    """One sentence: which parts the engine swaps, or that it serves the draft as trained."""
    if parts.get("fails"):
        return "%s will fail to load this draft: %s" % ("vLLM" if parts.get("engine") == "vllm" else "SGLang",
                                                        parts["fails"])
    if not parts["swapped"]:
        return "served as trained (embedding %s, head %s, d2t %s)" % (
            parts["served"]["embedding"], parts["served"]["head"], "applied" if parts["served"]["d2t"] else "none")
    return "; ".join("%s: served %s, trained %s" % (s["part"], s["served"], s["trained"]) for s in parts["swapped"])
