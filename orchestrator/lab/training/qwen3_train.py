"""Training of the lab's Qwen3 target and its EAGLE-3 drafts (orchestrator/lab/building/qwen3_lab.py says why and builds the
lab from them), in the pinned child process protocol of orchestrator/lab/training/train_job.py.

This module reuses train.py's pieces (corpus, tokenizer, schedule, prompts, aux dataset, the EAGLE-3 draft and its
SpecForge layout) and repeats only the two loops, with the model class as the one difference. Its own version,
``QWEN3_TRAINING_VERSION``, is in the Qwen3 models' cache keys beside the default lab's RECIPE_VERSION: bump it when
a change here alters what training produces (tests/lab/test_training_recipe.py catches a forgotten bump).

Public API: ``Qwen3Recipe``, ``QWEN3_DRAFT``, ``train_qwen3_target(...)``, ``train_qwen3_draft(...)``,
``run_job(job, progress) -> Path``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import OrchestratorError
from orchestrator.lab.training.train import DraftRecipe, ProgressFn

#: the version of this module's training (the loops): in the Qwen3 models' cache keys
QWEN3_TRAINING_VERSION = 1


@dataclass(frozen=True)
class Qwen3Recipe:
    """The default lab's target recipe at a reduced size (8 layers instead of 12, fewer steps, half the corpus):
    deep enough that [embed, mid, last] and [2, N//2, N-3] are different wirings, quick enough to build on demand."""

    vocab_size: int = 1024
    hidden_size: int = 128
    num_layers: int = 8
    num_heads: int = 4
    head_dim: int = 32
    intermediate_size: int = 320
    corpus_bytes: int = 2_000_000
    steps: int = 420
    batch: int = 16
    seq_len: int = 64
    lr: float = 4e-3
    # one thread, not the default lab's two: on a busy 2-core machine two OpenMP threads that wait for each other
    # cost ten times over (orchestrator/lab/building/inventory.py LAB_THREADS); the on-demand build must not take an hour
    threads: int = 1


#: the default lab's draft recipe, fewer steps and aux chunks (the target is smaller), at one thread
QWEN3_DRAFT = DraftRecipe(steps=300, chunks=768, threads=1)


def _noop(_message: str, _fraction: float) -> None:
    pass


def train_qwen3_target(out_dir: Path, *, seed: int = 0, progress: ProgressFn | None = None,
                       recipe: Qwen3Recipe = Qwen3Recipe(), numerics: dict[str, Any] | None = None) -> Path:
    """train.train_target with a Qwen3 model (q/k norms, explicit head_dim): same corpus, tokenizer and schedule."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from orchestrator.lab.training.corpus import build_corpus
    from orchestrator.lab.training.tokenizer_build import train_tokenizer
    from orchestrator.lab.training.train import _cosine, _prompts

    report = progress or _noop
    torch.set_num_threads(recipe.threads)
    torch.manual_seed(seed)
    started = time.monotonic()
    report("building the corpus from the Python standard library", 0.0)
    corpus = build_corpus(max_bytes=recipe.corpus_bytes)
    text = corpus.train_text
    pieces = [text[i:i + 100_000] for i in range(0, len(text), 100_000)]
    report(f"training the byte-level BPE tokenizer (vocab {recipe.vocab_size})", 0.02)
    tokenizer = train_tokenizer(pieces, vocab_size=recipe.vocab_size)
    tokens = torch.tensor([t for enc in tokenizer.backend_tokenizer.encode_batch(pieces) for t in enc.ids],
                          dtype=torch.long)
    config = Qwen3Config(vocab_size=recipe.vocab_size, hidden_size=recipe.hidden_size,
                         intermediate_size=recipe.intermediate_size, num_hidden_layers=recipe.num_layers,
                         num_attention_heads=recipe.num_heads, num_key_value_heads=recipe.num_heads,
                         head_dim=recipe.head_dim, max_position_embeddings=1024, rms_norm_eps=1e-6,
                         rope_theta=10000.0, tie_word_embeddings=False,  # type: ignore[call-arg]  # legacy rope_theta
                         bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.eos_token_id)
    model = Qwen3ForCausalLM(config)
    with torch.no_grad():  # scaled-down residual-branch outputs, as train.train_target does
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
            report(f"qwen3 target step {step + 1}/{recipe.steps} loss {loss_last:.2f}", (step + 1) / recipe.steps)
    model.eval()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    torch.save(tokens, out_dir / "lab_tokens.pt")
    (out_dir / "prompts.json").write_text(json.dumps(_prompts(corpus.held_out, tokenizer), indent=1) + "\n")
    facts = {"target_class": "qwen3", "recipe": asdict(recipe), "seed": seed, "loss_first": loss_first,
             "loss_last": loss_last, "seconds": round(time.monotonic() - started, 1), "corpus_files": corpus.files,
             "corpus_tokens": int(tokens.numel()), "held_out": sorted(corpus.held_out), "numerics": numerics}
    (out_dir / "lab_recipe.json").write_text(json.dumps(facts, indent=2) + "\n")
    return out_dir


def train_qwen3_draft(target_dir: Path, out_dir: Path, *, wiring: list[int], seed: int = 0,
                      progress: ProgressFn | None = None, recipe: DraftRecipe = QWEN3_DRAFT,
                      numerics: dict[str, Any] | None = None) -> Path:
    """train.train_draft against the Qwen3 target: the same one-layer EAGLE-3 draft (LlamaForCausalLMEagle3, as the
    published Qwen3 EAGLE-3 drafts are), trained on ``wiring`` with 3 test-time-training steps, SpecForge layout.

    :raises ValueError: a wiring outside 0..N for the target.
    """
    import torch
    import torch.nn.functional as F
    from transformers import Qwen3ForCausalLM

    from orchestrator.lab.training.draft_io import DraftLayout, save_draft
    from orchestrator.lab.training.train import _aux_dataset, _cosine
    from remote_probes.eagle3.draft import DraftConfig, Eagle3Draft

    report = progress or _noop
    torch.set_num_threads(recipe.threads)
    torch.manual_seed(seed)
    started = time.monotonic()
    model = Qwen3ForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    tc = model.config
    if not wiring or any(i < 0 or i > tc.num_hidden_layers for i in wiring):
        raise ValueError(f"wiring {wiring} is outside 0..{tc.num_hidden_layers}")
    tokens = torch.load(Path(target_dir) / "lab_tokens.pt")
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
                                 "max_position_embeddings": tc.max_position_embeddings})
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
    t, k_steps, total = recipe.seq_len, recipe.ttt_steps, recipe.steps
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
    facts: dict[str, Any] = {"target_class": "qwen3", "recipe": asdict(recipe), "seed": seed, "steps": total,
                             "loss_first": loss_first, "loss_last": loss_last,
                             "seconds": round(time.monotonic() - started, 1), "numerics": numerics}
    return save_draft(draft, Path(out_dir), wiring=list(wiring), layout=DraftLayout(), recipe=facts)


# -- the pinned child process (train_job's protocol: one JSON job on stdin, progress lines, then {"done": path}) --
def run_job(job: dict[str, Any], progress: ProgressFn | None) -> Path:
    """Run one Qwen3 training job in a child process with train_job.pinned_env (see train_job's module doc).

    :raises OrchestratorError: the child failed (its last stderr lines are in the message)."""
    from orchestrator.lab.training.train_job import pinned_env

    env = {**os.environ, **pinned_env(int(job["recipe"].get("threads", 2)))}
    repo = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join([repo, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.lab.training.qwen3_train"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(job))
    proc.stdin.close()
    done: str | None = None
    try:
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue  # a stray print from a library is not a protocol line
            if isinstance(msg, dict) and "progress" in msg and progress is not None:
                progress(str(msg["progress"][0]), float(msg["progress"][1]))
            elif isinstance(msg, dict) and "done" in msg:
                done = str(msg["done"])
        stderr = proc.stderr.read() if proc.stderr else ""
        code = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if code != 0 or done is None:
        tail = " | ".join(stderr.strip().splitlines()[-4:])
        raise OrchestratorError(f"qwen3 lab training ({job.get('kind')}) failed with exit status {code}: {tail}",
                                title="lab training failed")
    return Path(done)


def _main() -> int:
    import torch

    from orchestrator.lab.training.train_job import pinned_env

    job = json.loads(sys.stdin.read())
    torch.use_deterministic_algorithms(True)

    def report(message: str, fraction: float) -> None:
        print(json.dumps({"progress": [message, fraction]}), flush=True)

    pins: dict[str, Any] = {k: os.environ.get(k) for k in pinned_env(1)
                            if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    pins["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    if job["kind"] == "target":
        out = train_qwen3_target(Path(job["out"]), seed=job["seed"], progress=report,
                                 recipe=Qwen3Recipe(**job["recipe"]), numerics=pins)
    else:
        out = train_qwen3_draft(Path(job["target_dir"]), Path(job["out"]), wiring=list(job["wiring"]),
                                seed=job["seed"], progress=report, recipe=DraftRecipe(**job["recipe"]),
                                numerics=pins)
    print(json.dumps({"done": str(out)}), flush=True)
    return 0




if __name__ == "__main__":
    sys.exit(_main())
