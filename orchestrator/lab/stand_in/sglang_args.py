"""The lab server's command line: SGLang 0.5.12.post1's flags for this job, and SGLang's rules for resolving them.

Rules applied (research/sglang-eagle3-facts.md, sglang server_args.py 3551-3860 in 0.5.12.post1):
- ``--speculative-algorithm`` has no argparse choices; it is uppercased, NEXTN becomes EAGLE, an unknown name is
  ``ValueError: Unknown speculative algorithm name: X`` at start-up (not an argparse error).
- ``max_running_requests`` unset with speculative decoding -> 48, with SGLang's warning.
- all three of steps/topk/draft-tokens unset -> auto-chosen by the target architecture (Llama: (5, 4, 8));
  steps unset but topk or draft-tokens set -> SGLang's bare ``AssertionError``.
- topk == 1 forces ``num_draft_tokens = num_steps + 1`` with SGLang's warning line.

The parser: when an sglang source tree is on the lab server's path (the lab host puts the lab's ``site`` there), it is
SGLang's own, rebuilt from that tree (remote_probes/engine/sglang_argparse.py, the pre-flight check's), with prog
``sglang serve``, so an unknown or ambiguous flag exits 2 with the message that SGLang version gives, and the lab stands
in for whichever version the tree is (0.5.12.post1 or 0.5.23). Without a tree it falls back to its own subset of
0.5.12.post1's flags.

Lab-only flags (NOT SGLang flags; they start with ``--lab-``): ``--lab-capture-layers`` overrides which target
hidden states feed the draft (HF ``hidden_states`` indices, e.g. ``0,6,11``) so a playbook can verify a wiring fix;
``--lab-threads`` sets torch's CPU threads.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass, field
from typing import Any

SGLANG_VERSION = "0.5.12.post1"
KNOWN_ALGORITHMS = ("DFLASH", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM", "NONE")
LAB_ALGORITHMS = ("EAGLE", "EAGLE3")

W_MAX_RUNNING = ("Max running requests is reset to 48 for speculative decoding. You can override this by "
                 "explicitly setting --max-running-requests.")
W_DRAFT_TOKENS = ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                  "speculative_eagle_topk == 1")
W_SPEC_V2 = "Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding."
W_MIXED_CHUNK = "Mixed chunked prefill is disabled because of using eagle speculative decoding."

# Auto (steps, topk, draft tokens) by target architecture, server_args.auto_choose_speculative_params.
#: the target classes the lab runs: the default lab's Llama and the on-demand Qwen3 (transformers' classes of these
#: names), and the seed's Kimi-K2.5 wrapper, whose DeepSeek-V3 language model transformers runs
#: (orchestrator/lab/building/class_lab.py, remote_probes/evaluation/target_model.py)
LAB_ARCHITECTURES = ("LlamaForCausalLM", "Qwen3ForCausalLM", "KimiK25ForConditionalGeneration")
_AUTO_PARAMS = {"LlamaForCausalLM": (5, 4, 8), "Grok1ForCausalLM": (5, 4, 8), "Grok1VForCausalLM": (5, 4, 8)}


class StartupError(Exception):
    """A start-up failure reported the way SGLang reports it: ``kind`` is the Python exception name it raises."""

    def __init__(self, message: str, *, kind: str = "ValueError") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class LabServerArgs:
    """Resolved arguments; field names follow SGLang's ``ServerArgs`` (what /server_info returns)."""

    model_path: str
    tokenizer_path: str
    served_model_name: str
    host: str = "127.0.0.1"
    port: int = 30000
    dtype: str = "auto"
    trust_remote_code: bool = False
    chat_template: str | None = None
    mem_fraction_static: float | None = None
    max_running_requests: int | None = None
    context_length: int | None = None
    max_total_tokens: int | None = None
    chunked_prefill_size: int | None = None
    tp_size: int = 1
    attention_backend: str | None = None
    page_size: int = 1
    disable_cuda_graph: bool = False
    cuda_graph_max_bs: int | None = None
    log_level: str = "info"
    decode_log_interval: int = 40
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_draft_model_revision: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_token_map: str | None = None
    random_seed: int = 0
    enable_mixed_chunk: bool = False
    disable_overlap_schedule: bool = False
    device: str = "cpu"
    api_key: str | None = None
    admin_api_key: str | None = None
    lab_capture_layers: list[int] | None = None
    lab_threads: int = 1
    warnings: list[str] = field(default_factory=list)
    sglang_version: str = SGLANG_VERSION  # the version the lab stands in for (its parser's tree)
    #: whose loading rules the lab follows: "sglang" (server.py), or "vllm" (server_vllm.py, with the rules read
    #: from a vLLM tree by remote_probes/engine/vllm_capture.py; None there: the newest vLLM read)
    engine: str = "sglang"
    vllm_rules: dict[str, Any] | None = None
    #: every other field SGLang's parser (the tree's) gave, as parsed: /server_info reports them as SGLang reports
    #: its ServerArgs, so a requested flag the lab does not act on is still verified, not "unverified"
    parsed: dict[str, Any] = field(default_factory=dict)

    def public(self) -> dict[str, Any]:
        """The fields /server_info reports (everything but the lab's bookkeeping)."""
        own = {k: v for k, v in self.__dict__.items()
               if k not in ("warnings", "sglang_version", "engine", "vllm_rules", "parsed")}
        return {**self.parsed, **own}


class _Parser(argparse.ArgumentParser):
    """argparse as SGLang uses it (prog ``sglang serve``): unknown flags exit 2 with the usage line."""


@dataclass(frozen=True)
class SglangTree:
    """The sglang source tree the lab stands in for: its package directory, version and parser layout."""

    root: str
    version: str
    layout: str


def find_sglang_tree() -> SglangTree | None:
    """The sglang package on this process's path, found without importing it (find_spec of the top-level name)."""
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    root = os.path.realpath(list(spec.submodule_search_locations)[0])
    if not os.path.isfile(os.path.join(root, "srt", "server_args.py")):
        return None
    from remote_probes.engine.sglang_argparse import detect_layout

    version = next((d.version for d in importlib.metadata.distributions(path=[os.path.dirname(root)])
                    if (d.metadata["Name"] or "").lower() == "sglang"), None)
    return SglangTree(root=root, version=version or "unknown", layout=detect_layout(root))


def _add_lab_flags(p: argparse.ArgumentParser) -> None:
    lab = p.add_argument_group("lab-only flags (NOT SGLang flags)")
    lab.add_argument("--lab-capture-layers", default=None,
                     help="comma-separated HF hidden_states indices fed to the draft (0 = embedding output); "
                          "overrides SGLang's capture rule, to verify a wiring fix")
    lab.add_argument("--lab-threads", type=int, default=1,
                     help="torch CPU threads (default 1: batch-1 decoding is overhead-bound, and more threads "
                          "collapse when the CPU is shared)")


class _TreeParser(argparse.ArgumentParser):
    """SGLang's parser rebuilt from a tree (errors exit 2 with argparse's usage line, as SGLang's do)."""


def build_parser(tree: SglangTree | None = None, *, use_tree: bool = True) -> argparse.ArgumentParser:
    """The lab server's parser: SGLang's own from ``tree`` (default: the sglang on this process's path), else the
    lab's subset of 0.5.12.post1's flags. ``parser.sglang_tree`` says which (None: the subset)."""
    tree = tree or (find_sglang_tree() if use_tree else None)
    if tree is not None:
        from remote_probes.engine.sglang_argparse import build_parser as sglang_parser

        static, _info = sglang_parser(tree.root)
        # argparse's own error()/exit(), not the probe's raising ones: the lab server exits 2 with usage like SGLang
        parser = _TreeParser(prog=static.prog, description="The orchestrator lab's CPU stand-in for SGLang "
                             f"{tree.version}'s launch_server (its flags, read from the installed tree; NOT SGLang).",
                             parents=[static], add_help=False)
        _add_lab_flags(parser)
        parser.set_defaults(sglang_tree=tree)
        return parser
    return _subset_parser()


def _subset_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m orchestrator.lab.stand_in.server",
                description="The orchestrator lab's CPU stand-in for `python -m sglang.launch_server` "
                            f"(speaks SGLang {SGLANG_VERSION}'s flags and HTTP API; NOT SGLang).")
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--tokenizer-path", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--dtype", default="auto", choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--chat-template", default=None)
    p.add_argument("--mem-fraction-static", type=float, default=None)
    p.add_argument("--max-running-requests", type=int, default=None)
    p.add_argument("--context-length", type=int, default=None)
    p.add_argument("--max-total-tokens", type=int, default=None)
    p.add_argument("--chunked-prefill-size", type=int, default=None)
    p.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    # multi-node (orchestrator/lab/stand_in/ranks.py coordinates the ranks over TCP)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--dist-init-addr", default=None)
    p.add_argument("--attention-backend", default=None,
                   choices=["triton", "torch_native", "flex_attention", "flashinfer", "fa3", "fa4", "flashmla",
                            "cutlass_mla", "trtllm_mla", "trtllm_mha", "aiter", "wave", "intel_amx", "ascend"])
    p.add_argument("--page-size", type=int, default=None)
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--cuda-graph-max-bs", type=int, default=None)
    p.add_argument("--log-level", default="info")
    p.add_argument("--decode-log-interval", type=int, default=40)
    p.add_argument("--random-seed", type=int, default=0)
    p.add_argument("--enable-mixed-chunk", action="store_true")
    p.add_argument("--disable-overlap-schedule", action="store_true")
    p.add_argument("--device", default="cpu")
    p.add_argument("--api-key", default=None,
                   help="Set API key of the server. It is also used in the OpenAI API compatible server.")
    p.add_argument("--admin-api-key", default=None,
                   help="Set admin API key for administrative/control endpoints (e.g., /flush_cache).")
    p.add_argument("--speculative-algorithm", default=None)
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model",
                   dest="speculative_draft_model_path", default=None)
    p.add_argument("--speculative-draft-model-revision", default=None)
    p.add_argument("--speculative-num-steps", type=int, default=None)
    p.add_argument("--speculative-eagle-topk", type=int, default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    p.add_argument("--speculative-token-map", default=None)
    _add_lab_flags(p)
    p.set_defaults(sglang_tree=None)
    return p


def _capture_list(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise StartupError(f"--lab-capture-layers must be comma-separated integers, got {text!r}") from None
    if not values:
        raise StartupError("--lab-capture-layers is empty")
    return values


def _as_int(value: Any) -> Any:
    """An int flag SGLang types with its own parser (0.5.15.post1's ``human_readable_int``), which the static parser
    leaves as text: a plain number becomes the int SGLang reports; anything else stays as given."""
    return int(value) if isinstance(value, str) and value.strip().lstrip("-").isdigit() else value


def _check_grpc_port(args: LabServerArgs, tree: SglangTree | None) -> None:
    """SGLang 0.5.12.post1 and 0.5.15.post1 derive a gRPC port (``$SGLANG_GRPC_PORT``, else --port + 10000) and
    refuse the start when it passes 65535 (ServerArgs ``_handle_grpc``-era check, server_args.py:1154 / :3003);
    0.5.23 has no such check. Measured against a real 0.5.15.post1: bench/lab_vs_sglang.py."""
    if tree is not None:
        try:
            with open(os.path.join(tree.root, "srt", "server_args.py"), encoding="utf-8") as handle:
                if "must be between 1 and 65535" not in handle.read():
                    return
        except OSError:
            return
    env = os.environ.get("SGLANG_GRPC_PORT")
    grpc = int(env) if env and env.strip().lstrip("-").isdigit() else int(args.port) + 10000
    if not 1 <= grpc <= 65535:
        raise StartupError(f"SGLANG_GRPC_PORT ({grpc}) must be between 1 and 65535")


#: the attention backends that draft a tree over pages larger than one token, by version (0.5.12.post1
#: server_args.py:3839-3846; 0.5.23 arg_groups/speculative_hook.py:1268-1285, which adds triton and reworded the error)
PAGED_TREE_BACKENDS = {"0.5.12.post1": ("flashinfer", "fa3"), "0.5.23": ("flashinfer", "fa3", "triton")}


def _tree_rules(args: LabServerArgs) -> None:
    """SGLang's rules for ``--speculative-eagle-topk`` > 1 (tree drafting), in its words; the lab then drafts the tree
    as SGLang does (remote_probes/eagle3/tree.py)."""
    if args.attention_backend == "trtllm_mha":  # 0.5.12.post1 server_args.py:3818-3826, 0.5.23 hook 1176-1180
        raise StartupError("trtllm_mha backend only supports topk = 1 for speculative decoding.", kind="ValueError")
    backends = PAGED_TREE_BACKENDS.get(args.sglang_version, PAGED_TREE_BACKENDS[SGLANG_VERSION])
    if args.page_size > 1 and args.attention_backend not in backends:
        if args.sglang_version == SGLANG_VERSION:
            raise StartupError("speculative_eagle_topk > 1 with page_size > 1 is unstable and produces incorrect "
                               "results for paged attention backends. This combination is only supported for the "
                               "'flashinfer' backend.", kind="ValueError")
        raise StartupError(f"speculative_eagle_topk > 1 with page_size > 1 is only supported on {backends}; got "
                           f"attention_backend={args.attention_backend!r}. Use page_size == 1 or one of those "
                           "backends.", kind="ValueError")
    from remote_probes.eagle3.tree import candidate_count

    steps, topk, budget = args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens
    assert steps is not None and topk is not None and budget is not None  # resolved by the caller
    if budget < 1 or budget - 1 > candidate_count(steps, topk):
        # SGLang accepts the flags and fails in organize_draft_results' torch.topk on the first draft (its start-up
        # warm-up): the lab refuses at start-up with torch's own words
        raise StartupError(f"selected index k out of range (--speculative-num-draft-tokens {budget}: "
                           f"organize_draft_results ranks {candidate_count(steps, topk)} candidates of "
                           f"{steps} steps x topk {topk} for num_draft_tokens - 1)", kind="RuntimeError")


def resolve(ns: argparse.Namespace, *, target_architecture: str) -> LabServerArgs:
    """Apply SGLang's speculative-decoding rules to parsed flags. Raises StartupError as SGLang would fail."""
    tree: SglangTree | None = getattr(ns, "sglang_tree", None)

    def get(name: str, default: Any = None) -> Any:
        # SGLang's parser of another version may lack a field the lab keeps (0.5.23 has no --cuda-graph-max-bs)
        value = getattr(ns, name, default)
        return default if value is None and default is not None else value

    args = LabServerArgs(
        model_path=ns.model_path, tokenizer_path=get("tokenizer_path") or ns.model_path,
        served_model_name=get("served_model_name") or ns.model_path, host=get("host", "127.0.0.1"),
        port=get("port", 30000), dtype=get("dtype", "auto"), trust_remote_code=bool(get("trust_remote_code", False)),
        chat_template=get("chat_template"), mem_fraction_static=get("mem_fraction_static"),
        max_running_requests=get("max_running_requests"), context_length=_as_int(get("context_length")),
        max_total_tokens=_as_int(get("max_total_tokens")), chunked_prefill_size=_as_int(get("chunked_prefill_size")),
        tp_size=get("tp_size", 1),
        attention_backend=get("attention_backend"), page_size=_as_int(get("page_size")) or 1,
        disable_cuda_graph=bool(get("disable_cuda_graph", False)),
        cuda_graph_max_bs=get("cuda_graph_max_bs", get("cuda_graph_max_bs_decode")), log_level=get("log_level", "info"),
        decode_log_interval=get("decode_log_interval", 40), random_seed=get("random_seed", 0),
        enable_mixed_chunk=bool(get("enable_mixed_chunk", False)),
        disable_overlap_schedule=bool(get("disable_overlap_schedule", False)), device=get("device", "cpu"),
        api_key=get("api_key"), admin_api_key=get("admin_api_key"),
        speculative_algorithm=get("speculative_algorithm"),
        speculative_draft_model_path=get("speculative_draft_model_path"),
        speculative_draft_model_revision=get("speculative_draft_model_revision"),
        speculative_num_steps=get("speculative_num_steps"), speculative_eagle_topk=get("speculative_eagle_topk"),
        speculative_num_draft_tokens=get("speculative_num_draft_tokens"),
        speculative_token_map=get("speculative_token_map"),
        lab_capture_layers=_capture_list(ns.lab_capture_layers), lab_threads=max(1, ns.lab_threads),
        sglang_version=tree.version if tree else SGLANG_VERSION,
        parsed={k: v for k, v in vars(ns).items() if k != "sglang_tree" and not k.startswith("lab_")
                and isinstance(v, (str, int, float, bool, list, type(None)))} if tree is not None else {},
    )
    _check_grpc_port(args, tree)
    if args.tp_size != 1:
        raise StartupError(f"the lab runs on one CPU process; --tp-size {args.tp_size} is not supported")
    if args.decode_log_interval < 1:
        raise StartupError("--decode-log-interval must be >= 1")
    if args.speculative_draft_model_path is not None and args.speculative_draft_model_revision is None:
        args.speculative_draft_model_revision = "main"
    algo = args.speculative_algorithm
    if algo is not None:
        algo = algo.upper()
        known: tuple[str, ...] = (*KNOWN_ALGORITHMS, "NEXTN")
        if tree is not None:
            from remote_probes.engine.sglang_argparse import builtin_algorithms

            known = (*builtin_algorithms(tree.root), "NEXTN")
        # SGLang uppercases the name before SpeculativeAlgorithm.from_string, so its message shows it uppercased
        # (sglang 0.5.12.post1 srt/speculative/spec_info.py:54, 0.5.23 :65)
        if algo not in known:
            raise StartupError(f"Unknown speculative algorithm name: {algo}")
        if algo == "NEXTN":
            algo = "EAGLE"
        if algo == "NONE":
            algo = None
        args.speculative_algorithm = algo
    if algo is None:
        if args.lab_capture_layers is not None:
            raise StartupError("--lab-capture-layers needs speculative decoding (--speculative-algorithm EAGLE3)")
        return args
    if algo not in LAB_ALGORITHMS:
        raise StartupError(f"the orchestrator lab implements EAGLE and EAGLE3 only, not {algo}")
    if args.max_running_requests is None:
        args.max_running_requests = 48
        args.warnings.append(W_MAX_RUNNING)
    if args.speculative_eagle_topk is not None and args.speculative_eagle_topk > 1:
        args.disable_overlap_schedule = True
        args.warnings.append("Spec v1 is used for eagle/eagle3/standalone speculative decoding because "
                             "spec v2 currently only supports topk = 1.")
    else:
        args.warnings.append(W_SPEC_V2)
    if args.enable_mixed_chunk:
        args.enable_mixed_chunk = False
        args.warnings.append(W_MIXED_CHUNK)
    if args.speculative_num_steps is None:
        if args.speculative_eagle_topk is not None or args.speculative_num_draft_tokens is not None:
            # SGLang: a bare `assert self.speculative_eagle_topk is None and ...` (no message).
            raise StartupError("assert self.speculative_eagle_topk is None and self.speculative_num_draft_tokens is "
                               "None (set --speculative-num-steps too, or none of the three)", kind="AssertionError")
        steps, topk, draft = _AUTO_PARAMS.get(target_architecture, (3, 1, 4))
        args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens = steps, topk, draft
    if args.speculative_eagle_topk == 1 and args.speculative_num_draft_tokens != args.speculative_num_steps + 1:
        # sglang 0.5.12.post1 srt/server_args.py:3828 / 0.5.23 srt/arg_groups/speculative_hook.py:1255 (also when
        # draft tokens are unset: None != steps + 1)
        args.warnings.append(W_DRAFT_TOKENS)
        args.speculative_num_draft_tokens = args.speculative_num_steps + 1
    if args.speculative_eagle_topk is None:
        # Both versions then compare None > 1 (0.5.12.post1 server_args.py:3838, 0.5.23 speculative_hook.py:1274)
        raise StartupError("'>' not supported between instances of 'NoneType' and 'int' (SGLang compares "
                           "speculative_eagle_topk > 1 with topk unset: set --speculative-eagle-topk with "
                           "--speculative-num-steps)", kind="TypeError")
    if args.speculative_num_draft_tokens is None:
        # topk > 1 here (topk 1 was adjusted above): SGLang leaves the budget None (0.5.12.post1 server_args.py
        # 3828-3835 sets it for topk 1 only) and its EAGLE worker fails on it; the lab refuses at start-up instead
        raise StartupError("unsupported operand type(s) for -: 'NoneType' and 'int' (SGLang leaves "
                           "speculative_num_draft_tokens unset when speculative_eagle_topk > 1, and drafting "
                           "subtracts 1 from it: set --speculative-num-draft-tokens)", kind="TypeError")
    if args.speculative_num_steps < 1:
        raise StartupError(f"speculative_num_steps must be >= 1, got {args.speculative_num_steps}")
    if args.speculative_eagle_topk > 1:
        _tree_rules(args)
    if args.speculative_draft_model_path is None:
        raise StartupError(f"{algo} speculative decoding needs --speculative-draft-model-path on the lab")
    return args
