"""Deterministic CPU training of the lab's tiny target (HF Llama) and its EAGLE-3 draft (recipe:
research/lab-feasibility.md). torch/transformers/tokenizers are imported lazily (the ``lab`` extra).

Public API:
- ``train_target(out_dir, *, seed=0, progress=None, recipe=TargetRecipe()) -> Path``  HF model dir + tokenizer
  + ``prompts.json`` (held-out stdlib snippets) + ``lab_tokens.pt`` (the tokenised corpus, reused by drafts)
- ``train_draft(target_dir, out_dir, *, wiring, seed=0, steps=None, progress=None, layout=DraftLayout(),
  recipe=DraftRecipe()) -> Path``  an EAGLE-3 draft trained on ``wiring`` (HF hidden_states indices)
- ``ProgressFn = Callable[[str, float], None]`` (message, fraction done of the current stage)
Caching lives in ``orchestrator.lab.training.model_cache``; the pinned child process that runs these in ``orchestrator.lab.training.train_job``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from orchestrator.lab.training.draft_io import DraftLayout, save_draft

ProgressFn = Callable[[str, float], None]


@dataclass(frozen=True)
class TargetRecipe:
    vocab_size: int = 1024
    hidden_size: int = 128
    num_layers: int = 12
    num_heads: int = 4
    intermediate_size: int = 320
    corpus_bytes: int = 4_000_000
    steps: int = 560  # 707 in the feasibility recipe; 560 keeps the default lab build under 180 s on 2 cores
    batch: int = 16
    seq_len: int = 64
    lr: float = 4e-3
    threads: int = 2


@dataclass(frozen=True)
class DraftRecipe:
    draft_vocab_size: int = 512
    intermediate_size: int = 320
    ttt_steps: int = 3
    steps: int = 393
    batch: int = 16
    seq_len: int = 128
    chunks: int = 1024  # aux states precomputed for 1024 x 128 tokens (each seen ~6 times)
    lr: float = 3e-3
    step_decay: float = 0.8
    threads: int = 2


def _noop(_message: str, _fraction: float) -> None:
    pass


#: the target classes the lab trains (transformers' own layers): name -> (config class, model class); kimi is
#: DeepSeek-V3's language model, saved inside the Kimi-K2.5 wrapper (kimi_wrapper.py)
TARGET_CLASSES = ("llama", "qwen3", "kimi")


def _target_classes(target_class: str) -> tuple[Any, Any]:
    import transformers

    if target_class == "qwen3":
        return transformers.Qwen3Config, transformers.Qwen3ForCausalLM
    if target_class == "llama":
        return transformers.LlamaConfig, transformers.LlamaForCausalLM
    if target_class == "kimi":
        return transformers.DeepseekV3Config, transformers.DeepseekV3ForCausalLM
    raise ValueError(f"the lab trains {', '.join(TARGET_CLASSES)} targets, not {target_class!r}")


def _cosine(step: int, total: int, base: float, warmup: int = 20) -> float:
    if step < warmup:
        return base * (step + 1) / warmup
    return base * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def _prompts(held_out: dict[str, str], tokenizer, per_file: int = 3, length: int = 48) -> list[str]:
    """Snippets of held-out files that start at a def/class line: code the target continues fluently."""
    prompts: list[str] = []
    for text in held_out.values():
        lines = text.splitlines(keepends=True)
        starts = [i for i, line in enumerate(lines) if line.lstrip().startswith(("def ", "class "))]
        for i in starts[1::max(1, len(starts) // per_file)][:per_file]:
            ids = tokenizer("".join(lines[max(0, i - 6):i + 8]))["input_ids"][:length]
            prompts.append(tokenizer.decode(ids))
    return prompts


def train_target(out_dir: Path, *, seed: int = 0, progress: ProgressFn | None = None,
                 recipe: Any = TargetRecipe(), numerics: dict[str, Any] | None = None,
                 target_class: str = "llama", corpus: Any = None) -> Path:
    """Train the tiny target from scratch on the stdlib corpus (``corpus``: another corpus.Corpus, for a lab whose
    target knows more than its drafts) and save it in HF format: a Llama (``recipe`` a TargetRecipe), a Qwen3 (q/k
    norms, explicit head_dim: ``recipe`` a qwen3_train.Qwen3Recipe), or the seed's class (MLA and MoE inside the
    Kimi-K2.5 wrapper: ``recipe`` a kimi_train.KimiRecipe)."""
    import torch

    config_class, model_class = _target_classes(target_class)

    from orchestrator.lab.training.corpus import build_corpus
    from orchestrator.lab.training.tokenizer_build import train_tokenizer

    report = progress or _noop
    torch.set_num_threads(recipe.threads)
    torch.manual_seed(seed)
    started = time.monotonic()
    report("building the corpus from the Python standard library", 0.0)
    corpus = corpus or build_corpus(max_bytes=recipe.corpus_bytes)
    text = corpus.train_text
    pieces = [text[i:i + 100_000] for i in range(0, len(text), 100_000)]
    report(f"training the byte-level BPE tokenizer (vocab {recipe.vocab_size})", 0.02)
    tokenizer = train_tokenizer(pieces, vocab_size=recipe.vocab_size)
    ids = [t for enc in tokenizer.backend_tokenizer.encode_batch(pieces) for t in enc.ids]
    tokens = torch.tensor(ids, dtype=torch.long)
    # transformers 5 takes the legacy rope_theta through **kwargs (into rope_parameters)
    head = {"head_dim": recipe.head_dim} if target_class == "qwen3" else {}
    if target_class == "kimi":
        from orchestrator.lab.training.kimi_wrapper import deepseek_fields

        head = deepseek_fields(recipe)
    config = config_class(vocab_size=recipe.vocab_size, hidden_size=recipe.hidden_size,
                          intermediate_size=recipe.intermediate_size, num_hidden_layers=recipe.num_layers,
                          num_attention_heads=recipe.num_heads, num_key_value_heads=recipe.num_heads, **head,
                          max_position_embeddings=1024, rms_norm_eps=1e-6, rope_theta=10000.0,
                          tie_word_embeddings=False, bos_token_id=tokenizer.eos_token_id,
                          eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id)
    model = model_class(config)
    with torch.no_grad():  # scaled-down residual-branch outputs: deep-and-narrow trains faster (GPT-2 trick)
        for name, param in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                param.mul_(1.0 / math.sqrt(2 * recipe.num_layers))
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, betas=(0.9, 0.95), weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    loss_first = loss_last = float("nan")
    for step in range(recipe.steps):
        starts = torch.randint(0, tokens.numel() - recipe.seq_len - 1, (recipe.batch,), generator=gen)
        batch = torch.stack([tokens[s:s + recipe.seq_len] for s in starts.tolist()])
        for group in opt.param_groups:
            group["lr"] = _cosine(step, recipe.steps, recipe.lr)
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_last = loss.item()
        loss_first = loss_last if step == 0 else loss_first
        if step % 50 == 0 or step == recipe.steps - 1:
            report(f"{'' if target_class == 'llama' else target_class + ' '}target step {step + 1}/{recipe.steps} "
                   f"loss {loss_last:.2f}", (step + 1) / recipe.steps)
    model.eval()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    if target_class == "kimi":
        from orchestrator.lab.training.kimi_wrapper import wrap_language_model

        wrap_language_model(out_dir)
    tokenizer.save_pretrained(str(out_dir))
    torch.save(tokens, out_dir / "lab_tokens.pt")
    (out_dir / "prompts.json").write_text(json.dumps(_prompts(corpus.held_out, tokenizer), indent=1) + "\n")
    facts = {**_class_fact(target_class), "recipe": asdict(recipe), "seed": seed, "loss_first": loss_first,
             "loss_last": loss_last, "seconds": round(time.monotonic() - started, 1), "corpus_files": corpus.files,
             "corpus_tokens": int(tokens.numel()), "held_out": sorted(corpus.held_out), "numerics": numerics}
    (out_dir / "lab_recipe.json").write_text(json.dumps(facts, indent=2) + "\n")
    return out_dir


def _class_fact(target_class: str) -> dict[str, str]:
    """What lab_recipe.json records of the target's class (nothing for the default Llama)."""
    return {} if target_class == "llama" else {"target_class": target_class}


def _mla_dims(config: Any) -> dict[str, Any]:
    """An MLA target's attention dimensions, which its EAGLE-3 draft's layer shares (the published Kimi-K2.5 draft
    has the target's ranks and head dims); nothing for a grouped-query target."""
    from remote_probes.eagle3.draft import MLA_KEYS

    if getattr(config, MLA_KEYS[1], None) is None:
        return {}
    return {k: getattr(config, k) for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                            "v_head_dim")}


def _aux_dataset(model, tokens, wiring: list[int], recipe: DraftRecipe, seed: int, report: ProgressFn):
    """Precompute aux states (only the wired indices) and target argmax labels for fixed corpus chunks."""
    import torch

    length = recipe.seq_len + recipe.ttt_steps
    gen = torch.Generator().manual_seed(seed + 1)
    starts = torch.randint(0, tokens.numel() - length - 1, (recipe.chunks,), generator=gen).tolist()
    chunks = torch.stack([tokens[s:s + length] for s in starts])
    aux, labels = [], []
    with torch.no_grad():
        for i in range(0, recipe.chunks, 64):
            out = model(input_ids=chunks[i:i + 64], output_hidden_states=True)
            aux.append(torch.cat([out.hidden_states[j] for j in wiring], dim=-1))
            labels.append(out.logits.argmax(-1))
            report(f"aux states {i + 64}/{recipe.chunks}", 0.1 * (i + 64) / recipe.chunks)
    return chunks, torch.cat(aux), torch.cat(labels)


def train_draft(target_dir: Path, out_dir: Path, *, wiring: list[int], seed: int = 0, steps: int | None = None,
                progress: ProgressFn | None = None, layout: DraftLayout = DraftLayout(),
                recipe: DraftRecipe = DraftRecipe(), numerics: dict[str, Any] | None = None,
                target_class: str = "llama", tokens: Any = None) -> Path:
    """Train a one-layer EAGLE-3 draft (LlamaForCausalLMEagle3, as the published drafts of Llama and Qwen3 targets
    are; an MLA one, Eagle3DeepseekV2ForCausalLM, for an MLA target: the seed's Kimi-K2.5 draft) on ``wiring`` with
    3 test-time-training steps, for a target of ``target_class``; save in SpecForge layout.

    Embedding shared from the target (frozen); lm_head rows and final norm initialised from the target's. Trained on
    the target's corpus (its ``lab_tokens.pt``), or on ``tokens`` (a 1-D tensor of the target's token ids: a draft
    that never saw a part of what its target knows).
    :raises ValueError: a wiring outside 0..N for the target.
    """
    import torch
    import torch.nn.functional as F

    from remote_probes.eagle3.draft import DraftConfig, Eagle3Draft
    from remote_probes.evaluation.target_model import load_causal_lm

    report = progress or _noop
    torch.set_num_threads(recipe.threads)
    torch.manual_seed(seed)
    started = time.monotonic()
    target_dir = Path(target_dir)
    _target_classes(target_class)  # an unknown class refused by name
    model = load_causal_lm(str(target_dir), torch.float32)  # a wrapper's language model (the Kimi class)
    tc = model.config
    if not wiring or any(i < 0 or i > tc.num_hidden_layers for i in wiring):
        raise ValueError(f"wiring {wiring} is outside 0..{tc.num_hidden_layers}")
    tokens = torch.load(target_dir / "lab_tokens.pt") if tokens is None else tokens
    total = steps if steps is not None else recipe.steps
    chunks, aux, labels = _aux_dataset(model, tokens, wiring, recipe, seed, report)
    vocab, vd = tc.vocab_size, recipe.draft_vocab_size
    hot = torch.sort(torch.argsort(torch.bincount(labels.flatten(), minlength=vocab), descending=True,
                                   stable=True)[:vd]).values
    to_draft = torch.full((vocab,), -100, dtype=torch.long)
    to_draft[hot] = torch.arange(vd)
    cfg = DraftConfig.from_dict({"hidden_size": tc.hidden_size, "intermediate_size": recipe.intermediate_size,
                                 "num_attention_heads": tc.num_attention_heads,
                                 "num_key_value_heads": tc.num_key_value_heads, "vocab_size": vocab,
                                 "draft_vocab_size": vd, "rms_norm_eps": tc.rms_norm_eps, "rope_theta": 10000.0,
                                 "max_position_embeddings": tc.max_position_embeddings, **_mla_dims(tc)})
    draft = Eagle3Draft(cfg, num_aux=len(wiring))
    with torch.no_grad():
        draft.embed_tokens.weight.copy_(model.get_input_embeddings().weight)
        draft.lm_head.weight.copy_(model.lm_head.weight[hot])
        draft.norm.weight.copy_(model.model.norm.weight)
        draft.d2t.copy_(hot - torch.arange(vd))
    draft.embed_tokens.weight.requires_grad_(False)
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=recipe.lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed + 2)
    t, k_steps = recipe.seq_len, recipe.ttt_steps
    loss_first = loss_last = float("nan")
    draft.train()
    for step in range(total):
        idx = torch.randint(0, chunks.shape[0], (recipe.batch,), generator=gen)
        outs = draft.ttt_forward(aux[idx, :t], chunks[idx, 1:], steps=k_steps)
        loss = torch.zeros(())
        for k, out in enumerate(outs):  # step k at column t predicts the target's argmax at position t+1+k
            target = to_draft[labels[idx, 1 + k:1 + k + t]]
            loss = loss + recipe.step_decay ** k * F.cross_entropy(out.logits.flatten(0, 1), target.flatten(),
                                                                     ignore_index=-100)
        for group in opt.param_groups:
            group["lr"] = _cosine(step, total, recipe.lr)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        loss_last = loss.item()
        loss_first = loss_last if step == 0 else loss_first
        if step % 50 == 0 or step == total - 1:
            report(f"draft step {step + 1}/{total} loss {loss_last:.2f}", 0.1 + 0.9 * (step + 1) / total)
    draft.eval()
    facts: dict[str, Any] = {**_class_fact(target_class), "recipe": asdict(recipe), "seed": seed, "steps": total,
                             "loss_first": loss_first, "loss_last": loss_last,
                             "seconds": round(time.monotonic() - started, 1), "numerics": numerics}
    return save_draft(draft, Path(out_dir), wiring=list(wiring), layout=layout, recipe=facts)
