"""A byte-level BPE tokenizer trained on the lab corpus, saved so ``AutoTokenizer.from_pretrained`` loads it."""

from __future__ import annotations

EOS = "<|endoftext|>"


def train_tokenizer(texts: list[str], *, vocab_size: int = 1024):
    """Train byte-level BPE (deterministic for a given corpus) and wrap it as a PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, unk_token=None,
                                   pad_token=EOS, model_max_length=1 << 30)
