"""The lab server's model runner: plain greedy decoding and greedy speculative decoding (EAGLE / EAGLE-3), a chain
(topk 1) or SGLang's tree (``--speculative-eagle-topk`` > 1: remote_probes/eagle3/tree.py, ``_tree_loop``).

Batch size 1, one request at a time. Speculative decoding really runs: the draft proposes ``num_steps`` tokens,
the target verifies them in one forward, the longest agreeing prefix plus the target's bonus token is kept and
both KV caches are cropped back to the verified prefix. Greedy verification makes the output identical to plain
greedy decoding (tests assert it). Accept length = completion tokens / verify forwards, as SGLang computes it.

SGLang's loading rules applied here (research/sglang-eagle3-facts.md):
- capture: EAGLE3 -> nested ``eagle_config.eagle_aux_hidden_state_layer_ids`` + 1, else ``[2, N//2, N-3]``
  (HF hidden_states indices; the top-level key is ignored); EAGLE (or ``use_aux_hidden_state: false``) -> the
  last hidden state (after the final norm, width H), so an EAGLE-3 draft's fc is skipped (width == hidden_size);
- which embedding, head and d2t the draft runs with: ``remote_probes/eagle3_served.served_parts`` for the
  algorithm served, the same resolution the draft test scores with (EAGLE: the target's embedding and head cut
  to draft_vocab_size rows, d2t ignored; EAGLE3: the target's head without draft_vocab_size, the target's
  embedding as a tied draft's head, a random head for a declared vocab without ``lm_head.weight``);
- ``d2t`` offsets -> target ids (``hot_token_id = d2t + arange``) where the parts apply it;
- a draft SGLang fails to load (``parts.fails``) fails the lab's startup too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from orchestrator.lab.stand_in.sglang_args import LAB_ARCHITECTURES, LabServerArgs, StartupError
from remote_probes.evaluation.decoding import Decoding, TokenChooser
from remote_probes.evaluation.penalties import NONE as NO_PENALTIES
from remote_probes.evaluation.penalties import RULES, Penalties, Rule

if TYPE_CHECKING:
    from remote_probes.eagle3.draft import Eagle3Draft


class DraftStepError(Exception):
    """A draft step failed the way the engine's own draft step fails (the server turns it into the engine's
    run-time failure: vLLM's dead EngineCore)."""

    def __init__(self, cause: Exception, frame: tuple[str, str, str]) -> None:
        super().__init__(str(cause))
        self.kind = type(cause).__name__
        self.frame = frame  # (file under vllm/, function, statement): where the engine's own code raises


#: the statements of vLLM's llama_eagle3.py that raise for these drafts (the lab runs the same operation)
D2T_SCATTER = ("model_executor/models/llama_eagle3.py", "compute_logits", "logits_new[:, targets] = logits")
FC_INPUT = ("model_executor/models/llama_eagle3.py", "combine_hidden_states", "return self.model.fc(hidden_states)")


@dataclass
class SpecCounters:
    verify_ct: int = 0
    accepted_tokens: int = 0     # tokens produced by verify cycles (accepted drafts + bonus)
    correct_drafts: int = 0
    proposed_drafts: int = 0

    def add(self, other: SpecCounters) -> None:
        self.verify_ct += other.verify_ct
        self.accepted_tokens += other.accepted_tokens
        self.correct_drafts += other.correct_drafts
        self.proposed_drafts += other.proposed_drafts


@dataclass
class Generation:
    output_ids: list[int]
    prompt_tokens: int
    finish_reason: dict[str, Any]
    spec: SpecCounters
    histogram: list[int]
    seconds: float


@dataclass
class DecodeStats:
    """What the ``Decode batch`` log line and internal_states report; reset by /flush_cache."""

    forward_ct: int = 0
    interval: SpecCounters = field(default_factory=SpecCounters)
    interval_tokens: int = 0
    interval_seconds: float = 0.0      # decode time only: idle time between requests is not counted
    mark: float = field(default_factory=time.monotonic)
    lifetime: SpecCounters = field(default_factory=SpecCounters)
    last_gen_throughput: float = 0.0
    tokens_in_use: int = 0
    avg_spec_accept_length: float | None = None


def crop_cache(cache: Any, length: int) -> None:
    """transformers 5.x ``DynamicCache.crop`` takes a NEGATIVE count of tokens to drop."""
    drop = cache.get_seq_length() - length
    if drop > 0:
        cache.crop(-drop)


def target_class_rule(config: dict[str, Any]) -> dict[str, Any] | None:
    """The capture rule of the target's own class in the sglang tree on the lab's path (target_capture.resolve: the
    class's ``set_eagle3_layers_to_capture``, its default ids, the id offset and its layer loop), or None when no
    tree is there or the class cannot be followed (then Llama's rule, as said in the notes)."""
    from remote_probes.engine.sglang_capture import find_sglang_root
    from remote_probes.engine.target_capture import resolve

    root = find_sglang_root()
    if root is None:
        return None
    rule = resolve(config, "sglang", root)
    return rule if rule.get("found") else None


def _check_embedding_capture(loop: dict[str, Any] | None = None) -> None:
    """Fail as the SGLang this lab stands in for fails when an eagle_config id asks for the embedding output.

    The rule is read from the sglang tree on the lab's path (remote_probes/engine/sglang_capture.py): 0.5.12.post1 adds
    ``hidden_states + residual`` with ``residual = None`` before layer 0 and its first forward raises TypeError;
    0.5.23's layer boundary captures the embedding itself. Only an id from the draft's config is checked: the
    lab-only ``--lab-capture-layers`` stands for an engine change, which may capture anything.
    """
    from remote_probes.engine.sglang_capture import capture_rules, find_sglang_root

    root = find_sglang_root()
    if root is None:
        raise StartupError("eagle_config id -1 asks for the embedding output, and no sglang tree is on the lab's "
                           "path to say whether the SGLang it stands in for can capture it")
    rules = capture_rules(root, loop)
    if rules["embedding"] is True:
        return
    where = "; ".join(f"{e['file']}:{e['line']}: {e['text']}" for e in rules["evidence"])
    raise StartupError("unsupported operand type(s) for +: 'Tensor' and 'NoneType' (eagle_config id -1 asks for "
                       "the embedding output, which this SGLang cannot capture"
                       + (f": {where})" if where else ")"), kind="TypeError")


class LabModelRunner:
    """Target + tokenizer (+ draft) loaded once; ``generate`` serves one request (callers hold a lock)."""

    def __init__(self, args: LabServerArgs, log: Callable[[str], None]) -> None:
        import json

        from transformers import AutoTokenizer, DynamicCache
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()

        self.args = args
        self.log = log
        self._cache_cls = DynamicCache
        torch.set_num_threads(args.lab_threads)
        torch.manual_seed(args.random_seed)
        path = Path(args.model_path)
        if not (path / "config.json").is_file():
            raise StartupError(f"model path {args.model_path} has no config.json (the lab loads local HF dirs only)",
                               kind="OSError")
        raw = json.loads((path / "config.json").read_text())
        arch = (raw.get("architectures") or ["LlamaForCausalLM"])[0]
        if arch not in LAB_ARCHITECTURES:
            raise StartupError(f"the lab serves {' and '.join(LAB_ARCHITECTURES)} targets only, {path} is {arch}")
        from remote_probes.evaluation.target_model import load_causal_lm

        self.target = load_causal_lm(str(path), torch.float32)  # a wrapper's language model (the Kimi class)
        self.target_config = raw
        self._architecture = str(arch)
        self.tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_path)
        self.config = self.target.config
        self.num_layers = int(self.config.num_hidden_layers)
        self.eos_id = self.tokenizer.eos_token_id
        self.stats = DecodeStats()
        self.draft: Eagle3Draft | None = None
        self.capture: list[int] = []
        self.notes: list[str] = []
        self.parts: dict[str, Any] = {}
        self.vllm_d2t_targets: torch.Tensor | None = None  # set where vLLM's d2t scatter must fail
        self.vllm_config_ids: list[int] | None = None  # the aux layer ids vLLM read from the draft config
        self.vllm_fc_short = False  # vLLM captures fewer aux states than the draft's fc takes
        if args.speculative_algorithm is not None:
            self._load_draft()

    @property
    def architecture(self) -> str:
        return self._architecture  # the served target's class (a wrapper's, not its language model's)

    def _mtp_model_types(self) -> tuple[str, ...]:
        """The draft model types the vLLM tree on the lab's path rewrites as DeepSeek MTP (none for SGLang, or
        without a tree: then nothing is refused for it)."""
        from remote_probes.draft_reading.engine_limits import limits_reading

        root = (self.args.vllm_rules or {}).get("root") if self.args.engine == "vllm" else None
        if not root:
            return ()
        limit = limits_reading(str(root), "vllm")["limits"].get("model_type") or {}
        return tuple(limit.get("values") or ())

    def _sglang_loader_check(self, config: dict[str, Any]) -> None:
        """SGLang picks the draft's class by its architecture and its EAGLE worker then reads the class's
        ``hot_token_id`` (remote_probes/engine/registry.py, read from the tree on the lab's path): a draft it refuses
        there is refused here, in its words and at its line, instead of being served as if it were an EAGLE-3 draft."""
        from remote_probes.engine.registry import sglang_draft_refusal
        from remote_probes.engine.sglang_capture import find_sglang_root

        root = find_sglang_root()
        archs = config.get("architectures") or ["LlamaForCausalLM"]
        said = sglang_draft_refusal(root, str(archs[0])) if root else None
        if said is not None:
            where = f" ({said['file']}:{said['line']}: {said['text']})" if said.get("file") else ""
            raise StartupError(f"{said['kind']}: {said['message']}{where}", kind=str(said["kind"]))

    def _load_draft(self) -> None:
        from orchestrator.lab.stand_in.field_fidelity import refused as refused_value
        from orchestrator.lab.stand_in.field_fidelity import unmodelled
        from remote_probes.draft_reading.field_table import flags_read
        from remote_probes.draft_reading.tensor_placement import placement_for
        from remote_probes.eagle3.checkpoint import DraftLoadError, read_state_dict
        from remote_probes.eagle3.config import flat_config
        from remote_probes.eagle3.names import apply_renames
        from remote_probes.eagle3.served import describe, served_parts
        from remote_probes.eagle3.validate import build_from_state

        args = self.args
        algorithm = "EAGLE3" if args.speculative_algorithm == "EAGLE3" else "EAGLE"  # is_eagle3() or not
        try:
            config, state, notes = read_state_dict(str(args.speculative_draft_model_path))
            if args.engine != "vllm" and algorithm == "EAGLE3":
                self._sglang_loader_check(config)
            says = refused_value(flat_config(config), self._mtp_model_types())
            if says is not None:  # the engine's own refusal at start, in its words
                raise StartupError(says, kind="ValueError")
            refused = unmodelled(flat_config(config), args.engine,
                                 getattr(self.config, "max_position_embeddings", None))
            if refused:  # served as if absent, the lab would measure a draft the engine never serves
                raise StartupError(
                    f"cannot load the draft model {args.speculative_draft_model_path}: the lab stands in for "
                    f"{args.engine} only where it serves a draft as {args.engine} does, and "
                    + "; ".join(f"{f} = {v!r} ({args.engine} {does})" for f, v, does in refused)
                    + " is not modelled here (orchestrator/lab/stand_in/field_fidelity.py)", kind="NotImplementedError")
            raw_d2t = state["d2t"].clone().long() if "d2t" in state else None
            # the variant flags the engine tree on the lab's path reads (its EAGLE-3 class, read field by field):
            # a flag the engine never reads is served without, as that engine serves it
            self.parts = served_parts(flat_config(config), state, algorithm, engine=args.engine,
                                      target_hidden_size=self.config.hidden_size, vllm_rules=args.vllm_rules,
                                      flags_read=flags_read(args.engine),
                                      placement=placement_for(args.engine, None,
                                                              str(args.speculative_draft_model_path)))
            if self.parts["fails"]:
                fails = self.parts["fails"]
                raise StartupError(f"cannot load the draft model {args.speculative_draft_model_path}: "
                                   f"{describe(self.parts)}", kind="AttributeError" if "AttributeError"
                                   in fails else "ValueError" if "There is no module or parameter" in fails
                                   else "KeyError" if "KeyError" in fails else "RuntimeError")
            state = apply_renames(state, (self.parts.get("renames") or {}).get("served") or {})
            self.draft = build_from_state(
                config, state, notes, strict=False, embed_tokens=self.target.get_input_embeddings().weight,
                lm_head=self.target.lm_head.weight, target_vocab_size=self.config.vocab_size,
                target_hidden_size=self.config.hidden_size, device="cpu", dtype=torch.float32,
                parts=self.parts["served"])
        except DraftLoadError as exc:
            raise StartupError(f"cannot load the draft model {args.speculative_draft_model_path}: {exc}") from None
        self.notes = list(self.draft.load_report.get("notes", []))
        if args.engine == "vllm" and self.parts["served"]["d2t"] and raw_d2t is not None:
            self._vllm_d2t_check(raw_d2t)
        self.notes += [f"{s['part']}: served {s['served']} (trained {s['trained']}): {s['why']}"
                       for s in self.parts["swapped"]]
        n = self.num_layers
        if args.lab_capture_layers is not None:
            self.capture = list(args.lab_capture_layers)
            self.notes.append(f"lab-only --lab-capture-layers: feeding hidden_states {self.capture}")
        elif self.parts["served"]["feed"] == "last_hidden":
            self.capture = [n]  # the target's last (final-normed) hidden state, width H: fc skipped
        elif args.engine == "vllm":
            self._vllm_capture(config, n)
        else:
            self._sglang_capture(config, n)
        limit = n if self.parts["served"]["feed"] == "last_hidden" else n - 1
        bad = [i for i in self.capture if i < 0 or i > limit]
        if bad:
            raise StartupError(f"aux hidden-state layers {self.capture} fall outside the target's {n} layers "
                               f"(capturable HF indices 0..{limit}): {bad}")

    def _sglang_capture(self, config: dict[str, Any], n: int) -> None:
        """SGLang's capture by the target class's own rule: nested eagle_config ids + the class's offset, else its
        default ids (target_capture.py); the embedding output only where the class's layer loop can capture it."""
        from remote_probes.eagle3.wiring import nested_ids

        rule = target_class_rule(self.target_config)
        ids = nested_ids(config)
        if rule is None:
            self.capture = [i + 1 for i in ids] if ids is not None else [2, n // 2, n - 3]
            self.notes.append(f"{self.architecture}: no sglang tree on the lab's path follows this class, so "
                              "Llama's rule (eagle_config ids + 1, else [2, N//2, N-3])")
        else:
            offset = int(rule.get("id_offset", 1))
            self.capture = [i + offset for i in ids] if ids is not None else list(rule["default_wiring"])
            self.notes.append(f"{rule['followed']} ({rule['capture']['where']}) captures hidden_states "
                              f"{self.capture}: " + (f"eagle_config ids {ids} + {offset}" if ids is not None else
                                                     f"its default {rule.get('default_rule')}") +
                              (f"; layer loop {rule['capture_loop']['where']}" if rule.get("capture_loop") else ""))
        if 0 in self.capture:
            _check_embedding_capture(rule.get("capture_loop") if rule else None)

    def _vllm_d2t_check(self, d2t: torch.Tensor) -> None:
        """vLLM loads d2t as it is (no range check) and scatters the draft's logits with it at every draft step
        (llama_eagle3.py ``compute_logits``: ``logits_new[:, arange + d2t] = logits``). Where that maps past the
        target's vocabulary, the lab keeps vLLM's targets so the first draft step raises as vLLM's Worker does,
        instead of serving the clamped mapping (what the SGLang stand-in and the draft test do)."""
        targets = torch.arange(d2t.shape[0]) + d2t
        vocab = int(self.config.vocab_size)
        bad = int(((targets < 0) | (targets >= vocab)).sum())
        if bad:
            self.vllm_d2t_targets = targets
            self.notes.append(f"vLLM applies d2t as offsets with no range check: {bad} draft ids map past the "
                              f"target vocab [0, {vocab}), so compute_logits fails at the first draft step")

    def _vllm_compute_logits(self) -> None:
        """vLLM's scatter of the draft logits into the target vocabulary, run for its failure (see above)."""
        targets = self.vllm_d2t_targets
        assert targets is not None
        logits_new = torch.full((1, int(self.config.vocab_size)), float("-inf"))
        try:
            logits_new[:, targets] = torch.zeros(1, targets.shape[0])
        except IndexError as exc:  # "index 1028 is out of bounds for dimension 0 with size 1024", torch's words
            raise DraftStepError(exc, D2T_SCATTER) from None

    def _vllm_capture(self, config: dict[str, Any], n: int) -> None:
        """vLLM's reading of the draft config (remote_probes/engine/vllm_capture.py), failing where that vLLM fails."""
        from remote_probes.engine.vllm_capture import NEWEST, config_ids, vllm_wiring

        rules = self.args.vllm_rules or NEWEST
        wiring = vllm_wiring(config, n, rules)
        ids = config_ids(config, rules)
        if wiring is None:
            if 0 in (ids or []) and rules.get("embedding") is False:
                raise StartupError("unsupported operand type(s) for +: 'Tensor' and 'NoneType' (aux layer id 0 "
                                   f"asks for the embedding output, which vLLM {rules.get('version')} captures at "
                                   "layer entry before any residual exists)", kind="TypeError")
            if rules.get("capture") != "boundary":
                raise StartupError(f"aux hidden-state layer ids {ids} fall outside the target's {n} layers: vLLM "
                                   f"{rules.get('version')} captures fewer states than the draft's fc expects")
            # vLLM sets the ids as given and never checks them (gpu_model_runner.py
            # _setup_eagle3_aux_hidden_state_outputs); a layer boundary no id names is simply not captured, so it
            # starts, and the first draft step's fc gets fewer states than it was built for (combine_hidden_states)
            top = n + (rules.get("max_index") or 0)
            wiring = sorted({i for i in ids or [] if 0 <= i <= top})
            self.vllm_fc_short = True
            self.notes.append(f"vLLM {rules.get('version')} captures only hidden_states {wiring} of ids {ids}: the "
                              "draft's fc expects one state per id, so the first draft step fails")
        self.capture = wiring
        self.vllm_config_ids = ids
        self.notes.append(f"vLLM {rules.get('version')} ({rules.get('runner')} runner) feeds hidden_states "
                          f"{wiring}: " + (f"ids {ids} read from the draft config" if ids is not None else
                                           "the draft config gives no ids it reads, so (2, N//2, N-3)"))

    # -- forward helpers --------------------------------------------------------------------------------------
    def _target(self, ids: torch.Tensor, cache: Any, hidden: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The target's logits for every position of ``ids`` ([positions, vocab]) and the captured states."""
        out = self.target(input_ids=ids, cache=cache, use_cache=True, output_hidden_states=hidden)
        aux = torch.cat([out.hidden_states[i] for i in self.capture], dim=-1) if hidden else None
        return out.logits[0], aux

    def _draft_chain(self, tokens: torch.Tensor, aux: torch.Tensor, dcache: Any, steps: int) -> list[int]:
        draft = self.draft
        assert draft is not None
        if self.vllm_fc_short:  # vLLM's fc input, as its CPU gemm reshapes it (layers/utils.py onednn_mm)
            try:
                aux.reshape(-1, draft.fc.in_features)
            except RuntimeError as exc:  # "shape '[-1, 384]' is invalid for input of size 6656", torch's words
                raise DraftStepError(exc, FC_INPUT) from None
        if self.vllm_d2t_targets is not None:
            self._vllm_compute_logits()
        return draft.propose(tokens, aux, dcache, steps)

    # -- public -----------------------------------------------------------------------------------------------
    def generate(self, input_ids: list[int], *, max_new_tokens: int, stop: list[str], stop_token_ids: list[int],
                 ignore_eos: bool, on_step: Callable[[list[int]], None] | None = None,
                 penalties: Penalties = NO_PENALTIES, rule: Rule = RULES["vllm"], temperature: float = 0.0,
                 seed: int | None = None, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0,
                 threshold_single: float = 1.0, threshold_acc: float = 1.0) -> Generation:
        """Greedy generation (speculative when a draft is loaded); ``on_step`` gets the ids so far. ``penalties``
        reach the target's logits only, as the engine of ``rule`` applies them (remote_probes/evaluation/penalties.py:
        vLLM's exact penalised greedy decoding, or SGLang's relaxed one in speculative decoding). ``temperature``
        > 0 samples, verifying drafts as vLLM's rejection sampler and SGLang's target-only kernel do
        (remote_probes/evaluation/decoding.py; ``seed`` its generator),
        with ``top_k``/``top_p`` cutting the target's distribution and ``min_p`` (no draft only) as vLLM's do;
        ``threshold_single``/``threshold_acc``: SGLang's acceptance thresholds (1.0: its default, vLLM's rule)."""
        if not input_ids:
            raise ValueError("the prompt is empty")
        limit = int(getattr(self.config, "max_position_embeddings", 2048))
        if len(input_ids) + max_new_tokens + (self.args.speculative_num_draft_tokens or 0) > limit:
            raise ValueError(f"prompt ({len(input_ids)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the "
                             f"model's context length {limit}")
        started = time.monotonic()
        stops = set(stop_token_ids) | ({self.eos_id} if not ignore_eos and self.eos_id is not None else set())
        spec, hist = SpecCounters(), [0] * ((self.args.speculative_num_steps or 0) + 1)
        out: list[int] = []
        finish: dict[str, Any] = {"type": "length", "length": max_new_tokens}

        def accept(tokens: list[int]) -> bool:
            nonlocal finish
            for t in tokens:
                out.append(t)
                if t in stops:
                    finish = {"type": "stop", "matched": t}
                    return True
                text_hit = self._stop_string(out, stop)
                if text_hit is not None:
                    finish = {"type": "stop", "matched": text_hit}
                    return True
                if len(out) >= max_new_tokens:
                    return True
            return False

        with torch.inference_mode():
            cache = self._cache_cls(config=self.config)
            ids = torch.tensor([input_ids])
            use_spec = self.draft is not None
            choose = TokenChooser(Decoding(penalties, rule, temperature, seed, top_k, top_p, min_p,
                                               threshold_single, threshold_acc), input_ids)
            logits, aux = self._target(ids, cache, hidden=use_spec)
            first = [choose.next(logits[-1:], out)]
            took = time.monotonic() - started
            self.log(f"Prefill batch, #new-seq: 1, #new-token: {len(input_ids)}, #cached-token: 0, token usage: 0.00, "
                     f"#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, "
                     f"input throughput (token/s): {len(input_ids) / max(took, 1e-9):.2f}")
            self.stats.mark = time.monotonic()
            done = max_new_tokens <= 0 or accept(first)
            if use_spec and not done and int(self.args.speculative_eagle_topk or 1) > 1:
                self._tree_loop(ids, aux, cache, out, accept, spec, hist, on_step, choose)
            elif use_spec and not done:
                self._spec_loop(ids, aux, cache, out, accept, spec, hist, on_step, choose)
            else:
                while not done:
                    if on_step:
                        on_step(out)
                    logits, _ = self._target(torch.tensor([[out[-1]]]), cache, hidden=False)
                    self._count_forward(1, None, cache.get_seq_length())
                    done = accept([choose.next(logits[-1:], out)])
        return Generation(output_ids=out, prompt_tokens=len(input_ids), finish_reason=finish, spec=spec,
                          histogram=hist, seconds=time.monotonic() - started)

    def _spec_loop(self, ids, aux, cache, out, accept, spec: SpecCounters, hist: list[int], on_step,
                   choose: TokenChooser) -> None:
        steps = int(self.args.speculative_num_steps or 1)
        dcache = self.draft_cache()
        n = ids.shape[1]                       # verified positions 0..n-1 in both caches
        draft_tokens = torch.cat([ids[:, 1:], torch.tensor([[out[-1]]])], dim=1)
        draft_aux = aux
        fed: list[int] = []                    # SGLang's penaliser: one token fed per verify cycle
        while True:
            if on_step:
                on_step(out)
            proposal = self._draft_chain(draft_tokens, draft_aux, dcache, steps)
            verify_in = torch.tensor([[out[-1], *proposal]])
            logits, vaux = self._target(verify_in, cache, hidden=True)
            assert vaux is not None  # hidden=True
            # vLLM: position k is verified against the output so far and the k draft tokens before it
            # (_combine_outputs_with_spec_tokens); SGLang: every position against the tokens its penaliser was fed,
            # the last output token before each cycle (penalties.py); unpenalised, a plain argmax or draw
            if choose.decoding.rule.per_position:
                histories = [out + proposal[:k] for k in range(steps + 1)]
            else:
                fed.append(out[-1])
                histories = [fed] * (steps + 1)
            m, after = choose.verify(logits, histories, proposal)
            new = proposal[:m] + [after]
            cycle = SpecCounters(verify_ct=1, accepted_tokens=m + 1, correct_drafts=m, proposed_drafts=steps)
            spec.add(cycle)
            hist[m] += 1
            crop_cache(cache, n + m + 1)       # keep out[-1] (at n) and the m accepted drafts
            self._count_forward(m + 1, cycle, n + m + 1)
            dcache.crop(n)                     # draft columns 0..n-1 are verified; redo the speculative ones
            draft_tokens = torch.tensor([new])
            draft_aux = vaux[:, : m + 1]
            n += m + 1
            if accept(new):
                return

    def _tree_loop(self, ids, aux, cache, out, accept, spec: SpecCounters, hist: list[int], on_step,
                   choose: TokenChooser) -> None:
        """SGLang's tree drafting (``--speculative-eagle-topk`` > 1; remote_probes/eagle3/tree.py): the draft's tree
        of ``num_draft_tokens`` nodes verified in one target forward under the tree mask, the accepted path walked
        greedily or, for a sampled request, as SGLang's kernel walks it (decoding.py ``walk_tree``), the target's KV
        cut to the prefix and that path."""
        from remote_probes.eagle3.tree import keep_positions, propose_tree, tree_attention

        draft = self.draft
        assert draft is not None
        steps, topk = int(self.args.speculative_num_steps or 1), int(self.args.speculative_eagle_topk or 1)
        budget = int(self.args.speculative_num_draft_tokens or steps + 1)
        dcache = self.draft_cache()
        n = ids.shape[1]
        draft_tokens = torch.cat([ids[:, 1:], torch.tensor([[out[-1]]])], dim=1)
        draft_aux = aux
        fed: list[int] = []                    # SGLang's penaliser: one token fed per verify cycle
        while True:
            if on_step:
                on_step(out)
            tree = propose_tree(draft, draft_tokens, draft_aux, dcache, out[-1], steps, topk, budget)
            mask, positions = tree_attention(tree, n)
            result = self.target(input_ids=torch.tensor([tree.tokens]), cache=cache, use_cache=True,
                                 output_hidden_states=True, attention_mask=mask, position_ids=positions)
            logits = result.logits[0]
            vaux = torch.cat([result.hidden_states[i] for i in self.capture], dim=-1)
            if choose.decoding.rule.per_position:
                histories = [out + [tree.tokens[p] for p in tree.path(node)] for node in range(len(tree.tokens))]
            else:
                fed.append(out[-1])
                histories = [fed] * len(tree.tokens)
            path, after = choose.walk_tree(logits, histories, tree)  # greedy, or SGLang's sampled walk
            m = len(path)
            new = [tree.tokens[p] for p in path] + [after]
            cycle = SpecCounters(verify_ct=1, accepted_tokens=m + 1, correct_drafts=m, proposed_drafts=tree.drafts)
            spec.add(cycle)
            hist[m] += 1
            keep_positions(cache, list(range(n)) + [n + p for p in [0, *path]])
            self._count_forward(m + 1, cycle, n + m + 1)
            dcache.crop(n)
            draft_tokens = torch.tensor([new])
            draft_aux = vaux[:, [0, *path]]
            n += m + 1
            if accept(new):
                return

    def draft_cache(self) -> Any:
        from remote_probes.eagle3.draft import DraftKVCache

        return DraftKVCache()

    def _stop_string(self, out: list[int], stop: list[str]) -> str | None:
        if not stop:
            return None
        text = self.tokenizer.decode(out[-32:], skip_special_tokens=True)  # a stop string ends in the tail
        return next((s for s in stop if s and s in text), None)

    def _count_forward(self, tokens: int, cycle: SpecCounters | None, in_use: int) -> None:
        stats = self.stats
        stats.forward_ct += 1
        stats.tokens_in_use = in_use
        now = time.monotonic()
        stats.interval_seconds += now - stats.mark
        stats.mark = now
        stats.interval_tokens += tokens
        if cycle is not None:
            stats.interval.add(cycle)
            stats.lifetime.add(cycle)
        if stats.forward_ct % self.args.decode_log_interval == 0:
            self._decode_log()

    def _decode_log(self) -> None:
        stats = self.stats
        rate = stats.interval_tokens / max(stats.interval_seconds, 1e-9)
        stats.last_gen_throughput = rate
        spec = ""
        if self.draft is not None and stats.interval.verify_ct:
            acc_len = stats.interval.accepted_tokens / stats.interval.verify_ct
            acc_rate = stats.interval.correct_drafts / max(stats.interval.proposed_drafts, 1)
            spec = f"accept len: {acc_len:.2f}, accept rate: {acc_rate:.2f}, "
            life = stats.lifetime
            stats.avg_spec_accept_length = life.accepted_tokens / max(life.verify_ct, 1)
        self.log(f"Decode batch, #running-req: 1, #token: {stats.tokens_in_use}, token usage: 0.00, {spec}"
                 f"cuda graph: False, gen throughput (token/s): {rate:.2f}, #queue-req: 0")
        stats.interval, stats.interval_tokens, stats.interval_seconds = SpecCounters(), 0, 0.0

    def reset_stats(self) -> None:
        self.stats = DecodeStats()
