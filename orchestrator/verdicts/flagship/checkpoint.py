"""Rules over the static reads: the draft checkpoint as draft_inspect reads it, and the installed engine's own source
(read by symbol or pattern, so that a version that lacks a read says so instead of deciding anything)."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.verdicts.context import RuleContext
from orchestrator.verdicts.registry import Verdict, verdict_rule


@dataclass(frozen=True)
class StaticCheck:
    finding: str  # draft_inspect's finding id
    supports: str  # the severity that supports the hypothesis
    refutes: tuple[str, ...]  # the severities that refute it (the rest decide nothing)
    absent: str  # the reason when the probe made no such finding


#: hypothesis -> the draft_inspect finding that decides it (a static finding supports; only a fix that recovers the
#: measured acceptance confirms: the weighing rules)
STATIC_CHECKS = {
    "lm_head_missing": StaticCheck("lm_head", "error", ("info", "warning"), "no lm_head finding"),
    "d2t_mapping": StaticCheck("d2t", "error", ("info",), "no d2t: the draft uses the full vocabulary"),
    "architecture": StaticCheck("architecture", "error", ("info",), "no architecture finding"),
    "lm_head_sharing": StaticCheck("lm_head", "warning", ("info",), "no lm_head finding"),
    "rope_mismatch": StaticCheck("rope", "warning", ("info",), "no RoPE finding"),
    # the draft's config field by field as the installed engine reads it (remote_probes/draft_reading/): a field that
    # contradicts the checkpoint supports; candidates to score (warning) and a clean reading refute
    "draft_field": StaticCheck("draft_fields", "error", ("info", "warning"), "the config was not read field by field"),
}


@verdict_rule("static_finding", decides=tuple(STATIC_CHECKS), reads=("inspect",))
def static_finding(ctx: RuleContext) -> Verdict | None:
    """The draft_inspect finding of this hypothesis (STATIC_CHECKS): its severity supports or refutes, its message is
    the reason. A finding the probe did not make reads as ``info``."""
    check = STATIC_CHECKS[ctx.hypothesis_id]
    inspect = ctx.inspect(ctx.step_register or "inspect")
    severity = inspect.severity_of(check.finding)
    finding = inspect.finding(check.finding)
    because = finding.message if finding else check.absent
    if severity == check.supports:
        return Verdict("supported", because)
    if severity in check.refutes:
        return Verdict("refuted", because)
    return None


@verdict_rule("layer_ids_read_alike", decides=("layer_id_convention",), reads=("inspect",))
def layer_ids_read_alike(ctx: RuleContext) -> Verdict | None:
    """Supported when SGLang and vLLM feed this draft different layers (the ids stored in one engine's convention),
    refuted when they feed the same."""
    inspect = ctx.inspect(ctx.step_register or "inspect")
    sglang, vllm = inspect.feeds.sglang, inspect.feeds.vllm
    version = f" {inspect.vllm.get('version')}" if inspect.vllm else ""
    because = f"SGLang feeds {sglang}, vLLM{version} feeds {vllm}"
    return Verdict("supported" if sglang != vllm else "refuted", because)


@verdict_rule("source_read_found", decides=("lm_head_sharing", "wiring", "flags_override"))
def source_read_found(ctx: RuleContext) -> Verdict | None:
    """A read of the engine's source that this version lacks leaves its hypothesis inconclusive, with the misses
    ("not found in sglang X: ..."); a read that finds its code decides nothing by itself."""
    reads = ctx.reads()
    if reads.found:
        return None
    return Verdict("inconclusive", "; ".join(reads.not_found))


@verdict_rule("vllm_lm_head_read", decides=("lm_head_sharing",))
def vllm_lm_head_read(ctx: RuleContext) -> Verdict | None:
    """vLLM's lm_head sharing code (``vllm_lm_head``) not found in this version: inconclusive, with the misses."""
    reads = ctx.reads()
    if reads.read("vllm_lm_head").found:
        return None
    return Verdict("inconclusive", "; ".join(reads.not_found))


@verdict_rule("d2t_conversion_read", decides=("d2t_mapping",))
def d2t_conversion_read(ctx: RuleContext) -> Verdict | None:
    """The engine's d2t conversion (read ``d2t``: SGLang's hot_token_id = d2t + arange; ``vllm_d2t``: vLLM's arange
    + d2t in compute_logits): supported when the code is there but does not add the offsets, inconclusive when this
    version lacks it."""
    reads = ctx.reads()
    rid = "vllm_d2t" if "vllm_d2t" in reads.by_id else "d2t"
    read = reads.read(rid)
    if not read.found:
        return Verdict("inconclusive", read.miss)
    if read.expect_passed:
        return None
    how = ("SGLang {v} converts d2t offsets with hot_token_id = d2t + arange" if rid == "d2t"
           else "vLLM {v} maps draft ids to arange + d2t")
    return Verdict("supported", f"{how.format(v=reads.version)}: {read.expect_passed}")


@verdict_rule("fc_skip_read", decides=("wrong_algorithm",))
def fc_skip_read(ctx: RuleContext) -> Verdict | None:
    """SGLang's fc condition in llama_eagle3.py not found in this version: inconclusive, with the miss."""
    read = ctx.reads().read("fc_skip")
    return None if read.found else Verdict("inconclusive", read.miss)
